package mcp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/toolbus/toolbus/internal/proctree"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/invoke"
	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
)

// serveStdioEnv makes the test binary an MCP server over stdio: the stdio
// tests start it as their server's command.
const serveStdioEnv = "TOOLBUS_MCP_TEST_STDIO"

func TestMain(m *testing.M) {
	if os.Getenv(serveAskingEnv) != "" {
		if err := server.ServeStdio(newAskingServer()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(serveStdioEnv) != "" {
		// MARK names a file where the server writes the tag of a call
		// whose context ended on the server: how a test sees a cancel
		// reach another process.
		cancelled := make(chan string, 4)
		go func() {
			for tag := range cancelled {
				os.WriteFile(os.Getenv("MARK"), []byte(tag), 0o644)
			}
		}()
		srv := newTestServer(cancelled)
		if os.Getenv(crashOnceEnv) != "" {
			addCrashOnce(srv)
		}
		if err := server.ServeStdio(srv); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// newTestServer is the edge cases' server: echo, a failing tool, an image,
// a huge result, a slow tool that reports progress and says on cancelled
// when the call's context ends on the server, and pid.
func newTestServer(cancelled chan<- string) *server.MCPServer {
	s := server.NewMCPServer("toolbus-test", "1.0", server.WithToolCapabilities(true))
	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echoes a message"), mcp.WithString("message", mcp.Required()),
		mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("Echo: " + req.GetString("message", "")), nil
		})
	s.AddTool(mcp.NewTool("fail", mcp.WithDestructiveHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("it broke"), nil
		})
	s.AddTool(mcp.NewTool("image"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("a pixel"), mcp.NewImageContent("iVBORw0KGgo=", "image/png")}}, nil
	})
	s.AddTool(mcp.NewTool("screenshot"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewImageContent(bigImage, "image/png")}}, nil
	})
	s.AddTool(mcp.NewTool("huge"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(strings.Repeat("0123456789", 10_000)), nil
	})
	s.AddTool(mcp.NewTool("pid"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(strconv.Itoa(os.Getpid())), nil
	})
	s.AddTool(mcp.NewTool("slow", mcp.WithString("tag")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if token := req.Params.Meta; token != nil && token.ProgressToken != nil {
			for i := 1; i <= 2; i++ {
				server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
					map[string]any{"progressToken": token.ProgressToken, "progress": i, "total": 10, "message": "working"})
			}
		}
		select {
		case <-ctx.Done():
			if cancelled != nil {
				cancelled <- req.GetString("tag", "")
			}
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return mcp.NewToolResultText("finished"), nil
		}
	})
	return s
}

// bigImage is an image of 1.5 MB of base64, more than a message of the
// default bus may carry.
var bigImage = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 3<<18))

// fleet is a bus with a registry, an executor and an MCP manager on it,
// and a client that calls tools as an agent does.
type fleet struct {
	bus    *bus.Bus
	exec   *executor.Executor
	mgr    *toolmcp.Manager
	client *invoke.Client
	js     jetstream.JetStream
}

func startFleet(t *testing.T, cfg *toolmcp.Config) *fleet {
	t.Helper()
	return startFleetWith(t, cfg, bustest.Quiet(), 3*time.Second)
}

