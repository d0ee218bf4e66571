package mcp_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/internal/testkit/mcpsession"
	"github.com/toolbus/toolbus/internal/tool"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// facadeFleet is a fleet with the MCP facade served over HTTP on loopback.
type facadeFleet struct {
	*executortest.Fleet
	facade *toolmcp.Facade
	url    string
	token  string
}

func startFacade(t testing.TB, pol *policy.Policy, token string, configure ...func(*executor.Config)) *facadeFleet {
	t.Helper()
	f := executortest.Start(t, configure...)
	conn := bustest.Connect(t, f.Bus)
	cfg := toolmcp.FacadeConfig{Conn: conn.Conn(), JS: conn.JetStream(), User: "ada", Logger: bustest.Quiet()}
	if pol != nil {
		cfg.Policy = func() *policy.Policy { return pol }
	}
	fac, err := toolmcp.StartFacade(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if token == "" {
		token = testToken
	}
	srv := httptest.NewUnstartedServer(fac.HTTPHandler(toolmcp.HTTPConfig{Addr: ln.Addr().(*net.TCPAddr), Tokens: clientTokens(t, "tester", token, "other", otherToken)}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		fac.Close()
	})
	return &facadeFleet{Fleet: f, facade: fac, url: srv.URL + toolmcp.HTTPPath, token: token}
}

// testToken is the token of the client the tests' endpoints admit when
// a test names none.
const testToken = "facade-test-token"

// otherToken is the token of a second client of startFacade's endpoint.
const otherToken = "facade-other-client-token"

// testAuth is the header of testToken's client.
var testAuth = map[string]string{"Authorization": "Bearer " + testToken}

// clientTokens admits the clients of pairs (name, token, name, token…).
func clientTokens(t testing.TB, pairs ...string) func() (*toolmcp.Tokens, error) {
	t.Helper()
	var tokens *toolmcp.Tokens
	for i := 0; i+1 < len(pairs); i += 2 {
		var err error
		if tokens, err = tokens.With(pairs[i], pairs[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return tokens.Fixed()
}

// connect is an MCP client of the facade, named name, with the client
// options given (an elicitation handler, say).
func (ff *facadeFleet) connect(t testing.TB, name string, options ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	return connectHTTP(t, ff.url, ff.token, name, options...)
}

// connectHTTP is an initialised MCP client, named name, of the
// streamable-HTTP endpoint at url.
func connectHTTP(t testing.TB, url, token, name string, options ...mcpclient.ClientOption) *mcpclient.Client {
	t.Helper()
	// Listening continuously: what the server sends unasked
	// (list_changed) comes on a GET stream.
	opts := []transport.StreamableHTTPCOption{transport.WithContinuousListening(), transport.WithHTTPLogger(bustest.Quiet())}
	if token == "" {
		token = testToken
	}
	opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	tr, err := transport.NewStreamableHTTP(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// The protocol the MCP clients of today speak (sessions, initialize).
	c := mcpclient.NewClient(tr, append([]mcpclient.ClientOption{mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION)}, options...)...)
	initialize(t, c, name)
	return c
}

// initialize starts c and initialises its session as name
// (mcpsession.Initialize, version 1.0).
func initialize(t testing.TB, c *mcpclient.Client, name string) {
	t.Helper()
	mcpsession.Initialize(t, c, name, "1.0")
}

func callTool(t *testing.T, c *mcpclient.Client, name, args string) *mcp.CallToolResult {
	t.Helper()
	return mcpsession.Call(t, c, name, args)
}

func text(r *mcp.CallToolResult) string { return mcpsession.Text(r) }

func toolNames(t testing.TB, c *mcpclient.Client) []string {
	t.Helper()
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// invocations collects the tool.invoke requests on the bus, as an auditor
// replaying the subject would see them.
func invocations(t *testing.T, ff *facadeFleet) func() []*events.Invocation {
	t.Helper()
	var mu sync.Mutex
	var got []*events.Invocation
	sub, err := ff.Bus.Conn().Subscribe(events.InvokeSubject("*"), func(m *nats.Msg) {
		if inv, err := events.Decode[events.Invocation](m.Data); err == nil {
			mu.Lock()
			got = append(got, inv)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ff.Bus.Conn().Flush()
	t.Cleanup(func() { sub.Unsubscribe() })
	return func() []*events.Invocation {
		mu.Lock()
		defer mu.Unlock()
		return append([]*events.Invocation(nil), got...)
	}
}

func TestFacadeListsAndCallsTheFleetsTools(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	seen := invocations(t, ff)
	c := ff.connect(t, "test-client")
	names := toolNames(t, c)
	for _, want := range []string{"read_file", "write_file", "run_shell_command", "glob"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}

	res := callTool(t, c, "read_file", `{"file_path":"README.md"}`)
	if res.IsError || !strings.Contains(text(res), "# hello") {
		t.Fatalf("read_file: error=%v %q", res.IsError, text(res))
	}
	// The call went over the bus in the MCP client's name.
	invs := seen()
	if len(invs) != 1 || invs[0].Sender.ID != "agent:test-client" || invs[0].Sender.Client != "test-client/1.0" || invs[0].Sender.User != "ada" || invs[0].Sender.Session == "" {
		if len(invs) > 0 {
			t.Fatalf("the invocation on the bus: %+v", invs[0].Sender)
		}
		t.Fatal("no invocation on the bus")
	}
	if res.Meta == nil || res.Meta.AdditionalFields["toolbus/invocationId"] != invs[0].ID {
		t.Errorf("the result's _meta: %+v", res.Meta)
	}

	// A denied call is an error result with the type and the reason.
	res = callTool(t, c, "run_shell_command", `{"command":"ls && rm -rf /"}`)
	if !res.IsError || !strings.Contains(text(res), "POLICY_DENIED: ") || !strings.Contains(text(res), "recursive removal of /") {
		t.Errorf("denied: error=%v %q", res.IsError, text(res))
	}
	if res.Meta == nil || res.Meta.AdditionalFields["toolbus/errorType"] != "POLICY_DENIED" {
		t.Errorf("denied _meta: %+v", res.Meta)
	}
	// Bad arguments: the executor's schema check, as an error result.
	res = callTool(t, c, "read_file", `{"file_path":7}`)
	if !res.IsError || !strings.Contains(text(res), "INVALID_TOOL_PARAMS") {
		t.Errorf("bad args: %v %q", res.IsError, text(res))
	}
	// An unknown tool is a protocol error.
	req := mcp.CallToolRequest{}
	req.Params.Name = "no_such_tool"
	if _, err := c.CallTool(context.Background(), req); err == nil {
		t.Error("an unknown tool was called")
	}
}

// A call that asks a person waits for an approver; a cancel from one
// comes back as an error result with USER_CANCELLED and the reason.
func TestFacadeCallsWaitForApproval(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	conn := bustest.Connect(t, ff.Bus)
	a, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: "approver:ada", Role: "approver"}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	go func() {
		for {
			s, changed := a.Snapshot()
			for _, r := range s.Pending {
				a.Answer(context.Background(), r.AnswerTo, approve.Answer{Outcome: events.Cancel, Message: "not now"})
			}
			select {
			case <-changed:
			case <-time.After(30 * time.Second):
				return
			}
		}
	}()
	c := ff.connect(t, "test-client")
	res := callTool(t, c, "write_file", `{"file_path":"a.txt","content":"x"}`)
	if !res.IsError || !strings.Contains(text(res), "USER_CANCELLED: approver:ada cancelled the call: not now") {
		t.Errorf("cancelled: %v %q", res.IsError, text(res))
	}
}

// The list leaves out what the policy denies this caller whatever the
// arguments; another client still sees it.
func TestFacadeListsWhatThePolicyAllowsTheCaller(t *testing.T) {
	t.Parallel()
	files := defaultpolicy.Default()
	files["toolbus.rego"] = strings.Replace(files["toolbus.rego"], "caller_denied_tools := {}", `caller_denied_tools := {"locked-client": {"run_shell_command", "write_file"}}`, 1)
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	ff := startFacade(t, pol, "")
	locked := strings.Join(toolNames(t, ff.connect(t, "locked-client")), " ")
	if strings.Contains(locked, "run_shell_command") || strings.Contains(locked, "write_file") || !strings.Contains(locked, "read_file") {
		t.Errorf("the locked client's list: %s", locked)
	}
	other := strings.Join(toolNames(t, ff.connect(t, "other-client")), " ")
	if !strings.Contains(other, "run_shell_command") {
		t.Errorf("another client's list: %s", other)
	}
	// A hidden tool cannot be called through the facade either.
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_shell_command"
	req.Params.Arguments = map[string]any{"command": "ls"}
	if _, err := ff.connect(t, "locked-client").CallTool(context.Background(), req); err == nil {
		t.Error("a hidden tool was called")
	}
}

// The HTTP endpoint refuses another site's page, a rebound Host name, and,
// with a token, a request without it.
// The facade remembers what the policy shows each caller (mcp-go asks
// again on every call); a new policy is asked afresh, and what one caller
// may not see stays hidden from it after another was shown it.
func TestFacadeListFollowsTheCurrentPolicy(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	compile := func(denied string) *policy.Policy {
		t.Helper()
		files := defaultpolicy.Default()
		files["toolbus.rego"] = strings.Replace(files["toolbus.rego"], "caller_denied_tools := {}", "caller_denied_tools := "+denied, 1)
		pol, err := policy.Compile(context.Background(), policy.Files(files))
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	var current atomic.Pointer[policy.Policy]
	current.Store(compile(`{}`))
	conn := bustest.Connect(t, f.Bus)
	fac, err := toolmcp.StartFacade(context.Background(), toolmcp.FacadeConfig{Conn: conn.Conn(), JS: conn.JetStream(),
		Policy: current.Load, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer fac.Close()
	client := func(name string) *mcpclient.Client {
		c, err := mcpclient.NewInProcessClient(fac.Server())
		if err != nil {
			t.Fatal(err)
		}
		initialize(t, c, name)
		return c
	}
	alice, bob := client("alice"), client("bob")
	lists := func(c *mcpclient.Client) bool { return slices.Contains(toolNames(t, c), "read_file") }
	testkit.Eventually(t, "read_file is listed", func() bool { return lists(alice) })
	if res := callTool(t, alice, "read_file", `{"file_path":"README.md"}`); res.IsError {
		t.Fatalf("read_file under a policy that allows it: %s", text(res))
	}

	current.Store(compile(`{"alice": {"read_file"}}`))
	if lists(alice) {
		t.Error("a tool the new policy denies alice is still listed to her")
	}
	if !lists(bob) {
		t.Error("bob lost read_file with alice")
	}
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "read_file", json.RawMessage(`{"file_path":"README.md"}`)
	if _, err := alice.CallTool(context.Background(), req); err == nil {
		t.Error("alice called a tool the new policy hides from her")
	}
	if res := callTool(t, bob, "read_file", `{"file_path":"README.md"}`); res.IsError {
		t.Errorf("bob's call: %s", text(res))
	}

	current.Store(compile(`{}`))
	if !lists(alice) {
		t.Error("read_file is not listed to alice again under a policy that allows it")
	}
}

func TestFacadeHTTPRefusesStrangers(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "s3cret-token-for-tests")
	post := func(mutate func(*http.Request)) int {
		req, _ := http.NewRequest("POST", ff.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer s3cret-token-for-tests")
		mutate(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(func(r *http.Request) { r.Header.Del("Authorization") }); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	if code := post(func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") }); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}
	if code := post(func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }); code != http.StatusForbidden {
		t.Errorf("another origin: %d", code)
	}
	if code := post(func(r *http.Request) { r.Host = "rebound.example:80" }); code != http.StatusForbidden {
		t.Errorf("another Host: %d", code)
	}
	// With the token, an MCP client works.
	if names := toolNames(t, ff.connect(t, "test-client")); len(names) == 0 {
		t.Error("no tools with the token")
	}
}

// probe is a tool of the test's own, hosted as a tool of a trusted MCP
// server so that the default policy allows it without an approver: it
// reports progress, and with {"wait":true} runs until it is cancelled,
// saying so on cancelled.
type probe struct{ started, cancelled chan string }

func (probe) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "facade_probe", Description: "A probe.", Kind: events.KindRead,
		Parameters: json.RawMessage(`{"type":"object","properties":{"wait":{"type":"boolean"}}}`)}
}

func (probe) Origin() (events.Source, string, bool) { return events.SourceMCP, "probe", true }

func (p probe) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	for _, chunk := range []string{"one ", "two ", "three"} {
		if call.Progress != nil {
			call.Progress(chunk)
		}
	}
	var args struct{ Wait bool }
	json.Unmarshal(call.Args, &args)
	if args.Wait {
		p.started <- call.ID
		<-ctx.Done()
		p.cancelled <- call.ID
		return &tool.Output{LLMContent: "stopped"}, nil
	}
	return &tool.Output{LLMContent: "one two three"}, nil
}

// A tool that joins the fleet reaches a connected client as list_changed;
// progress comes as notifications/progress for the client's token; a
// client's cancel stops the call on the executor.
func TestFacadeListChangedProgressAndCancel(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	c := ff.connect(t, "test-client")
	notes := make(chan mcp.JSONRPCNotification, 100)
	c.OnNotification(func(n mcp.JSONRPCNotification) { notes <- n })
	// And on a client in process, which has no HTTP stream between it and
	// the server.
	local, err := mcpclient.NewInProcessClient(ff.facade.Server())
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan string, 10)
	local.OnNotification(func(n mcp.JSONRPCNotification) { changes <- n.Method })
	initialize(t, local, "local")
	waitNote := func(method string) mcp.JSONRPCNotification {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case n := <-notes:
				if n.Method == method {
					return n
				}
			case <-timeout:
				t.Fatalf("no %s", method)
			}
		}
	}
	p := probe{started: make(chan string, 1), cancelled: make(chan string, 1)}
	if _, err := ff.Executor.Host(context.Background(), executor.Scope{Source: events.SourceMCP, Server: "probe", Trust: true}, []tool.Tool{p}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-changes:
		if m != "notifications/tools/list_changed" {
			t.Errorf("got %s", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no list_changed in process")
	}
	// Over streamable HTTP it comes on the client's GET stream.
	waitNote("notifications/tools/list_changed")

	if names := strings.Join(toolNames(t, c), " "); !strings.Contains(names, "facade_probe") {
		t.Fatalf("the new tool is not listed: %s", names)
	}

	req := mcp.CallToolRequest{}
	req.Params.Name = "facade_probe"
	req.Params.Arguments = map[string]any{}
	req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
	res, err := c.CallTool(context.Background(), req)
	if err != nil || res.IsError || text(res) != "one two three" {
		t.Fatalf("probe: %v %+v", err, res)
	}
	n := waitNote("notifications/progress")
	if n.Params.AdditionalFields["progressToken"] != "tok-1" || n.Params.AdditionalFields["message"] == "" {
		t.Errorf("progress: %+v", n.Params.AdditionalFields)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "facade_probe"
		req.Params.Arguments = map[string]any{"wait": true}
		_, err := c.CallTool(ctx, req)
		done <- err
	}()
	select {
	case <-p.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting call never started")
	}
	cancel()
	select {
	case <-p.cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the client's cancel did not reach the tool")
	}
	if err := <-done; err == nil {
		t.Error("a cancelled call returned no error to the client")
	}
}

// A call over a limit the policy sets is an error result that carries
// when to retry, for the client's code as well as the model.
func TestFacadeTellsWhenToRetryALimitedCall(t *testing.T) {
	t.Parallel()
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus
decision := {"verdict": "ALLOW", "reason": "test"}
limits contains {"name": "one read a day", "key": "reads", "calls": 1, "per": "24h"} if input.tool.name == "read_file"
`})
	if err != nil {
		t.Fatal(err)
	}
	f := executortest.Start(t, func(c *executor.Config) { c.Policy = pol })
	conn := bustest.Connect(t, f.Bus)
	fac, err := toolmcp.StartFacade(context.Background(), toolmcp.FacadeConfig{Conn: conn.Conn(), JS: conn.JetStream(), User: "ada", Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fac.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(fac.HTTPHandler(toolmcp.HTTPConfig{Addr: ln.Addr().(*net.TCPAddr), Tokens: clientTokens(t, "tester", testToken)}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	c := connectHTTP(t, srv.URL+toolmcp.HTTPPath, "", "limited")
	if res := callTool(t, c, "read_file", `{"file_path":"README.md"}`); res.IsError {
		t.Fatalf("the first read: %q", text(res))
	}
	res := callTool(t, c, "read_file", `{"file_path":"README.md"}`)
	if !res.IsError || !strings.Contains(text(res), "RATE_LIMITED: ") || !strings.Contains(text(res), "Retry after") {
		t.Fatalf("the second read: error=%v %q", res.IsError, text(res))
	}
	if res.Meta == nil || res.Meta.AdditionalFields["toolbus/errorType"] != "RATE_LIMITED" {
		t.Fatalf("_meta: %+v", res.Meta)
	}
	if ms, _ := res.Meta.AdditionalFields["toolbus/retryAfterMillis"].(float64); ms <= 0 {
		t.Errorf("_meta carries no retry-after: %+v", res.Meta.AdditionalFields)
	}
}
