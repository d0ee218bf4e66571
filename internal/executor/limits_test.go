package executor

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// limitsPolicy allows every call and limits calls by the tool's name:
// ping* 3 calls a day per claimed agent, counted exactly, pung* and
// burst* 3 and 5 a day per agent, counted by the executors, exact* 5 a
// day per agent, exactly, both* 2 a day per agent, counted by the
// executors, and 1 at once with no line, pang* 4 a day per proven principal, slow* 1
// at once per principal with a line of 5, hold* 1 at once with no line;
// list_directory gets a limit that is no limit.
var limitsPolicy = sync.OnceValues(func() (*policy.Policy, error) {
	return policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus

decision := {"verdict": "ALLOW", "reason": "test"}

principal := split(input.caller.id, "/")[0] if input.caller.proven

else := "_"

limits contains {"name": "pings per agent", "key": ["agent", input.caller.agent], "calls": 3, "per": "24h", "exact": true} if startswith(input.tool.name, "ping")

limits contains {"name": "pungs per agent", "key": ["agent", input.caller.agent], "calls": 3, "per": "24h"} if startswith(input.tool.name, "pung")

limits contains {"name": "bursts per agent", "key": ["agent", input.caller.agent], "calls": 5, "per": "24h"} if startswith(input.tool.name, "burst")

limits contains {"name": "exact bursts per agent", "key": ["agent", input.caller.agent], "calls": 5, "per": "24h", "exact": true} if startswith(input.tool.name, "exact")

limits contains {"name": "boths per agent", "key": ["agent", input.caller.agent], "calls": 2, "per": "24h"} if startswith(input.tool.name, "both")

limits contains {"name": "boths at once", "key": [principal], "concurrent": 1} if startswith(input.tool.name, "both")

limits contains {"name": "pangs per principal", "key": [principal], "calls": 4, "per": "24h"} if startswith(input.tool.name, "pang")

limits contains {"name": "slow at once", "key": [principal], "concurrent": 1, "queue": {"max": 5, "wait": "5m"}} if startswith(input.tool.name, "slow")

limits contains {"name": "hold at once", "key": [principal], "concurrent": 1} if startswith(input.tool.name, "hold")

limits contains {"name": "broken", "key": "k", "calls": 1} if input.tool.name == "list_directory"

limits contains {"name": "small arguments", "key": "k", "bytes": 16, "per": "24h"} if input.tool.name == "pong"
`})
})

func withLimits(t *testing.T, more ...option) option {
	pol, err := limitsPolicy()
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) {
		c.Policy = pol
		for _, o := range more {
			o(c)
		}
	}
}

func echoTool(name string) tool.Tool {
	return tool.Func(events.ToolSpec{Name: name, Kind: events.KindRead, Description: "says its name"}, func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
		return tool.Text(name), nil
	})
}

// gated is a tool that records the n of each call it runs and, for the
// calls with hold set, waits until open is closed.
type gated struct {
	mu   sync.Mutex
	ran  []int
	open chan struct{}
	// started is told each n as it starts.
	started chan int
}

func newGated() *gated { return &gated{open: make(chan struct{}), started: make(chan int, 16)} }

func (g *gated) tool(name string) tool.Tool {
	return tool.Func(events.ToolSpec{Name: name, Kind: events.KindRead, Description: "waits for its gate",
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"hold":{"type":"boolean"}}}`)},
		func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
			var a struct {
				N    int  `json:"n"`
				Hold bool `json:"hold"`
			}
			_ = json.Unmarshal(c.Args, &a)
			g.mu.Lock()
			g.ran = append(g.ran, a.N)
			g.mu.Unlock()
			g.started <- a.N
			if a.Hold {
				select {
				case <-g.open:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return tool.Text("ran"), nil
		})
}

func (g *gated) order() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.ran...)
}

// invokeAsync invokes on its own goroutine; the result comes on the
// channel, nil when the invocation failed (the test is told).
func invokeAsync(t *testing.T, client *invoke.Client, inv *events.Invocation, w *invoke.Watch) <-chan *events.Result {
	t.Helper()
	done := make(chan *events.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := client.InvokeWatch(ctx, inv, w)
		if err != nil {
			t.Errorf("invoke %s: %v", inv.Tool, err)
		}
		done <- res
	}()
	return done
}

