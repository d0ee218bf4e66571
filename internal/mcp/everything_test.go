package mcp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// everythingName is the server's name in the configurations below.
const everythingName = "everything"

// everythingTools are the tools server-everything lists to every client,
// whatever its capabilities, with their readOnlyHint. The tools it adds
// for clients that offer roots, sampling or elicitation are not here:
// toolbus offers none of them; nor is simulate-research-query, which it
// lists to all but which can only be called as a task (checkTaskOnly).
var everythingTools = map[string]bool{
	"echo":                           true,
	"get-annotated-message":          true,
	"get-env":                        true,
	"get-resource-links":             true,
	"get-resource-reference":         true,
	"get-structured-content":         true,
	"get-sum":                        true,
	"get-tiny-image":                 true,
	"gzip-file-as-resource":          false,
	"toggle-simulated-logging":       false,
	"toggle-subscriber-updates":      false,
	"trigger-long-running-operation": true,
}

// everythingChecks are what TestEverything checks over each transport, in
// order, each through toolbus as an agent calls a tool.
var everythingChecks = []struct {
	name  string
	check func(t *testing.T, f *fleet, transport string)
}{
	{"discovery", checkDiscovery},
	{"task-only tool", checkTaskOnly},
	{"echo", func(t *testing.T, f *fleet, _ string) {
		if res := f.call(t, "echo", `{"message":"hi"}`, nil); res.Error != nil || res.LLMContent != "Echo: hi" {
			t.Errorf("echo: %+v, want llmContent %q", res, "Echo: hi")
		}
	}},
	{"get-sum", func(t *testing.T, f *fleet, _ string) {
		res := f.call(t, "get-sum", `{"a":2,"b":3}`, nil)
		if res.Error != nil || !strings.Contains(res.LLMContent, "5") {
			t.Errorf("get-sum 2+3: %+v, want a text with 5 in it", res)
		}
	}},
	{"get-tiny-image", checkImage},
	{"get-resource-links", func(t *testing.T, f *fleet, _ string) {
		res := f.call(t, "get-resource-links", `{"count":2}`, nil)
		if res.Error != nil || strings.Count(res.LLMContent, "Resource Link: ") != 2 || len(res.Parts) != 3 ||
			res.Parts[0].Type != events.PartText || res.Parts[1].Type != events.PartLink || res.Parts[2].Type != events.PartLink {
			t.Errorf("get-resource-links 2: %+v, want two \"Resource Link:\" lines, and its text and two links as parts", res)
		}
	}},
	{"progress", checkProgress},
	{"cancel", checkCancel},
}

// TestEverything runs toolbus against the MCP reference server,
// server-everything, over stdio and over streamable HTTP: discovery and
// calls of each kind of result, progress and cancel; over stdio, a server
// killed from outside is restarted.
func TestEverything(t *testing.T) {
	t.Parallel()
	t.Run("stdio", func(t *testing.T) {
		command, args := npmpeer.EverythingStdio(t)
		server := map[string]any{"command": command, "args": args, "trust": true}
		f := startEverything(t, server)
		for _, c := range everythingChecks {
			t.Run(c.name, func(t *testing.T) { c.check(t, f, "stdio") })
		}
		t.Run("killed", func(t *testing.T) { checkKilled(t, f) })
	})
	t.Run("http", func(t *testing.T) {
		url := npmpeer.EverythingHTTP(t)
		f := startEverything(t, map[string]any{"httpUrl": url, "trust": true})
		for _, c := range everythingChecks {
			t.Run(c.name, func(t *testing.T) { c.check(t, f, "http") })
		}
		t.Run("through the facade", func(t *testing.T) { checkEverythingFidelity(t, f, url) })
	})
}

