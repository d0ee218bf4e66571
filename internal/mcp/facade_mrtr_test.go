package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/mcpsession"
	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// connectModern is an MCP client of the facade that speaks protocol
// 2026-07-28, named name, with the client options given.
func (ff *facadeFleet) connectModern(t testing.TB, name string, options ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(ff.url, transport.WithHTTPLogger(bustest.Quiet()), transport.WithHTTPHeaders(testAuth))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, options...)
	mcpsession.InitializeModern(t, c, name, "1.0")
	return c
}

// A client of protocol 2026-07-28 cannot be sent elicitation/create: the
// facade answers with the question as an input-required result, and the
// client's retry carries its user's answer. An accept runs the call once,
// recorded with the client's user as its approver; a decline refuses it
// with their reason.
func TestFacadeAsksAModernClientsUser(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	acted := answered(t, ff)
	sent := invocations(t, ff)
	user := &userAtClient{answer: respond(mcp.ElicitationResponseActionAccept, nil)}
	c := ff.connectModern(t, "modern-client", mcpclient.WithElicitationHandler(user))

	res := callTool(t, c, "write_file", `{"file_path":"notes.md","content":"first line\n"}`)
	if res.IsError {
		t.Fatalf("an accepted edit failed: %s", text(res))
	}
	if data, err := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); err != nil || string(data) != "first line\n" {
		t.Fatalf("the file holds %q (%v)", data, err)
	}
	shown := user.shown()
	if len(shown) != 1 {
		t.Fatalf("the user was asked %d times, want once", len(shown))
	}
	for _, want := range []string{"agent:modern-client", "Tool: write_file (edit)", "+first line", "Accept to run it once"} {
		if !strings.Contains(shown[0], want) {
			t.Errorf("the question does not show %q:\n%s", want, shown[0])
		}
	}
	got := acted(1)
	if len(got) != 1 || got[0].Sender.ID != "user-of:agent:modern-client" {
		t.Errorf("answers acted on: %+v; want one, by the user of agent:modern-client", got)
	}
	if n := len(sent()); n != 1 {
		t.Errorf("the call with its retry was sent %d times to the executors, want once", n)
	}

	user.answer = respond(mcp.ElicitationResponseActionDecline, map[string]any{"reason": "not that file"})
	res = callTool(t, c, "write_file", `{"file_path":"notes.md","content":"overwritten\n"}`)
	if !res.IsError || !strings.Contains(text(res), "USER_CANCELLED: user-of:agent:modern-client cancelled the call: declined: not that file") {
		t.Errorf("declined: %v %q", res.IsError, text(res))
	}
	if data, _ := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); string(data) != "first line\n" {
		t.Errorf("a declined edit changed the file: %q", data)
	}

	// A modern client that cannot be asked is never sent a question: with
	// no approver on tool.confirm, the call is denied at once.
	plain := ff.connectModern(t, "plain-modern-client")
	res = callTool(t, plain, "write_file", `{"file_path":"notes.md","content":"x"}`)
	if !res.IsError || !strings.Contains(text(res), "no approver is connected") {
		t.Errorf("an edit from a modern client that cannot elicit, no approver: %v %q", res.IsError, text(res))
	}
}

// modernPost sends one JSON-RPC request of protocol 2026-07-28 to the
// facade, as client name declaring capabilities, and returns the response
// decoded.
func modernPost(t *testing.T, url, name, method string, params map[string]any, capabilities map[string]any) map[string]any {
	t.Helper()
	return modernPostAs(t, url, testToken, name, method, params, capabilities)
}

// modernPostAs is modernPost by the client of token.
func modernPostAs(t *testing.T, url, token, name, method string, params map[string]any, capabilities map[string]any) map[string]any {
	t.Helper()
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": name, "version": "1.0"},
		"io.modelcontextprotocol/clientCapabilities": capabilities,
	}
	p := map[string]any{"_meta": meta}
	for k, v := range params {
		p[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": p})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	if uri, ok := params["uri"].(string); ok {
		req.Header.Set("Mcp-Name", uri)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	// A response may come as one event of a stream.
	if i := bytes.Index(data, []byte("data: ")); i >= 0 && resp.Header.Get("Content-Type") == "text/event-stream" {
		data = data[i+len("data: "):]
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			data = data[:j]
		}
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: the response does not decode: %v\n%s", method, err, data)
	}
	return out
}

