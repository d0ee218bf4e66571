package discovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/toolbus/toolbus/internal/proctree"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/discovery"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
	"github.com/toolbus/toolbus/internal/tool"
)

// These tests run discovery as toolbus does: an in-process bus, the
// registry, real executors under the default policy, the discovery and
// call commands as subprocesses.

// hostOn hosts discovered tools on ex (what executornode.HostDiscoveredOn does;
// cli imports this package).
func hostOn(ex *executor.Executor) discovery.HostFunc {
	return func(ctx context.Context, tools []tool.Tool) (names, warnings []string, err error) {
		reply, err := ex.Host(ctx, executor.Scope{Source: events.SourceDiscovered}, tools)
		if reply != nil {
			for _, o := range reply.Tools {
				if o.Name != "" {
					names = append(names, o.Name)
				}
				if o.Error != "" {
					warnings = append(warnings, o.Requested+": "+o.Error)
				}
			}
		}
		return names, warnings, err
	}
}

// project is a workspace with a discovery command that prints the
// declarations in decls.json and counts its runs in runs.
type project struct {
	dir string
}

func newProject(t *testing.T, dir, decls string) *project {
	t.Helper()
	p := &project{dir: dir}
	p.declare(t, decls)
	return p
}

func (p *project) declare(t *testing.T, decls string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(p.dir, "decls.json"), []byte(decls), 0o644); err != nil {
		t.Fatal(err)
	}
}

// settings are the project's discovery settings, with the call command
// testdata/call.sh.
func (p *project) settings(t *testing.T) discovery.Settings {
	return discovery.Settings{DiscoveryCommand: "sh " + testkit.Testdata(t, "discover.sh") + " decls.json runs", CallCommand: "sh " + testkit.Testdata(t, "call.sh")}
}

// runs is how many times the discovery command ran.
func (p *project) runs() int {
	data, _ := os.ReadFile(filepath.Join(p.dir, "runs"))
	return strings.Count(string(data), "run\n")
}

// start starts a discovery.Source on the executor ex of the fleet's bus, with its
// identity and workspace.
func start(t *testing.T, b *bus.Bus, ex *executor.Executor, id string, workspace string, settings discovery.Settings, adjust ...func(*discovery.Options)) *discovery.Source {
	t.Helper()
	starter := proctree.Unconfined() // the source's behaviour: sandbox_linux_test.go holds the confinement
	t.Cleanup(starter.Close)
	opts := discovery.Options{Settings: settings, Workspace: workspace, Identity: events.Identity{ID: id, Role: "executor"},
		Conn: b.Conn(), JS: b.JetStream(), Host: hostOn(ex), Logger: bustest.Quiet(), Starter: starter,
		Reserved: func(name string) bool { return name == "read_file" }}
	for _, a := range adjust {
		a(&opts)
	}
	src, err := discovery.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Stop)
	return src
}

// discovered are the catalogue's discovered tools, in listing order.
func discovered(t *testing.T, b *bus.Bus) []*events.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := catalog.Load(ctx, b.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.Tool
	for _, tl := range c.All() {
		if tl.Source == events.SourceDiscovered {
			out = append(out, tl)
		}
	}
	return out
}

func names(tools []*events.Tool) string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return strings.Join(out, ",")
}