// checkEverythingFidelity: through the facade, server-everything's tools
// are listed as it lists them (titles, outputSchema, annotations), and
// its results are as it sends them: structuredContent, annotated text and
// image, resource links, embedded text and blob resources.
func checkEverythingFidelity(t *testing.T, f *fleet, url string) {
	facade := serveFacade(t, f.bus)
	differential(t, url, facade, []call{
		{"echo", `{"message":"hi"}`},
		{"get-sum", `{"a":2,"b":3}`},
		{"get-structured-content", `{"location":"Chicago"}`},
		{"get-annotated-message", `{"messageType":"error","includeImage":true}`},
		{"get-annotated-message", `{"messageType":"debug","includeImage":false}`},
		{"get-resource-links", `{"count":3}`},
		{"get-resource-reference", `{"resourceType":"Text","resourceId":2}`},
		{"get-resource-reference", `{"resourceType":"Blob","resourceId":1}`},
		{"get-tiny-image", `{}`},
	}, "simulate-research-query")

	// What the comparison above is about is there to compare.
	c := connectHTTP(t, facade, "", "fidelity-everything")
	listed := listedTools(t, c)["get-structured-content"]
	if listed["title"] != "Get Structured Content Tool" || listed["outputSchema"] == nil {
		t.Errorf("get-structured-content through the facade: title %v, outputSchema %v", listed["title"], listed["outputSchema"])
	}
	res := callTool(t, c, "get-structured-content", `{"location":"Chicago"}`)
	if res.StructuredContent == nil {
		t.Error("get-structured-content through the facade: no structuredContent")
	}
	res = callTool(t, c, "get-resource-links", `{"count":2}`)
	if len(res.Content) != 3 {
		t.Fatalf("get-resource-links through the facade: %d blocks, want a text and two links", len(res.Content))
	}
	if link, ok := res.Content[1].(mcp.ResourceLink); !ok || link.URI == "" || link.Description == "" {
		t.Errorf("get-resource-links through the facade: %#v, want a resource link", res.Content[1])
	}
	res = callTool(t, c, "get-annotated-message", `{"messageType":"success","includeImage":true}`)
	if len(res.Content) != 2 {
		t.Fatalf("get-annotated-message through the facade: %d blocks, want a text and an image", len(res.Content))
	}
	if text, ok := res.Content[0].(mcp.TextContent); !ok || text.Annotations == nil || text.Annotations.Priority == nil || *text.Annotations.Priority != 0.7 {
		t.Errorf("get-annotated-message through the facade: %#v, want its annotations", res.Content[0])
	}
}

// startEverything starts a fleet whose one MCP server is server
// (its configuration entry), and waits until it is connected.
func startEverything(t *testing.T, server map[string]any) *fleet {
	t.Helper()
	data, err := json.Marshal(map[string]any{"mcpServers": map[string]any{everythingName: server}})
	if err != nil {
		t.Fatal(err)
	}
	f := startFleet(t, parse(t, string(data)))
	f.waitState(t, everythingName, events.MCPConnected)
	f.waitTool(t, "echo")
	return f
}