func await(t *testing.T, what string, ch <-chan *events.Result) *events.Result {
	t.Helper()
	select {
	case res := <-ch:
		if res == nil {
			t.Fatalf("%s: no result", what)
		}
		return res
	case <-time.After(90 * time.Second):
		t.Fatalf("%s: no result in 90 s", what)
	}
	return nil
}

// queuedAt invokes and returns once the call says it waits in line, at
// the position it says, with the channel of its result.
func queuedAt(t *testing.T, client *invoke.Client, inv *events.Invocation) (int, <-chan *events.Result) {
	t.Helper()
	q := make(chan *events.Queued, 1)
	done := invokeAsync(t, client, inv, &invoke.Watch{Queued: func(n *events.Queued) { q <- n }})
	select {
	case n := <-q:
		return n.Position, done
	case res := <-done:
		t.Fatalf("%s ended without waiting in line: %s %s", inv.Tool, errType(res), res.LLMContent)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: not queued in 60 s", inv.Tool)
	}
	return 0, nil
}

// recordedResult waits for the audit stream to hold the result of
// invocation id, and returns it. Results are recorded after they are
// sent, one executor's independently of another's: the last one stored
// need not be the last call's.
func recordedResult(t *testing.T, e *env, id string) *events.Result {
	t.Helper()
	var found *events.Result
	testkit.Eventually(t, "the result of "+id+" in the audit stream", func() bool {
		for _, r := range audittest.Envelopes[events.Result](t, e.bus.JetStream(), events.SubjectResult) {
			if r.InvocationID == id {
				found = r
			}
		}
		return found != nil
	})
	return found
}

func TestRateLimitsHoldAcrossTheFleetPerAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	// Two executors, each the only host of its tool: the calls of one
	// agent alternate between them, and share one count, exact: each
	// call is counted on the bus.
	e.hostTools(t, "executor@a", []tool.Tool{echoTool("ping_a"), echoTool("pong")}, withLimits(t))
	e.hostTools(t, "executor@b", []tool.Tool{echoTool("ping_b")}, withLimits(t))
	x := invoke.NewClient(e.callerConn, events.Identity{ID: "agent:x", Agent: "x"}, "")
	y := invoke.NewClient(e.callerConn, events.Identity{ID: "agent:y", Agent: "y"}, "")
	t.Cleanup(func() { x.Close(); y.Close() })
	call := func(c *invoke.Client, name string) *events.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := c.Invoke(ctx, &events.Invocation{Tool: name, Args: json.RawMessage(`{}`)}, nil)
		if err != nil {
			t.Fatalf("invoke %s: %v", name, err)
		}
		return res
	}
	for i, name := range []string{"ping_a", "ping_b", "ping_a"} {
		if res := call(x, name); res.Error != nil {
			t.Fatalf("call %d of agent x: %s %s", i, errType(res), res.LLMContent)
		}
	}
	over := call(x, "ping_b")
	if errType(over) != events.ErrRateLimited || over.Error.RetryAfterMillis <= 0 || !strings.Contains(over.LLMContent, "pings per agent") {
		t.Fatalf("the 4th call of agent x: %s %+v, want RATE_LIMITED with a retry-after", errType(over), over.Error)
	}
	// The refusal is in the trail like any result.
	if rec := recordedResult(t, e, over.InvocationID); errType(rec) != events.ErrRateLimited || rec.Error.RetryAfterMillis != over.Error.RetryAfterMillis {
		t.Errorf("recorded: %s %+v", errType(rec), rec.Error)
	}
	// Refused calls are not counted: agent x stays refused, no more.
	if res := call(x, "ping_a"); errType(res) != events.ErrRateLimited {
		t.Errorf("agent x after its refusal: %s", errType(res))
	}
	// Another agent's calls are untouched by x's burst.
	for i, name := range []string{"ping_a", "ping_b", "ping_a"} {
		if res := call(y, name); res.Error != nil {
			t.Fatalf("call %d of agent y: %s %s", i, errType(res), res.LLMContent)
		}
	}
	// Bytes of arguments: a call larger than the limit is refused and
	// told not to retry, without counting; others count their bytes.
	pong := func(args string) *events.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := x.Invoke(ctx, &events.Invocation{Tool: "pong", Args: json.RawMessage(args)}, nil)
		if err != nil {
			t.Fatalf("invoke pong: %v", err)
		}
		return res
	}
	if res := pong(`{"n":1}`); res.Error != nil {
		t.Fatalf("8 bytes: %s %s", errType(res), res.LLMContent)
	}
	if res := pong(`{"pad":"more than sixteen bytes"}`); errType(res) != events.ErrRateLimited || res.Error.RetryAfterMillis != 0 || !strings.Contains(res.LLMContent, "cannot run under this limit") {
		t.Errorf("a call larger than the limit: %s %+v", errType(res), res.Error)
	}
	if res := pong(`{"n":2}`); res.Error != nil {
		t.Fatalf("8 more bytes, 16 in all: %s %s", errType(res), res.LLMContent)
	}
	if res := pong(`{"n":3}`); errType(res) != events.ErrRateLimited || res.Error.RetryAfterMillis <= 0 {
		t.Errorf("past 16 bytes: %s %+v", errType(res), res.Error)
	}
	// A call the policy sets no limit on is not held by any.
	if res := e.call(t, "read_file", `{"file_path":"README.md"}`); res.Error != nil {
		t.Errorf("an unlimited call: %s %s", errType(res), res.LLMContent)
	}
	// A malformed limit denies the call, saying why.
	if res := e.call(t, "list_directory", `{"path":"."}`); errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, policy.LimitsQuery) {
		t.Errorf("a call with a malformed limit: %s %s, want POLICY_DENIED naming %s", errType(res), res.LLMContent, policy.LimitsQuery)
	}
}