// allow remembers an approval of the discovered tool name in workspace,
// as an approver's "always" would.
func allow(t *testing.T, b *bus.Bus, name, workspace string) {
	t.Helper()
	ctx := context.Background()
	kv, err := executor.OpenAllowlistBucket(ctx, b.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	r := events.AllowRecord{AllowEntry: policy.AllowEntry{Scope: "tool", Tool: name, Path: workspace}, By: "approver:test", AddedAt: time.Now()}
	data, _ := json.Marshal(r)
	if _, err := kv.Put(ctx, r.Key(), data); err != nil {
		t.Fatal(err)
	}
}

func call(t *testing.T, c *invoke.Client, name, args string) *events.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Invoke(ctx, &events.Invocation{Tool: name, Args: json.RawMessage(args)}, nil)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// callAllowed calls name until the allowlist entry the test added has
// reached the executor, and returns the first result the policy allowed.
func callAllowed(t *testing.T, c *invoke.Client, name, args string) *events.Result {
	t.Helper()
	var res *events.Result
	testkit.Eventually(t, name+" allowed", func() bool {
		res = call(t, c, name, args)
		return res.Policy != nil && res.Policy.Verdict == events.Allow
	})
	return res
}

func TestDiscoveryHostsToolsAfterTheBuiltins(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"function_declarations": [
		{"name": "echo", "description": "Say it back.", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
		{"description": "nameless"},
		{"name": "read_file", "description": "stands in for the built-in"}]},
		{"name": "fail", "kind": "read", "readOnly": true}]`)
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), p.settings(t))

	st := src.Status()
	if st.State != events.DiscoveryOK || st.Tools != 2 || st.Runs != 1 || st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	wantWarnings := []string{"item 0 function_declarations[1]: a tool with no name; skipped",
		`tool "read_file": the executor hosts a tool of that name already; skipped`}
	if strings.Join(st.Warnings, "\n") != strings.Join(wantWarnings, "\n") {
		t.Errorf("warnings %q, want %q", st.Warnings, wantWarnings)
	}
	ctx := context.Background()
	c, err := catalog.Load(ctx, f.Bus.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	all := c.All()
	var sources []string
	for _, tl := range all {
		if len(sources) == 0 || sources[len(sources)-1] != string(tl.Source) {
			sources = append(sources, string(tl.Source))
		}
	}
	if strings.Join(sources, ",") != "builtin,discovered" {
		t.Errorf("sources in listing order: %v, want the built-ins, then the discovered tools", sources)
	}
	d := discovered(t, f.Bus)
	if names(d) != "echo,fail" {
		t.Fatalf("discovered %s", names(d))
	}
	for _, tl := range d {
		if tl.Kind != events.KindOther || tl.ReadOnly || tl.Category != "discovered" || tl.Hosts[0] != "executor@test" ||
			!strings.Contains(tl.Description, "A call runs `sh "+testkit.Testdata(t, "call.sh")+" "+tl.Name+"` there") {
			t.Errorf("%+v", tl)
		}
	}
	if rf, _ := c.Lookup("read_file"); rf.Source != events.SourceBuiltin {
		t.Errorf("read_file is %s", rf.Source)
	}
	// The status is on the bus for any process.
	states, _, err := discovery.ReadStatus(ctx, f.Bus.JetStream())
	if err != nil || len(states) != 1 || states[0].Executor != "executor@test" || states[0].Tools != 2 || states[0].Workspace != f.Workspace.Root() {
		t.Errorf("status on the bus: %+v, %v", states, err)
	}
}

// TestDiscoveredCallsAsk: the default policy asks before a discovered
// tool runs (with no approver, the call is denied at once); an approval
// remembered for the tool in this workspace lets it run, and its failure
// block comes back exactly.
func TestDiscoveredCallsAsk(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}, {"name": "fail"}]`)
	start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), p.settings(t))

	res := call(t, f.Client, "echo", `{"text":"hi"}`)
	if res.Error == nil || res.Error.Type != events.ErrPolicyDenied || res.Policy == nil || res.Policy.Verdict != events.AskUser ||
		res.Policy.Reason != "discovered tools ask the user: they run the project's own call command" {
		t.Fatalf("unapproved call: %+v, policy %+v", res.Error, res.Policy)
	}
	// An approval for another workspace's echo does not count.
	allow(t, f.Bus, "echo", "/somewhere/else")
	allow(t, f.Bus, "echo", f.Workspace.Root())
	allow(t, f.Bus, "fail", f.Workspace.Root())
	res = callAllowed(t, f.Client, "echo", `{"text":"hi"}`)
	if res.Error != nil || res.LLMContent != `{"text":"hi"}` {
		t.Errorf("echo: %+v %q", res.Error, res.LLMContent)
	}
	res = callAllowed(t, f.Client, "fail", `{}`)
	want := "Stdout: partial\nStderr: boom\nError: (none)\nExit Code: 3\nSignal: (none)"
	if res.Error == nil || res.Error.Type != events.ErrDiscoveredToolExecution || res.Error.Message != want || res.LLMContent != want || res.ReturnDisplay != want {
		t.Errorf("fail: %+v\n%q", res.Error, res.LLMContent)
	}
	// Arguments are validated against the declared schema before anything
	// runs.
	before := p.runs()
	res = call(t, f.Client, "echo", `{"text": 5}`)
	if res.Error == nil || res.Error.Type != events.ErrInvalidParams || p.runs() != before {
		t.Errorf("invalid arguments: %+v", res.Error)
	}
}