// checkDiscovery: the server's tools are in the executor's catalogue as
// MCP tools of the server, of kind read where the server says
// readOnlyHint, with the server's annotations; the server's status in the
// bucket says connected, with as many tools as the catalogue lists.
func checkDiscovery(t *testing.T, f *fleet, transport string) {
	for name, readOnly := range everythingTools {
		tl := f.waitTool(t, name)
		want := events.KindOther
		if readOnly {
			want = events.KindRead
		}
		if tl.Source != events.SourceMCP || tl.Server != everythingName || tl.ServerToolName != name || !tl.Trust || !tl.Active {
			t.Errorf("%s: source %q, server %q, server's name %q, trust %v, active %v; want an active, trusted MCP tool of %s",
				name, tl.Source, tl.Server, tl.ServerToolName, tl.Trust, tl.Active, everythingName)
		}
		if tl.Kind != want || tl.ReadOnly != readOnly {
			t.Errorf("%s: kind %q, readOnly %v; want %q, %v", name, tl.Kind, tl.ReadOnly, want, readOnly)
		}
		var hints map[string]any
		if err := json.Unmarshal(tl.Annotations, &hints); err != nil {
			t.Errorf("%s: annotations %s: %v", name, tl.Annotations, err)
		} else if hints["readOnlyHint"] != readOnly {
			t.Errorf("%s: annotations %s, want readOnlyHint %v", name, tl.Annotations, readOnly)
		}
	}
	// The reference server gives all four hints; all four are kept.
	echo := f.waitTool(t, "echo")
	var hints map[string]any
	json.Unmarshal(echo.Annotations, &hints)
	want := map[string]any{"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
	for k, v := range want {
		if hints[k] != v {
			t.Errorf("echo's annotations %s, want %s %v", echo.Annotations, k, v)
		}
	}
	if !json.Valid(echo.Parameters) || !bytes.Contains(echo.Parameters, []byte(`"message"`)) {
		t.Errorf("echo's parameters %s, want the server's schema", echo.Parameters)
	}

	// The count in the status is of the tools hosted; a tools/list_changed
	// after the first listing (server-everything registers some tools
	// once the session is initialised) may still be re-listing, so wait
	// for the two to agree.
	var st *events.MCPServerStatus
	var hosted int
	testkit.Poll(30*time.Second, func() bool {
		st = bucketStatus(t, f, everythingName)
		hosted = len(f.exec.Catalog().ToolsByServer(everythingName))
		return st.State == events.MCPConnected && st.Tools == hosted
	})
	if st.State != events.MCPConnected || st.Tools != hosted || st.Tools < len(everythingTools) ||
		st.Transport != transport || !st.Trust || st.Error != "" {
		t.Errorf("status %+v, want connected over %s, trusted, with the %d tools the catalogue lists (at least %d)",
			st, transport, hosted, len(everythingTools))
	}
}

// checkTaskOnly: simulate-research-query must be called as a task
// (execution.taskSupport "required"), which toolbus does not do, so it is
// not hosted: a model offered it would only ever get the server's -32601.
// A discovery request, as toolbus tools discover sends it, says why.
func checkTaskOnly(t *testing.T, f *fleet, _ string) {
	const name = "simulate-research-query"
	if _, ok := f.exec.Catalog().GetTool(name); ok {
		t.Errorf("%s is hosted, but it can only be called as a task", name)
	}
	req := &events.MCPDiscoverRequest{Header: events.Header{Sender: events.Identity{ID: "cli"}}, Server: everythingName}
	data, err := events.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := f.bus.Conn().Request(events.MCPDiscoverSubject("executor@test"), data, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := events.Decode[events.MCPDiscoverReply](msg.Data)
	if err != nil || reply.Error != "" {
		t.Fatalf("discover: %+v, %v", reply, err)
	}
	warned := false
	for _, w := range reply.Warnings {
		warned = warned || strings.Contains(w, name) && strings.Contains(w, "task")
	}
	if !warned {
		t.Errorf("discover's warnings %q do not say why %s is not hosted", reply.Warnings, name)
	}
	if slices.Contains(reply.Tools, name) {
		t.Errorf("discover lists %s: %v", name, reply.Tools)
	}
}

// bucketStatus reads a server's status from the bus's status bucket.
func bucketStatus(t *testing.T, f *fleet, server string) *events.MCPServerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, events.MCPStatusBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, events.MCPStatusKey("executor@test", server))
	if err != nil {
		t.Fatalf("status of %s: %v", server, err)
	}
	st, err := events.Decode[events.MCPServerStatus](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// checkImage: get-tiny-image's PNG is a typed part, its text blocks the
// text.
func checkImage(t *testing.T, f *fleet, _ string) {
	res := f.call(t, "get-tiny-image", `{}`, nil)
	if res.Error != nil {
		t.Fatalf("get-tiny-image: %+v", res.Error)
	}
	if want := "Here's the image you requested:\nThe image above is the MCP logo."; res.LLMContent != want {
		t.Errorf("get-tiny-image's text %q, want %q", res.LLMContent, want)
	}
	// Its blocks are text, image, text.
	if len(res.Parts) != 3 || res.Parts[0].Type != events.PartText || res.Parts[2].Type != events.PartText {
		t.Fatalf("get-tiny-image: parts %+v, want a text, an image and a text", res.Parts)
	}
	p := res.Parts[1]
	if p.Type != events.PartImage || p.MIMEType != "image/png" || p.Data == "" || p.Size != len(p.Data) {
		t.Errorf("get-tiny-image's part: type %q, mimeType %q, %d bytes of data, size %d", p.Type, p.MIMEType, len(p.Data), p.Size)
	}
	png, err := base64.StdEncoding.DecodeString(p.Data)
	if err != nil {
		t.Fatalf("get-tiny-image's data is not base64: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("get-tiny-image's data starts %q, want the PNG signature", png[:min(8, len(png))])
	}
}

// progressLog gathers the progress a call reports, as the caller's
// callback gets it.
type progressLog struct {
	mu    sync.Mutex
	text  strings.Builder
	first chan struct{} // closed at the first chunk
	once  sync.Once
}

func newProgressLog() *progressLog { return &progressLog{first: make(chan struct{})} }

func (p *progressLog) add(chunk string) {
	p.mu.Lock()
	p.text.WriteString(chunk)
	p.mu.Unlock()
	p.once.Do(func() { close(p.first) })
}

func (p *progressLog) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.text.String()
}

// checkProgress: each of the long operation's steps reaches the caller as
// progress, and the call succeeds.
func checkProgress(t *testing.T, f *fleet, _ string) {
	progress := newProgressLog()
	res := f.call(t, "trigger-long-running-operation", `{"duration":2,"steps":4}`, progress.add)
	if res.Error != nil || !strings.Contains(res.LLMContent, "Long running operation completed") {
		t.Errorf("trigger-long-running-operation: %+v", res)
	}
	got := progress.String()
	for i := 1; i <= 4; i++ {
		if want := fmt.Sprintf("[progress %d/4]", i); !strings.Contains(got, want) {
			t.Errorf("progress %q lacks %q", got, want)
		}
	}
}

// checkCancel: a long operation cancelled by the caller ends CANCELLED, and
// the server still answers afterwards.
func checkCancel(t *testing.T, f *fleet, transport string) {
	id := "everything-cancel-" + transport
	progress := newProgressLog()
	type outcome struct {
		res *events.Result
		err error
	}
	// The goroutine reports to the test, never to t: the test may have
	// ended when it does.
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := f.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: "trigger-long-running-operation",
			Args: json.RawMessage(`{"duration":120,"steps":240}`)}, progress.add)
		done <- outcome{res, err}
	}()
	// The first progress says the call runs on the server.
	select {
	case <-progress.first:
	case o := <-done:
		t.Fatalf("the long operation ended before it was cancelled: %+v, %v", o.res, o.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no progress from the long operation")
	}
	if err := f.client.Cancel(context.Background(), id, "test"); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("cancelled long operation: %v", o.err)
	}
	if o.res.Error == nil || o.res.Error.Type != events.ErrCancelled {
		t.Errorf("cancelled long operation: %+v, want CANCELLED", o.res)
	}
	if res := f.call(t, "echo", `{"message":"after"}`, nil); res.Error != nil || res.LLMContent != "Echo: after" {
		t.Errorf("echo after the cancel: %+v", res)
	}
}