// TestAPrincipalCannotEscapeItsLimitByRenamingItself: where the bus
// proves who sends, a caller may name itself principal/anything, with
// any agent and session; a limit keyed on the principal counts them all.
func TestAPrincipalCannotEscapeItsLimitByRenamingItself(t *testing.T) {
	t.Parallel()
	enforced := func(c *Config) { c.IdentitiesEnforced = true }
	e := newEnv(t, withLimits(t, enforced))
	e.hostTools(t, "executor@a", []tool.Tool{echoTool("pang_a")}, withLimits(t, enforced))
	conn := bustest.Connect(t, e.bus).Conn()
	invokeAs := func(principal string, id events.Identity) *events.Result {
		t.Helper()
		c := invoke.NewClient(conn, id, principal)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := c.Invoke(ctx, &events.Invocation{Tool: "pang_a", Args: json.RawMessage(`{}`)}, nil)
		if err != nil {
			t.Fatalf("invoke: %v", err)
		}
		return res
	}
	for i := range 4 {
		id := events.Identity{ID: "mallory/" + strings.Repeat("x", i+1), Agent: "agent-" + string(rune('a'+i)), Session: "s" + string(rune('0'+i))}
		if res := invokeAs("mallory", id); res.Error != nil {
			t.Fatalf("call %d: %s %s", i, errType(res), res.LLMContent)
		}
	}
	res := invokeAs("mallory", events.Identity{ID: "mallory/fresh", Agent: "someone-else", Session: "new", User: "root"})
	if errType(res) != events.ErrRateLimited {
		t.Fatalf("the 5th call under new names: %s %s, want RATE_LIMITED", errType(res), res.LLMContent)
	}
	if res := invokeAs("alice", events.Identity{ID: "alice"}); res.Error != nil {
		t.Errorf("another principal: %s %s", errType(res), res.LLMContent)
	}
}

func TestConcurrencyLimitRefusesWithoutAQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	g := newGated()
	e.hostTools(t, "executor@a", []tool.Tool{g.tool("hold_a")}, withLimits(t))
	e.hostTools(t, "executor@b", []tool.Tool{g.tool("hold_b")}, withLimits(t))
	first := invokeAsync(t, e.client, &events.Invocation{Tool: "hold_a", Args: json.RawMessage(`{"n":1,"hold":true}`)}, nil)
	<-g.started
	over := e.call(t, "hold_b", `{"n":2}`)
	if errType(over) != events.ErrConcurrencyLimited || over.Error.RetryAfterMillis <= 0 || !strings.Contains(over.LLMContent, "at most 1 such calls at once, and as many run") {
		t.Fatalf("a second call at once on another executor: %s %+v %q, want CONCURRENCY_LIMITED with a retry-after, saying as many run", errType(over), over.Error, over.LLMContent)
	}
	close(g.open)
	if res := await(t, "the first call", first); res.Error != nil {
		t.Fatalf("the first call: %s %s", errType(res), res.LLMContent)
	}
	// Its slot was given up before its result went out.
	if res := e.call(t, "hold_b", `{"n":3}`); res.Error != nil {
		t.Errorf("a call after the first ended: %s %s", errType(res), res.LLMContent)
	}
}

func TestAQueueDrainsInOrderAcrossTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	g := newGated()
	e.hostTools(t, "executor@a", []tool.Tool{g.tool("slow_a")}, withLimits(t))
	e.hostTools(t, "executor@b", []tool.Tool{g.tool("slow_b")}, withLimits(t))
	first := invokeAsync(t, e.client, &events.Invocation{Tool: "slow_a", Args: json.RawMessage(`{"n":0,"hold":true}`)}, nil)
	<-g.started
	var waiting []<-chan *events.Result
	for i, name := range []string{"slow_b", "slow_a", "slow_b"} {
		pos, done := queuedAt(t, e.client, &events.Invocation{Tool: name, Args: json.RawMessage(`{"n":` + string(rune('1'+i)) + `}`)})
		if pos != i+1 {
			t.Errorf("call %d joined the line at %d, want %d", i+1, pos, i+1)
		}
		waiting = append(waiting, done)
	}
	close(g.open)
	for i, done := range append([]<-chan *events.Result{first}, waiting...) {
		if res := await(t, "a queued call", done); res.Error != nil {
			t.Errorf("call %d: %s %s", i, errType(res), res.LLMContent)
		}
	}
	if got := g.order(); len(got) != 4 || got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
		t.Errorf("ran in the order %v, want [0 1 2 3]", got)
	}
}

func TestCancelAndDeadlineWhileQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	g := newGated()
	e.hostTools(t, "executor@a", []tool.Tool{g.tool("slow_a")}, withLimits(t))
	first := invokeAsync(t, e.client, &events.Invocation{Tool: "slow_a", Args: json.RawMessage(`{"n":0,"hold":true}`)}, nil)
	<-g.started

	_, cancelled := queuedAt(t, e.client, &events.Invocation{Header: events.Header{ID: "cancel-me"}, Tool: "slow_a", Args: json.RawMessage(`{"n":1}`)})
	if err := e.client.Cancel(context.Background(), "cancel-me", "not needed any more"); err != nil {
		t.Fatal(err)
	}
	if res := await(t, "the cancelled call", cancelled); errType(res) != events.ErrCancelled {
		t.Errorf("cancelled while queued: %s %s", errType(res), res.LLMContent)
	}
	_, late := queuedAt(t, e.client, &events.Invocation{Tool: "slow_a", Args: json.RawMessage(`{"n":2}`), TimeoutMillis: 300})
	if res := await(t, "the call past its deadline", late); errType(res) != events.ErrTimeout {
		t.Errorf("deadline while queued: %s %s", errType(res), res.LLMContent)
	}
	// Both left the line: the next call is first in it.
	pos, next := queuedAt(t, e.client, &events.Invocation{Tool: "slow_a", Args: json.RawMessage(`{"n":3}`)})
	if pos != 1 {
		t.Errorf("a call after them joined the line at %d, want 1", pos)
	}
	close(g.open)
	await(t, "the first call", first)
	if res := await(t, "the next call", next); res.Error != nil {
		t.Errorf("the next call: %s %s", errType(res), res.LLMContent)
	}
	if got := g.order(); len(got) != 2 || got[1] != 3 {
		t.Errorf("ran %v, want [0 3]: a call that left the line ran", got)
	}
}

// TestADeadExecutorsSlotsFreeThemselves: the executor holding the only
// slot loses its connection; the call waiting on another executor runs
// once the dead one's lease lapses.
func TestADeadExecutorsSlotsFreeThemselves(t *testing.T) {
	t.Parallel()
	shortLease := func(c *Config) { c.LimitLease = time.Second }
	e := newEnv(t, withLimits(t, shortLease))
	g := newGated()
	_, doomed := e.hostTools(t, "executor@doomed", []tool.Tool{g.tool("slow_a")}, withLimits(t, shortLease))
	e.hostTools(t, "executor@b", []tool.Tool{g.tool("slow_b")}, withLimits(t, shortLease))
	first := invokeAsync(t, e.client, &events.Invocation{Tool: "slow_a", Args: json.RawMessage(`{"n":0,"hold":true}`)}, nil)
	<-g.started
	_, waiting := queuedAt(t, e.client, &events.Invocation{Tool: "slow_b", Args: json.RawMessage(`{"n":1}`)})
	doomed.Conn().Close()
	if res := await(t, "the waiting call", waiting); res.Error != nil {
		t.Fatalf("the waiting call: %s %s", errType(res), res.LLMContent)
	}
	if res := await(t, "the lost call", first); errType(res) != events.ErrExecutorLost {
		t.Errorf("the call of the dead executor: %s %s", errType(res), res.LLMContent)
	}
}