// startFleetWith is startFleet with the executor's and the manager's
// logger, and the manager's first retry after backoff.
func startFleetWith(t *testing.T, cfg *toolmcp.Config, log *slog.Logger, backoff time.Duration) *fleet {
	t.Helper()
	b := bustest.Start(t, "")
	registrytest.Start(t, b)
	pol := policytest.Default(t)
	id := events.Identity{ID: "executor@test", Role: "executor"}
	ex, err := executor.Start(context.Background(), b.Conn(), b.JetStream(), executor.Config{Identity: id, Policy: pol,
		Workspace: t.TempDir(), Logger: bustest.Quiet(), ConfirmTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	starter := proctree.Unconfined() // the manager's behaviour: the node's tests hold the confinement
	t.Cleanup(starter.Close)
	mgr, err := toolmcp.Start(context.Background(), cfg, toolmcp.Options{Identity: id, Conn: b.Conn(), JS: b.JetStream(),
		Host: executornode.HostOn(ex), Logger: log, MinBackoff: backoff, Starter: starter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ex.Stop(ctx)
		mgr.Stop()
	})
	f := &fleet{bus: b, exec: ex, mgr: mgr, js: b.JetStream()}
	f.client = invoke.NewClient(bustest.Connect(t, b).Conn(), events.Identity{ID: "agent:test", Role: "agent"}, "")
	t.Cleanup(func() { f.client.Close() })
	return f
}

// httpServer serves s over streamable HTTP on loopback.
func httpServer(t testing.TB, s *server.MCPServer, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = server.NewStreamableHTTPServer(s)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

func parse(t *testing.T, text string) *toolmcp.Config {
	t.Helper()
	cfg, err := toolmcp.Parse([]byte(text), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// waitState waits until server's status on the bus is state, and returns
// it.
func (f *fleet) waitState(t *testing.T, name string, state events.MCPState) *events.MCPServerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, events.MCPStatusBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, events.MCPStatusKey("executor@test", name))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last *events.MCPServerStatus
	for {
		select {
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			st, err := events.Decode[events.MCPServerStatus](e.Value())
			if err != nil {
				t.Fatal(err)
			}
			if last = st; st.State == state {
				return st
			}
		case <-ctx.Done():
			t.Fatalf("server %s never became %s; last status %+v", name, state, last)
		}
	}
}

// waitTool waits until the executor's catalogue lists name.
func (f *fleet) waitTool(t *testing.T, name string) *events.Tool {
	t.Helper()
	var tl *events.Tool
	if !testkit.Poll(30*time.Second, func() bool {
		var ok bool
		tl, ok = f.exec.Catalog().GetTool(name)
		return ok
	}) {
		t.Fatalf("tool %s never listed; have %v", name, f.exec.Catalog().AllToolNames())
	}
	return tl
}

func (f *fleet) call(t *testing.T, name, args string, progress func(string)) *events.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := f.client.Invoke(ctx, &events.Invocation{Tool: name, Args: json.RawMessage(args)}, progress)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// TestCallsOverHTTP: a trusted server's tools are hosted and called as any
// tool is: text, an isError result, typed parts, a result over the cap,
// the annotations the policy and the catalogue see.
func TestCallsOverHTTP(t *testing.T) {
	t.Parallel()
	url := httpServer(t, newTestServer(nil), nil)
	f := startFleet(t, parse(t, `{"mcpServers": {"edge": {"httpUrl": "`+url+`", "trust": true, "excludeTools": ["pid"]}}}`))
	st := f.waitState(t, "edge", events.MCPConnected)
	if st.Tools != 6 || st.Transport != "http" || !st.Trust {
		t.Errorf("status %+v, want 6 tools (pid excluded) over http, trusted", st)
	}
	echo := f.waitTool(t, "echo")
	if echo.Source != events.SourceMCP || echo.Server != "edge" || echo.Kind != events.KindRead || echo.DisplayName != "echo (edge MCP Server)" {
		t.Errorf("echo's entry: %+v", echo)
	}
	if _, ok := f.exec.Catalog().GetTool("pid"); ok {
		t.Error("pid is listed, but excludeTools names it")
	}
	if res := f.call(t, "echo", `{"message":"hi"}`, nil); res.Error != nil || res.LLMContent != "Echo: hi" {
		t.Errorf("echo: %+v", res)
	}
	if res := f.call(t, "echo", `{}`, nil); res.Error == nil || res.Error.Type != events.ErrInvalidParams {
		t.Errorf("echo without its required argument: %+v, want INVALID_TOOL_PARAMS before the server is asked", res)
	}
	if res := f.call(t, "fail", `{}`, nil); res.Error == nil || res.Error.Type != events.ErrMCPToolError || res.Error.Message != "it broke" {
		t.Errorf("fail: %+v, want MCP_TOOL_ERROR with the server's text", res)
	}
	res := f.call(t, "image", `{}`, nil)
	// Its text and its image, block by block.
	if res.Error != nil || res.LLMContent != "a pixel" || !res.PartsWhole || len(res.Parts) != 2 || res.Parts[0].Text != "a pixel" ||
		res.Parts[1].Type != events.PartImage || res.Parts[1].Data != "iVBORw0KGgo=" {
		t.Errorf("image: %+v", res)
	}
	// An image too large for a message travels by reference.
	res = f.call(t, "screenshot", `{}`, nil)
	if res.Error != nil || len(res.Parts) != 1 || res.Parts[0].Data != "" || res.Parts[0].Ref == "" || res.Parts[0].Size != len(bigImage) {
		t.Fatalf("screenshot: %+v", res.Parts)
	}
	store, err := f.js.ObjectStore(context.Background(), events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := store.GetBytes(context.Background(), strings.TrimPrefix(res.Parts[0].Ref, events.OutputBucket+"/"))
	if err != nil || string(stored) != bigImage {
		t.Errorf("the stored image: %d bytes, %v; want the image's %d", len(stored), err, len(bigImage))
	}
	res = f.call(t, "huge", `{}`, nil)
	if !res.Truncated || res.OutputRef == "" || len(res.LLMContent) > executor.DefaultMaxContent+500 {
		t.Errorf("huge: truncated %v, ref %q, %d characters", res.Truncated, res.OutputRef, len(res.LLMContent))
	}
}

// TestUntrustedServerAsks: the default policy asks before a tool of an
// untrusted server runs, whatever its annotations claim; with no approver
// the call fails closed.
func TestUntrustedServerAsks(t *testing.T) {
	t.Parallel()
	url := httpServer(t, newTestServer(nil), nil)
	f := startFleet(t, parse(t, `{"mcpServers": {"edge": {"httpUrl": "`+url+`"}}}`))
	f.waitState(t, "edge", events.MCPConnected)
	f.waitTool(t, "echo")
	res := f.call(t, "echo", `{"message":"hi"}`, nil)
	if res.Error == nil || res.Policy == nil || res.Policy.Verdict != events.AskUser {
		t.Fatalf("echo of an untrusted server (readOnlyHint set): %+v, want ASK_USER and no approver", res)
	}
	if !strings.Contains(res.Policy.Reason, `"edge"`) {
		t.Errorf("reason %q does not name the server", res.Policy.Reason)
	}
}

// TestProgressAndCancel: the server's progress notifications reach the
// caller as progress; a cancel reaches the server, over HTTP and over
// stdio.
func TestProgressAndCancel(t *testing.T) {
	t.Parallel()
	cancelled := make(chan string, 4)
	url := httpServer(t, newTestServer(cancelled), nil)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	marker := t.TempDir() + "/stdio-cancelled"
	cfg := parse(t, fmt.Sprintf(`{"mcpServers": {
		"web": {"httpUrl": %q, "trust": true, "includeTools": ["slow"]},
		"local": {"command": %q, "env": {%q: "1", "MARK": %q}, "trust": true, "includeTools": ["slow(tag)"]}}}`,
		url, exe, serveStdioEnv, marker))
	f := startFleet(t, cfg)
	f.waitState(t, "web", events.MCPConnected)
	f.waitState(t, "local", events.MCPConnected)
	f.waitTool(t, "slow")
	f.waitTool(t, "local__slow")
	// Which server's tool got the plain name depends on which listed
	// first.
	names := map[string]string{}
	for _, n := range []string{"slow", "local__slow", "web__slow"} {
		if tl, ok := f.exec.Catalog().GetTool(n); ok {
			names[tl.Server] = n
		}
	}
	if len(names) != 2 {
		t.Fatalf("the two slow tools: %v", names)
	}
	for _, server := range []string{"web", "local"} {
		name := names[server]
		id := "cancel-" + server
		progress := make(chan string, 16)
		type outcome struct {
			res *events.Result
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := f.client.Invoke(context.Background(), &events.Invocation{Header: events.Header{ID: id}, Tool: name,
				Args: json.RawMessage(`{"tag":"` + server + `"}`)}, func(s string) {
				select {
				case progress <- s:
				default:
				}
			})
			done <- outcome{res, err}
		}()
		select {
		case p := <-progress:
			// The first or the second of the server's two: under load,
			// mcp-go's streamable-HTTP server was seen to lose the first
			// notification while it turned the POST's answer into a stream.
			if !strings.Contains(p, "/10] working") {
				t.Errorf("%s: progress %q", name, p)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no progress", name)
		}
		if err := f.client.Cancel(context.Background(), id, "test"); err != nil {
			t.Fatal(err)
		}
		o := <-done
		if o.err != nil || o.res.Error == nil || o.res.Error.Type != events.ErrCancelled {
			t.Errorf("%s: %+v, %v, want CANCELLED", name, o.res, o.err)
		}
		seen := func() string {
			if server == "web" {
				select {
				case tag := <-cancelled:
					return tag
				default:
					return ""
				}
			}
			data, _ := os.ReadFile(marker)
			return string(data)
		}
		var tag string
		testkit.Poll(10*time.Second, func() bool { tag = seen(); return tag != "" })
		if tag != server {
			t.Errorf("server %s saw %q cancelled, want its own call", server, tag)
		}
	}
}

// TestStdioServerRestarts: a stdio server that dies is restarted with
// backoff; meanwhile its tools fail at once with a clear error; on stop
// no process of it is left, not even a zombie.
func TestStdioServerRestarts(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers": {"local": {"command": %q, "env": {%q: "1"}, "trust": true}}}`, exe, serveStdioEnv)))
	f.waitState(t, "local", events.MCPConnected)
	f.waitTool(t, "pid")
	pid, err := strconv.Atoi(f.call(t, "pid", `{}`, nil).LLMContent)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	st := f.waitState(t, "local", events.MCPDisconnected)
	if !strings.Contains(st.Error, "the server process exited (killed by SIGKILL)") || st.NextAttempt == nil {
		t.Errorf("status after the kill: %+v", st)
	}
	res := f.call(t, "echo", `{"message":"hi"}`, nil)
	if res.Error == nil || res.Error.Type != events.ErrExecutionFailed || !strings.Contains(res.Error.Message, `MCP server "local" is disconnected`) {
		t.Errorf("a call while the server is down: %+v", res)
	}
	st = f.waitState(t, "local", events.MCPConnected)
	if st.Restarts != 1 {
		t.Errorf("restarts %d, want 1", st.Restarts)
	}
	newPid, err := strconv.Atoi(f.call(t, "pid", `{}`, nil).LLMContent)
	if err != nil || newPid == pid {
		t.Fatalf("after the restart: pid %d (%v), before %d", newPid, err, pid)
	}
	testkit.WaitReaped(t, pid)
	f.mgr.Stop()
	testkit.WaitReaped(t, newPid)
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies left: %v", z)
	}
}

// TestServersAreIndependent: a server whose tool list is slow, one whose
// command does not exist and a disabled one hold up no other; each shows
// its own state.
func TestServersAreIndependent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	slowList := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"tools/list"`)) {
				<-release
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	}
	slowURL := httpServer(t, newTestServer(nil), slowList)
	fastURL := httpServer(t, newTestServer(nil), nil)
	// Before the servers close, which wait for their handlers.
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcp": {"excluded": ["off"]}, "mcpServers": {
		"slow": {"httpUrl": %q, "trust": true},
		"fast": {"httpUrl": %q, "trust": true},
		"broken": {"command": "/nonexistent/server"},
		"off": {"command": "true"}}}`, slowURL, fastURL)))
	f.waitState(t, "fast", events.MCPConnected)
	if res := f.call(t, "echo", `{"message":"hi"}`, nil); res.LLMContent != "Echo: hi" {
		t.Errorf("fast's echo while slow lists: %+v", res)
	}
	if st := f.waitState(t, "broken", events.MCPDisconnected); !strings.Contains(st.Error, "/nonexistent/server") {
		t.Errorf("broken: %+v", st)
	}
	if st := f.waitState(t, "off", events.MCPDisabled); !strings.Contains(st.Error, "excluded") {
		t.Errorf("off: %+v", st)
	}
	once.Do(func() { close(release) })
	f.waitState(t, "slow", events.MCPConnected)
	f.waitTool(t, "slow__echo")
}