// The state a retry carries is the facade's, sealed: altered, moved to
// other arguments or to another caller, it is refused with an error and
// answers nothing; the call still waits for its own client's answer.
func TestFacadeRefusesAnAlteredRequestState(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	canAsk := map[string]any{"elicitation": map[string]any{}}
	args := map[string]any{"file_path": "notes.md", "content": "mine\n"}
	first := modernPost(t, ff.url, "honest", "tools/call", map[string]any{"name": "write_file", "arguments": args}, canAsk)
	result, _ := first["result"].(map[string]any)
	state, _ := result["requestState"].(string)
	if result["resultType"] != "input_required" || state == "" {
		t.Fatalf("the first request got %v; want an input-required result with a state", first)
	}
	if _, ok := result["inputRequests"].(map[string]any)["toolbus_approval"]; !ok {
		t.Fatalf("the input requests %v do not ask for the approval", result["inputRequests"])
	}
	accept := map[string]any{"toolbus_approval": map[string]any{"action": "accept"}}
	for _, c := range []struct {
		name, caller string
		state        string
		args         map[string]any
		token        string
	}{
		{"tampered", "honest", state + "-TAMPERED", args, testToken},
		{"the state of another facade", "honest", strings.Replace(state, ".", ".x", 1), args, testToken},
		{"other arguments", "honest", state, map[string]any{"file_path": "notes.md", "content": "theirs\n"}, testToken},
		{"another caller", "intruder", state, args, testToken},
		// Another authenticated client, naming itself as the asked one
		// does: the credential, not the name, is who answers.
		{"another client", "honest", state, args, otherToken},
	} {
		got := modernPostAs(t, ff.url, c.token, c.caller, "tools/call", map[string]any{"name": "write_file", "arguments": c.args, "inputResponses": accept, "requestState": c.state}, canAsk)
		if got["error"] == nil {
			t.Errorf("%s: the retry was taken: %v", c.name, got)
		}
	}
	if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "notes.md")); err == nil {
		t.Fatal("a refused retry ran the call")
	}
	// The same arguments encoded anew (keys in another order) are the
	// same call: the honest retry runs it.
	got := modernPost(t, ff.url, "honest", "tools/call", map[string]any{"name": "write_file", "arguments": json.RawMessage(`{"content":"mine\n","file_path":"notes.md"}`), "inputResponses": accept, "requestState": state}, canAsk)
	res, _ := got["result"].(map[string]any)
	if res == nil || res["isError"] == true || res["resultType"] != "complete" {
		t.Fatalf("the honest retry: %v", got)
	}
	if data, err := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); err != nil || string(data) != "mine\n" {
		t.Fatalf("the file holds %q (%v)", data, err)
	}
	// Once the call has ended and its result been fetched, its state
	// answers nothing more.
	again := modernPost(t, ff.url, "honest", "tools/call", map[string]any{"name": "write_file", "arguments": args, "inputResponses": accept, "requestState": state}, canAsk)
	if res, _ := again["result"].(map[string]any); res == nil || res["isError"] != true {
		t.Errorf("a replayed state: %v", again)
	}
}

// Over stdio, as `toolbus mcp serve` runs for an agent, a 2026-07-28
// client is asked the same way.
func TestFacadeAsksAModernClientsUserOverStdio(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	clientIn, serverOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	serverIn, clientOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ff.facade.ServeStdio(ctx, serverIn, serverOut) }()
	t.Cleanup(func() {
		cancel()
		clientOut.Close()
		if err := <-served; err != nil {
			t.Errorf("serve stdio: %v", err)
		}
		serverIn.Close()
		serverOut.Close()
		clientIn.Close()
	})
	user := &userAtClient{answer: respond(mcp.ElicitationResponseActionAccept, nil)}
	c := mcpclient.NewClient(transport.NewIO(clientIn, clientOut, nil), mcpclient.WithElicitationHandler(user))
	mcpsession.InitializeModern(t, c, "stdio-client", "1.0")
	res := callTool(t, c, "write_file", `{"file_path":"piped.md","content":"over stdio\n"}`)
	if res.IsError {
		t.Fatalf("an accepted edit failed: %s", text(res))
	}
	if data, err := os.ReadFile(filepath.Join(ff.Workspace.Root(), "piped.md")); err != nil || string(data) != "over stdio\n" {
		t.Fatalf("the file holds %q (%v)", data, err)
	}
	if n := len(user.shown()); n != 1 {
		t.Errorf("the user was asked %d times, want once", n)
	}
}