// TestARateCountsTheOtherExecutorsCallsOnceHeard: a rate the policy
// does not ask to be exact is counted by each executor, which adds what
// the other counted once its message has come: one agent's calls
// alternating between two executors, each waiting for the other's count,
// are held to the limit exactly, and a refused call counts nowhere.
func TestARateCountsTheOtherExecutorsCallsOnceHeard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	a, _ := e.hostTools(t, "executor@a", []tool.Tool{echoTool("pung_a")}, withLimits(t))
	b, _ := e.hostTools(t, "executor@b", []tool.Tool{echoTool("pung_b")}, withLimits(t))
	everyoneKnows(t, []*Executor{e.exec, a, b}, "pung_a", "pung_b")
	x := invoke.NewClient(e.callerConn, events.Identity{ID: "agent:x", Agent: "x"}, "")
	t.Cleanup(func() { x.Close() })
	for i, name := range []string{"pung_a", "pung_b", "pung_a", "pung_b", "pung_a"} {
		on, other := a, b
		if strings.HasSuffix(name, "_b") {
			on, other = b, a
		}
		heardAll(t, on, other)
		res := callWith(t, x, name, `{}`)
		switch {
		case i < 3 && res.Error != nil:
			t.Fatalf("call %d of agent x, on %s: %s %s", i+1, on.id.ID, errType(res), res.LLMContent)
		case i >= 3 && (errType(res) != events.ErrRateLimited || res.Error.RetryAfterMillis <= 0 || res.Error.RetryAfterMillis > (24*time.Hour).Milliseconds() || !strings.Contains(res.LLMContent, "pungs per agent")):
			t.Fatalf("call %d of agent x, on %s: %s %+v, want RATE_LIMITED with a retry-after within the day's window", i+1, on.id.ID, errType(res), res.Error)
		}
	}
	// Three calls ran, each counted once and told once; the two refused
	// told nothing.
	if told := a.counts.Told() + b.counts.Told(); told != 3 {
		t.Errorf("the executors told %d counts, want 3", told)
	}
}

// everyoneKnows waits until every executor's catalogue has the tools:
// a call goes to any of them first.
func everyoneKnows(t *testing.T, exs []*Executor, tools ...string) {
	t.Helper()
	for _, ex := range exs {
		for _, name := range tools {
			waitTool(t, ex, name)
		}
	}
}

// burst calls tools by turns from many goroutines at once, n calls in
// all, and returns how many ran and how many a rate limit refused.
func burst(t *testing.T, c *invoke.Client, tools []string, n int) (ran, refused int) {
	t.Helper()
	results := make([]<-chan *events.Result, n)
	for i := range n {
		results[i] = invokeAsync(t, c, &events.Invocation{Tool: tools[i%len(tools)], Args: json.RawMessage(`{}`)}, nil)
	}
	for i, done := range results {
		switch res := await(t, "a call of the burst", done); {
		case res.Error == nil:
			ran++
		case errType(res) == events.ErrRateLimited:
			refused++
		default:
			t.Errorf("call %d: %s %s", i, errType(res), res.LLMContent)
		}
	}
	return ran, refused
}