func TestFailedRediscoveryKeepsTheSet(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo"}, {"name": "fail"}]`)
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), p.settings(t))
	ctx := context.Background()
	for _, broken := range []string{`{"not": "an array"}`, `[{"name": `, ``} {
		p.declare(t, broken)
		if _, err := src.Discover(ctx, true); err == nil {
			t.Fatalf("%q: discovery succeeded", broken)
		}
		if got := names(discovered(t, f.Bus)); got != "echo,fail" {
			t.Errorf("%q: after a failed discovery: %s", broken, got)
		}
		if st := src.Status(); st.State != events.DiscoveryFailed || st.Tools != 2 || !strings.Contains(st.Error, "the discovery") {
			t.Errorf("%q: status %+v", broken, st)
		}
	}
	// The tools still run.
	allow(t, f.Bus, "echo", f.Workspace.Root())
	if res := callAllowed(t, f.Client, "echo", `{"a":1}`); res.LLMContent != `{"a":1}` {
		t.Errorf("echo after failed discoveries: %q", res.LLMContent)
	}
	// A discovery that succeeds replaces the set as a whole.
	p.declare(t, `[{"name": "echo"}, {"name": "lines"}]`)
	res, err := src.Discover(ctx, true)
	if err != nil || strings.Join(res.Names, ",") != "echo,lines" {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := names(discovered(t, f.Bus)); got != "echo,lines" {
		t.Errorf("after a discovery: %s", got)
	}
	if st := src.Status(); st.State != events.DiscoveryOK || st.Error != "" || st.Runs != 5 {
		t.Errorf("status %+v", st)
	}
}