// checkKilled: a stdio server killed from outside is seen to go, is
// started again, and answers; once the manager stops, none of its
// processes is left, not even a zombie.
func checkKilled(t *testing.T, f *fleet) {
	pid := everythingProcess(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, everythingName, events.MCPDisconnected)
	st := f.waitState(t, everythingName, events.MCPConnected)
	if st.Restarts != 1 {
		t.Errorf("restarts %d, want 1", st.Restarts)
	}
	testkit.WaitReaped(t, pid)
	if res := f.call(t, "echo", `{"message":"again"}`, nil); res.Error != nil || res.LLMContent != "Echo: again" {
		t.Errorf("echo after the restart: %+v", res)
	}
	newPid := everythingProcess(t)
	if newPid == pid {
		t.Fatalf("the server's process is still %d", pid)
	}
	f.mgr.Stop()
	testkit.WaitReaped(t, newPid)
	if pids := everythingProcesses(t); len(pids) > 0 {
		t.Errorf("server-everything processes left after the manager stopped: %v", pids)
	}
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies left: %v", z)
	}
}

// everythingProcess is the one server-everything stdio process this test
// process started.
func everythingProcess(t *testing.T) int {
	t.Helper()
	pids := everythingProcesses(t)
	if len(pids) != 1 {
		t.Fatalf("server-everything stdio processes under this test: %v, want one", pids)
	}
	return pids[0]
}

// everythingProcesses lists the processes descended from this one that run
// server-everything's entry over stdio, from /proc.
func everythingProcesses(t *testing.T) []int {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	entry := filepath.Join("server-everything", "dist", "index.js")
	var out []int
	for _, p := range testkit.Descendants(os.Getpid()) {
		if p.State != "Z" && len(p.Args) >= 3 && strings.HasSuffix(p.Args[1], entry) && p.Args[2] == "stdio" {
			out = append(out, p.PID)
		}
	}
	return out
}