// TestARateOvershootsAtMostTheBound: a burst of one agent's calls at
// once, by turns on two executors, against a rate of 5 the executors
// count: each lets a call through only while the count it knows, which
// holds every call it let through itself, is under the limit, so the
// two together let through 10 at most (docs/fleet.md: the limit times
// the executors), and the limit at least. Once each has heard the
// other, both refuse.
func TestARateOvershootsAtMostTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	a, _ := e.hostTools(t, "executor@a", []tool.Tool{echoTool("burst_a")}, withLimits(t))
	b, _ := e.hostTools(t, "executor@b", []tool.Tool{echoTool("burst_b")}, withLimits(t))
	everyoneKnows(t, []*Executor{e.exec, a, b}, "burst_a", "burst_b")
	x := invoke.NewClient(e.callerConn, events.Identity{ID: "agent:x", Agent: "x"}, "")
	t.Cleanup(func() { x.Close() })
	const limit, executors, calls = 5, 2, 30
	ran, refused := burst(t, x, []string{"burst_a", "burst_b"}, calls)
	t.Logf("%d of %d calls ran against a limit of %d on %d executors", ran, calls, limit, executors)
	if ran < limit || ran > limit*executors || ran+refused != calls {
		t.Errorf("%d calls ran and %d were refused, want from %d to %d run, the rest refused", ran, refused, limit, limit*executors)
	}
	heardAll(t, a, b)
	heardAll(t, b, a)
	for _, name := range []string{"burst_a", "burst_b"} {
		if res := callWith(t, x, name, `{}`); errType(res) != events.ErrRateLimited {
			t.Errorf("%s once both heard the other: %s %s, want RATE_LIMITED", name, errType(res), res.LLMContent)
		}
	}
}

// TestAnExactRateHoldsExactlyAcrossTheFleet: the same burst against a
// rate the policy asks to be exact: 5 calls run, not one more.
func TestAnExactRateHoldsExactlyAcrossTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	a, _ := e.hostTools(t, "executor@a", []tool.Tool{echoTool("exact_a")}, withLimits(t))
	b, _ := e.hostTools(t, "executor@b", []tool.Tool{echoTool("exact_b")}, withLimits(t))
	everyoneKnows(t, []*Executor{e.exec, a, b}, "exact_a", "exact_b")
	x := invoke.NewClient(e.callerConn, events.Identity{ID: "agent:x", Agent: "x"}, "")
	t.Cleanup(func() { x.Close() })
	if ran, refused := burst(t, x, []string{"exact_a", "exact_b"}, 30); ran != 5 || refused != 25 {
		t.Errorf("%d calls ran and %d were refused, want 5 and 25", ran, refused)
	}
}

// TestARefusedCallGivesBackItsCount: a call counted against a rate, then
// refused by a limit of calls at once, takes its count back: the rate
// of 2 lets two calls run after it, not one.
func TestARefusedCallGivesBackItsCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	g := newGated()
	e.hostTools(t, "executor@a", []tool.Tool{g.tool("both_a")}, withLimits(t))
	x := invoke.NewClient(e.callerConn, events.Identity{ID: "agent:x", Agent: "x"}, "")
	t.Cleanup(func() { x.Close() })
	first := invokeAsync(t, x, &events.Invocation{Tool: "both_a", Args: json.RawMessage(`{"n":1,"hold":true}`)}, nil)
	<-g.started
	if res := callWith(t, x, "both_a", `{"n":2}`); errType(res) != events.ErrConcurrencyLimited {
		t.Fatalf("a second call at once: %s %s, want CONCURRENCY_LIMITED", errType(res), res.LLMContent)
	}
	close(g.open)
	if res := await(t, "the first call", first); res.Error != nil {
		t.Fatalf("the first call: %s %s", errType(res), res.LLMContent)
	}
	if res := callWith(t, x, "both_a", `{"n":3}`); res.Error != nil {
		t.Fatalf("the second call to run, the third made: %s %s, want run: the refused one gave its count back", errType(res), res.LLMContent)
	}
	if res := callWith(t, x, "both_a", `{"n":4}`); errType(res) != events.ErrRateLimited {
		t.Errorf("a third call to run: %s %s, want RATE_LIMITED", errType(res), res.LLMContent)
	}
}

// TestACallOfExactlyTheLimitRuns: a limit of 16 bytes of arguments lets
// one call of 16 bytes run, and then none.
func TestACallOfExactlyTheLimitRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(t))
	e.hostTools(t, "executor@a", []tool.Tool{echoTool("pong")}, withLimits(t))
	const sixteen = `{"pad":"123456"}`
	if len(sixteen) != 16 {
		t.Fatalf("%s has %d bytes", sixteen, len(sixteen))
	}
	if res := e.call(t, "pong", sixteen); res.Error != nil {
		t.Fatalf("16 bytes under a limit of 16: %s %s", errType(res), res.LLMContent)
	}
	if res := e.call(t, "pong", `{}`); errType(res) != events.ErrRateLimited || res.Error.RetryAfterMillis <= 0 {
		t.Errorf("2 bytes more: %s %+v, want RATE_LIMITED with a retry-after", errType(res), res.Error)
	}
}