func TestStartWithFailingDiscovery(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[]`)
	settings := p.settings(t)
	settings.DiscoveryCommand = `sh -c 'echo "tools.yaml: no such file" >&2; exit 2'`
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), settings)
	st := src.Status()
	if st.State != events.DiscoveryFailed || st.Tools != 0 || !strings.Contains(st.Error, "failed with exit code 2; stderr: tools.yaml: no such file") {
		t.Errorf("status %+v", st)
	}
	if d := discovered(t, f.Bus); len(d) != 0 {
		t.Errorf("discovered %s", names(d))
	}
	// discovery.Settings that cannot work are refused at the start.
	_, err := discovery.Start(context.Background(), discovery.Options{Settings: discovery.Settings{DiscoveryCommand: "sh 'unterminated", CallCommand: "c"}, Workspace: f.Workspace.Root(),
		Identity: events.Identity{ID: "x"}, Conn: f.Bus.Conn(), JS: f.Bus.JetStream(), Host: hostOn(f.Executor)})
	if err == nil || !strings.Contains(err.Error(), "tools.discoveryCommand") {
		t.Errorf("got %v", err)
	}
}

// TestExecutorsHostTheirOwnTools: two executors, each with its own
// workspace and discovery command; each call runs in the workspace of
// the executor that discovered the tool, wherever it arrives.
func TestExecutorsHostTheirOwnTools(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	pol := policytest.Default(t)
	conn := bustest.Connect(t, f.Bus)
	wsB := t.TempDir()
	exB, err := executor.Start(context.Background(), conn.Conn(), conn.JetStream(), executor.Config{Identity: events.Identity{ID: "executor@two", Role: "executor"},
		Policy: pol, Workspace: wsB, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		exB.Stop(ctx)
	})
	wsA := f.Workspace.Root()
	a := newProject(t, wsA, `[{"name": "where_a"}, {"name": "shared"}]`)
	b := newProject(t, wsB, `[{"name": "where_b"}, {"name": "shared", "description": "another shared"}]`)
	settingsA, settingsB := a.settings(t), b.settings(t)
	settingsA.CallCommand, settingsB.CallCommand = "sh -c pwd", "sh -c pwd" // the name is $0
	start(t, f.Bus, f.Executor, "executor@test", wsA, settingsA)
	srcB := start(t, conn, exB, "executor@two", wsB, settingsB)

	// The name another executor hosts with another declaration is not
	// taken from it.
	if st := srcB.Status(); st.Tools != 2 || !strings.Contains(strings.Join(st.Warnings, "\n"), "shared: tool \"shared\" is hosted by executor@test") {
		t.Errorf("B's status: %+v", st)
	}
	if got := names(discovered(t, f.Bus)); got != "where_a,shared,where_b" {
		t.Errorf("discovered %s", got)
	}
	for _, c := range []struct{ tool, ws string }{{"where_a", wsA}, {"shared", wsA}, {"where_b", wsB}} {
		allow(t, f.Bus, c.tool, c.ws)
	}
	// A's approval of where_b's name in A's workspace would not do: B's
	// where_b asks until approved in B's.
	for _, c := range []struct{ tool, ws string }{{"where_a", wsA}, {"shared", wsA}, {"where_b", wsB}} {
		for range 4 { // the calls land on either executor
			res := callAllowed(t, f.Client, c.tool, `{}`)
			if res.Error != nil || strings.TrimSpace(res.LLMContent) != c.ws {
				t.Errorf("%s ran in %q, want %q (%+v)", c.tool, res.LLMContent, c.ws, res.Error)
			}
		}
	}
}

func TestIdleToolsExpire(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo"}, {"name": "lines"}]`)
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	settings := p.settings(t)
	settings.IdleExpiry = time.Hour
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), settings, func(o *discovery.Options) { o.Now = clock })

	allow(t, f.Bus, "echo", f.Workspace.Root())
	advance(50 * time.Minute)
	callAllowed(t, f.Client, "echo", `{}`) // echo was used 50 minutes in
	advance(20 * time.Minute)
	src.ExpireIdle(clock()) // lines is 70 minutes idle, echo 20
	if got := names(discovered(t, f.Bus)); got != "echo" {
		t.Fatalf("after the expiry: %s", got)
	}
	if st := src.Status(); st.Tools != 1 || st.Expired != 1 {
		t.Errorf("status %+v", st)
	}
	if res := call(t, f.Client, "lines", `{}`); res.Error == nil || res.Error.Type != events.ErrToolNotFound {
		t.Errorf("an expired tool: %+v", res.Error)
	}
	// The next discovery brings it back.
	if _, err := src.Discover(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if got := names(discovered(t, f.Bus)); got != "echo,lines" {
		t.Errorf("after the next discovery: %s", got)
	}
	if st := src.Status(); st.Tools != 2 || st.Expired != 0 {
		t.Errorf("status %+v", st)
	}
}

func TestIdleExpiryRunsOnItsOwn(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo"}]`)
	settings := p.settings(t)
	settings.IdleExpiry = 50 * time.Millisecond
	start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), settings)
	testkit.Eventually(t, "the idle tool expires", func() bool { return len(discovered(t, f.Bus)) == 0 })
}

func TestIntervalRediscovers(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo"}]`)
	settings := p.settings(t)
	settings.Interval = discovery.MinInterval
	start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), settings)
	p.declare(t, `[{"name": "echo"}, {"name": "lines"}]`)
	testkit.Eventually(t, "a discovery by the interval", func() bool { return names(discovered(t, f.Bus)) == "echo,lines" })
	testkit.Eventually(t, "another", func() bool { return p.runs() >= 3 })
}