// TestRediscoveryAndRemoval: list_changed re-discovers that server alone;
// a discovery request over the bus does too; a server that leaves the
// configuration takes its tools and its status with it.
func TestRediscoveryAndRemoval(t *testing.T) {
	t.Parallel()
	a, b := newTestServer(nil), newTestServer(nil)
	urlA, urlB := httpServer(t, a, nil), httpServer(t, b, nil)
	cfg := parse(t, fmt.Sprintf(`{"mcpServers": {"a": {"httpUrl": %q, "trust": true}, "b": {"httpUrl": %q, "trust": true}}}`, urlA, urlB))
	f := startFleet(t, cfg)
	f.waitState(t, "a", events.MCPConnected)
	f.waitState(t, "b", events.MCPConnected)
	// Which server's tools got the plain names depends on which listed
	// first: a's names are those whose entry says server a.
	first := f.waitTool(t, "echo").Server
	qualify := func(server, tool string) string {
		if server == first {
			return tool
		}
		return server + "__" + tool
	}
	f.waitTool(t, qualify("a", "echo"))
	f.waitTool(t, qualify("b", "echo"))

	a.AddTool(mcp.NewTool("late"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("late"), nil
	})
	if tl := f.waitTool(t, "late"); tl.Server != "a" {
		t.Errorf("late is of %q", tl.Server)
	}
	if res := f.call(t, "late", `{}`, nil); res.LLMContent != "late" {
		t.Errorf("late: %+v", res)
	}

	// A discovery request, as toolbus tools discover sends it.
	b.DeleteTools("huge")
	time.Sleep(100 * time.Millisecond) // the notification may come first; either way:
	req := &events.MCPDiscoverRequest{Header: events.Header{Sender: events.Identity{ID: "cli"}}, Server: "b"}
	data, _ := events.Encode(req)
	msg, err := f.bus.Conn().Request(events.MCPDiscoverSubject("executor@test"), data, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := events.Decode[events.MCPDiscoverReply](msg.Data)
	if err != nil || reply.Error != "" {
		t.Fatalf("discover: %+v, %v", reply, err)
	}
	subject, _ := events.Recorded(events.MCPDiscoverSubject("executor@test"))
	if got := bustest.Recorded(t, f.bus, subject); string(got) != string(data) {
		t.Errorf("recorded on %s: %s, sent %s", subject, got, data)
	}
	for _, n := range reply.Tools {
		if strings.Contains(n, "huge") {
			t.Errorf("huge is still discovered: %v", reply.Tools)
		}
	}
	waitGone(t, f, qualify("b", "huge"))

	// b leaves the configuration.
	f.mgr.Apply(parse(t, fmt.Sprintf(`{"mcpServers": {"a": {"httpUrl": %q, "trust": true}}}`, urlA)))
	waitGone(t, f, qualify("b", "echo"))
	if _, ok := f.exec.Catalog().GetTool(qualify("a", "echo")); !ok {
		t.Error("a's echo went with b")
	}
	kv, _ := f.js.KeyValue(context.Background(), events.MCPStatusBucket)
	if _, err := kv.Get(context.Background(), events.MCPStatusKey("executor@test", "b")); err == nil {
		t.Error("b's status is still in the bucket")
	}
}

func waitGone(t *testing.T, f *fleet, name string) {
	t.Helper()
	if !testkit.Poll(30*time.Second, func() bool {
		_, ok := f.exec.Catalog().GetTool(name)
		return !ok
	}) {
		t.Errorf("%s is still listed", name)
	}
}

// TestListChangedFloodIsCoalesced: a server that says its tool list
// changed again and again, each time just after the last listing, is
// listed again about once a second, not once per notification, and the
// catalogue still ends with its whole list.
func TestListChangedFloodIsCoalesced(t *testing.T) {
	t.Parallel()
	var lists atomic.Int64
	countLists := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"tools/list"`)) {
				lists.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	}
	s := newTestServer(nil)
	url := httpServer(t, s, countLists)
	f := startFleet(t, parse(t, `{"mcpServers": {"noisy": {"httpUrl": "`+url+`", "trust": true}}}`))
	f.waitState(t, "noisy", events.MCPConnected)
	f.waitTool(t, "echo")
	before, began := lists.Load(), time.Now()
	const added = 40
	for i := range added {
		s.AddTool(mcp.NewTool(fmt.Sprintf("t%d", i)), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
		time.Sleep(25 * time.Millisecond) // time for a listing between two
	}
	f.waitTool(t, fmt.Sprintf("t%d", added-1))
	// However slow the machine, a listing a second and the last one.
	if n, most := lists.Load()-before, int64(time.Since(began)/time.Second)+2; n > most {
		t.Errorf("%d notifications made %d listings, more than %d", added, n, most)
	}
}

// TestTaskOnlyToolNotHosted: a tool that can only be called as a task is
// not hosted, since toolbus calls none as a task; its server's other
// tools are, and the status counts them alone.
func TestTaskOnlyToolNotHosted(t *testing.T) {
	t.Parallel()
	s := server.NewMCPServer("toolbus-test", "1.0", server.WithToolCapabilities(true), server.WithTaskCapabilities(true, true, true))
	s.AddTool(mcp.NewTool("echo", mcp.WithString("message")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("Echo: " + req.GetString("message", "")), nil
	})
	s.AddTool(mcp.NewTool("research", mcp.WithTaskSupport(mcp.TaskSupportRequired)), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("done"), nil
	})
	f := startFleet(t, parse(t, `{"mcpServers": {"tasks": {"httpUrl": "`+httpServer(t, s, nil)+`", "trust": true}}}`))
	if st := f.waitState(t, "tasks", events.MCPConnected); st.Tools != 1 {
		t.Errorf("status %+v, want 1 tool hosted", st)
	}
	f.waitTool(t, "echo")
	if _, ok := f.exec.Catalog().GetTool("research"); ok {
		t.Error("research is hosted, but it can only be called as a task")
	}
}

// TestHTTPSessionIsReestablished: a streamable-HTTP server that restarts
// (its sessions forgotten) is connected to again, and its tools work.
func TestHTTPSessionIsReestablished(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := httptest.NewUnstartedServer(server.NewStreamableHTTPServer(newTestServer(nil)))
	first.Listener.Close()
	first.Listener = ln
	first.Start()
	f := startFleet(t, parse(t, `{"mcpServers": {"web": {"httpUrl": "http://`+addr+`/mcp", "trust": true}}}`))
	f.waitState(t, "web", events.MCPConnected)
	f.waitTool(t, "echo")
	first.CloseClientConnections()
	first.Close()
	// A server of the same address that knows no session, and says so
	// (404), as the specification has a server do.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address was taken before the server could have it again: %v", err)
	}
	second := httptest.NewUnstartedServer(forgetful(server.NewStreamableHTTPServer(newTestServer(nil))))
	second.Listener.Close()
	second.Listener = ln
	second.Start()
	t.Cleanup(func() { second.CloseClientConnections(); second.Close() })
	// The first calls after the restart may fail on the old session; the
	// session is then re-established, and calls work again.
	var res *events.Result
	if !testkit.Poll(60*time.Second, func() bool {
		res = f.call(t, "echo", `{"message":"again"}`, nil)
		return res.Error == nil && res.LLMContent == "Echo: again"
	}) {
		t.Fatalf("echo never worked again after the server restarted: %+v", res)
	}
	if st := f.mgr.Status()[0]; st.State != events.MCPConnected || st.Restarts < 1 {
		t.Errorf("status %+v, want connected on a new session (restarts >= 1)", st)
	}
}

// A server down past its retries is reported by Health, with why, and
// is not once it is connected again; a disabled server never is.
func TestHealthReportsAServerDownPastItsRetries(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there yet
	f := startFleetWith(t, parse(t, `{"mcp": {"excluded": ["off"]}, "mcpServers": {
		"web": {"httpUrl": "http://`+addr+`/mcp", "trust": true},
		"off": {"command": "true"}}}`), bustest.Quiet(), 10*time.Millisecond)
	testkit.Eventually(t, "Health reports web down", func() bool {
		err := f.mgr.Health()
		return err != nil && strings.Contains(err.Error(), `MCP server "web" is down since`)
	})
	if err := f.mgr.Health(); strings.Contains(err.Error(), "off") {
		t.Errorf("a disabled server reported down: %v", err)
	}
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the address was taken before the server could have it: %v", err)
	}
	srv := httptest.NewUnstartedServer(server.NewStreamableHTTPServer(newTestServer(nil)))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	f.waitState(t, "web", events.MCPConnected)
	testkit.Eventually(t, "Health is nil once web is connected", func() bool { return f.mgr.Health() == nil })
}

// forgetful answers 404 to a request naming a session it did not start.
func forgetful(h http.Handler) http.Handler {
	var mu sync.Mutex
	known := map[string]bool{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			mu.Lock()
			ok := known[id]
			mu.Unlock()
			if !ok {
				http.Error(w, "unknown session", http.StatusNotFound)
				return
			}
		}
		h.ServeHTTP(&sessionRecorder{ResponseWriter: w, record: func(id string) {
			mu.Lock()
			known[id] = true
			mu.Unlock()
		}}, r)
	})
}

type sessionRecorder struct {
	http.ResponseWriter
	record func(string)
}

func (s *sessionRecorder) WriteHeader(code int) {
	if id := s.Header().Get("Mcp-Session-Id"); id != "" {
		s.record(id)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestSchemaKeptAsSent: a tool's input schema reaches the catalogue as the
// server wrote it, keywords mcp-go's typed schema has no field for
// ($schema, a top-level oneOf, a description) included, over both pages
// of a paginated tools/list.
func TestSchemaKeptAsSent(t *testing.T) {
	t.Parallel()
	schema := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","description":"a place",` +
		`"$defs":{"city":{"type":"string"}},"properties":{"city":{"$ref":"#/$defs/city"},"zip":{"type":"string"}},` +
		`"oneOf":[{"required":["city"]},{"required":["zip"]}],"additionalProperties":false}`
	s := server.NewMCPServer("toolbus-test", "1.0", server.WithToolCapabilities(true), server.WithPaginationLimit(1))
	for _, name := range []string{"locate", "plain"} {
		s.AddTool(mcp.NewToolWithRawSchema(name, "finds a place", json.RawMessage(schema)),
			func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("here"), nil
			})
	}
	f := startFleet(t, parse(t, `{"mcpServers": {"places": {"httpUrl": "`+httpServer(t, s, nil)+`", "trust": true}}}`))
	if st := f.waitState(t, "places", events.MCPConnected); st.Tools != 2 {
		t.Errorf("status %+v, want both tools of the two pages hosted", st)
	}
	for _, name := range []string{"locate", "plain"} {
		var got, want any
		if err := json.Unmarshal(f.waitTool(t, name).Parameters, &got); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal([]byte(schema), &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s's parameters are\n%s\nwant the server's\n%s", name, f.waitTool(t, name).Parameters, schema)
		}
	}
}