// tsModernCall runs the TypeScript SDK's client of protocol 2026-07-28
// (testdata/modern-client.mjs) against url: one call of tool, every
// question answered with action. It returns the result and what the
// user was shown.
func tsModernCall(t *testing.T, url, action, tool, args string) (res map[string]any, asked []string) {
	t.Helper()
	node := npmpeer.Node(t)
	sdk := npmpeer.Require(t, npmpeer.ModernClient)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/modern-client.mjs", sdk, url, action, tool, args)
	cmd.Env = append(os.Environ(), "TOOLBUS_TEST_TOKEN="+testToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client (%s): %v\n%s", action, err, stderr.String())
	}
	var got struct {
		Result map[string]any `json:"result"`
		Asked  []string       `json:"asked"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the TypeScript client's output does not decode: %v\n%s", err, out)
	}
	return got.Result, got.Asked
}

func tsText(res map[string]any) string {
	var parts []string
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, _ := c.(map[string]any); m["type"] == "text" {
			s, _ := m["text"].(string)
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n")
}

// Another implementation of protocol 2026-07-28, the TypeScript SDK's
// client, gets the question, and its answer is acted on: accepted, the
// edit is made; declined, refused with the person's reason; a client that
// cannot be asked, with no approver anywhere, is denied at once.
func TestFacadeAsksATypeScriptModernClientsUser(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	res, asked := tsModernCall(t, ff.url, "accept", "write_file", `{"file_path":"ts.md","content":"from node\n"}`)
	if res["isError"] == true || len(asked) != 1 || !strings.Contains(asked[0], "Tool: write_file (edit)") {
		t.Fatalf("accepted: %v, asked %q", res, asked)
	}
	if data, err := os.ReadFile(filepath.Join(ff.Workspace.Root(), "ts.md")); err != nil || string(data) != "from node\n" {
		t.Fatalf("the file holds %q (%v)", data, err)
	}
	res, asked = tsModernCall(t, ff.url, "decline", "write_file", `{"file_path":"ts.md","content":"overwritten\n"}`)
	if res["isError"] != true || len(asked) != 1 || !strings.Contains(tsText(res), "cancelled the call: declined: not from a script") {
		t.Errorf("declined: %v, asked %q", res, asked)
	}
	res, asked = tsModernCall(t, ff.url, "none", "write_file", `{"file_path":"ts.md","content":"overwritten\n"}`)
	if res["isError"] != true || len(asked) != 0 || !strings.Contains(tsText(res), "no approver is connected") {
		t.Errorf("a client that cannot be asked: %v, asked %q", res, asked)
	}
	if data, _ := os.ReadFile(filepath.Join(ff.Workspace.Root(), "ts.md")); string(data) != "from node\n" {
		t.Errorf("a refused edit changed the file: %q", data)
	}
}

// A call held for a client that was asked and has not come back is the
// facade's: closing the facade gives it up, so that nothing of it keeps
// waiting on the bus.
func TestFacadeCloseGivesUpTheCallsItHolds(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	results := make(chan *events.Result, 16)
	sub, err := ff.Bus.Conn().Subscribe(events.SubjectResult, func(m *nats.Msg) {
		if r, err := events.Decode[events.Result](m.Data); err == nil {
			results <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	first := modernPost(t, ff.url, "gone", "tools/call", map[string]any{"name": "write_file", "arguments": map[string]any{"file_path": "held.md", "content": "x"}},
		map[string]any{"elicitation": map[string]any{}})
	result, _ := first["result"].(map[string]any)
	meta, _ := result["_meta"].(map[string]any)
	id, _ := meta["toolbus/invocationId"].(string)
	if result["resultType"] != "input_required" || id == "" {
		t.Fatalf("the first request got %v", first)
	}
	ff.facade.Close()
	timeout := time.After(time.Minute)
	for {
		select {
		case r := <-results:
			if r.InvocationID != id {
				continue
			}
			if r.Error == nil || r.Error.Type != events.ErrCancelled {
				t.Fatalf("the held call ended with %+v, want it cancelled", r.Error)
			}
			if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "held.md")); err == nil {
				t.Error("the given-up call ran")
			}
			return
		case <-timeout:
			t.Fatal("the held call did not end when the facade closed")
		}
	}
}