// TestCacheTTL: within the TTL a discovery takes the last result instead
// of running the command, unless forced; asked over the bus too.
func TestCacheTTL(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo"}]`)
	settings := p.settings(t)
	settings.CacheTTL = time.Hour
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), settings)
	ctx := context.Background()
	if p.runs() != 1 {
		t.Fatalf("%d runs at the start", p.runs())
	}
	p.declare(t, `[{"name": "echo"}, {"name": "lines"}]`)
	for range 3 {
		res, err := src.Discover(ctx, false)
		if err != nil || !res.Cached || strings.Join(res.Names, ",") != "echo" {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	reply := ask(t, f.Bus, "executor@test", false)
	if reply.Error != "" || !reply.Cached || reply.CachedAt == nil || strings.Join(reply.Tools, ",") != "echo" {
		t.Errorf("over the bus: %+v", reply)
	}
	if p.runs() != 1 {
		t.Errorf("%d runs within the TTL, want 1", p.runs())
	}
	reply = ask(t, f.Bus, "executor@test", true)
	if reply.Error != "" || reply.Cached || strings.Join(reply.Tools, ",") != "echo,lines" || p.runs() != 2 {
		t.Errorf("forced: %+v, %d runs", reply, p.runs())
	}
	// Without a TTL, every discovery runs the command.
	settings.CacheTTL = 0
	if err := src.Apply(ctx, settings); err != nil {
		t.Fatal(err)
	}
	if res, err := src.Discover(ctx, false); err != nil || res.Cached || p.runs() != 3 {
		t.Errorf("no TTL: %+v, %v, %d runs", res, err, p.runs())
	}
}

// ask sends executor a discovery request, as toolbus tools discover does.
func ask(t *testing.T, b *bus.Bus, executor string, force bool) *events.DiscoverReply {
	t.Helper()
	c := bustest.Connect(t, b)
	data, err := events.Encode(&events.DiscoverRequest{Header: events.Header{Sender: events.Identity{ID: "cli@test", Role: "cli"}}, Force: force})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msg, err := c.Conn().RequestWithContext(ctx, events.DiscoverSubject(executor), data)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := events.Decode[events.DiscoverReply](msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	// The request is in the audit trail, as it was sent.
	subject, _ := events.Recorded(events.DiscoverSubject(executor))
	if got := bustest.Recorded(t, b, subject); string(got) != string(data) {
		t.Errorf("recorded on %s: %s, sent %s", subject, got, data)
	}
	return reply
}

func TestApplySettings(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo"}]`)
	settings := p.settings(t)
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), settings)
	ctx := context.Background()

	// A new call command: the same declarations, hosted again with it,
	// without running the discovery command.
	settings.CallCommand = "sh -c pwd"
	if err := src.Apply(ctx, settings); err != nil {
		t.Fatal(err)
	}
	d := discovered(t, f.Bus)
	if p.runs() != 1 || len(d) != 1 || !strings.Contains(d[0].Description, "`sh -c pwd echo`") {
		t.Errorf("%d runs, %+v", p.runs(), d)
	}
	allow(t, f.Bus, "echo", f.Workspace.Root())
	if res := callAllowed(t, f.Client, "echo", `{}`); strings.TrimSpace(res.LLMContent) != f.Workspace.Root() {
		t.Errorf("the new call command did not run: %q", res.LLMContent)
	}
	// A new discovery command runs at once.
	os.WriteFile(filepath.Join(f.Workspace.Root(), "other.json"), []byte(`[{"name": "lines"}]`), 0o644)
	settings.DiscoveryCommand = "cat other.json"
	if err := src.Apply(ctx, settings); err != nil {
		t.Fatal(err)
	}
	if got := names(discovered(t, f.Bus)); got != "lines" {
		t.Errorf("after a new discovery command: %s", got)
	}
	// discovery.Settings that cannot work change nothing.
	if err := src.Apply(ctx, discovery.Settings{DiscoveryCommand: "cat other.json"}); err == nil {
		t.Error("a discovery command without a call command was applied")
	}
	// No command: the discovered tools go, and the status entry.
	if err := src.Apply(ctx, discovery.Settings{}); err != nil {
		t.Fatal(err)
	}
	if d := discovered(t, f.Bus); len(d) != 0 {
		t.Errorf("after the command left: %s", names(d))
	}
	if states, _, _ := discovery.ReadStatus(ctx, f.Bus.JetStream()); len(states) != 0 {
		t.Errorf("status entries: %+v", states)
	}
	if _, err := src.Discover(ctx, true); !errors.Is(err, discovery.ErrNotConfigured) {
		t.Errorf("got %v", err)
	}
}

func TestStopRemovesTheStatus(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo"}]`)
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), p.settings(t))
	// A discovery request in flight, and the loop, end with Stop.
	data, err := events.Encode(&events.DiscoverRequest{Header: events.Header{Sender: events.Identity{ID: "cli@test"}}, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	reqCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Bus.Conn().RequestWithContext(reqCtx, events.DiscoverSubject("executor@test"), data) // its answer does not matter
	testkit.Eventually(t, "the request arrives", func() bool { return p.runs() >= 2 })
	src.Stop()
	if leaks := sourceGoroutines(); leaks != "" {
		t.Errorf("goroutines left after Stop:\n%s", leaks)
	}
	ctx := context.Background()
	if states, _, _ := discovery.ReadStatus(ctx, f.Bus.JetStream()); len(states) != 0 {
		t.Errorf("status entries after Stop: %+v", states)
	}
	if _, err := src.Discover(ctx, true); err == nil {
		t.Error("a stopped source discovered")
	}
}

// TestRediscoveryAppliesNewSchemas: a tool found again with the same
// schema keeps it (the executor does not compile it again), one found
// with another schema is validated by the new one.
func TestRediscoveryAppliesNewSchemas(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	decl := func(typ string) string {
		return `[{"name": "echo", "parameters": {"type": "object", "properties": {"n": {"type": "` + typ + `"}}, "required": ["n"]}}]`
	}
	p := newProject(t, f.Workspace.Root(), decl("string"))
	src := start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), p.settings(t))
	// Validation comes before the policy: INVALID_TOOL_PARAMS when the
	// schema refuses, POLICY_DENIED (no approver) when it accepts.
	check := func(args string, want events.ErrorType) {
		t.Helper()
		if res := call(t, f.Client, "echo", args); res.Error == nil || res.Error.Type != want {
			t.Errorf("%s: %+v, want %s", args, res.Error, want)
		}
	}
	check(`{"n": 5}`, events.ErrInvalidParams)
	check(`{"n": "5"}`, events.ErrPolicyDenied)
	if _, err := src.Discover(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	check(`{"n": 5}`, events.ErrInvalidParams)
	p.declare(t, decl("integer"))
	if _, err := src.Discover(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	check(`{"n": 5}`, events.ErrPolicyDenied)
	check(`{"n": "5"}`, events.ErrInvalidParams)
}

// sourceGoroutines are the stacks of goroutines running a Source's code.
func sourceGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "discovery.(*discovery.Source)") || strings.Contains(g, "discovery.(*feeder)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// TestDiscoveredCallDeadlineKillsTheTree: a discovered tool that does not
// end by the executor's deadline gets TIMEOUT, and every process it
// started, in its group or not, is gone.
func TestDiscoveredCallDeadlineKillsTheTree(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.Timeout = 3 * time.Second })
	p := newProject(t, f.Workspace.Root(), `[{"name": "hang"}]`)
	start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), p.settings(t))
	allow(t, f.Bus, "hang", f.Workspace.Root())
	var res *events.Result
	testkit.Eventually(t, "hang allowed", func() bool {
		res = call(t, f.Client, "hang", `{}`)
		return res.Policy != nil && res.Policy.Verdict == events.Allow
	})
	if res.Error == nil || res.Error.Type != events.ErrTimeout {
		t.Errorf("got %+v, want TIMEOUT", res.Error)
	}
	for _, file := range []string{"child.pid", "setsid.pid", "orphan.pid"} {
		testkit.WaitReaped(t, testkit.WaitPID(t, filepath.Join(f.Workspace.Root(), file)))
	}
}
