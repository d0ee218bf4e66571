package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// sessionless is a client of e's bus whose caller names no session.
func sessionless(t *testing.T, e *env) *invoke.Client {
	return clientAs(t, e, events.Identity{ID: "agent:test", Role: "agent"}, "")
}

// clientAs is a client of e's bus on a connection of its own, calling as
// who, sent under principal ("" for none).
func clientAs(t *testing.T, e *env, who events.Identity, principal string) *invoke.Client {
	t.Helper()
	c := invoke.NewClient(bustest.Connect(t, e.bus).Conn(), who, principal)
	t.Cleanup(func() { c.Close() })
	return c
}

func callWith(t *testing.T, c *invoke.Client, name, args string) *events.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Invoke(ctx, &events.Invocation{Tool: name, Args: json.RawMessage(args)}, nil)
	if err != nil {
		t.Fatalf("invoke %s: %v", name, err)
	}
	return res
}

func verdictOf(r *events.Result) events.Verdict {
	if r.Policy == nil {
		return ""
	}
	return r.Policy.Verdict
}

// unguardedPolicy is the default policy without its loop guards: it
// reads no input.session, so that its decisions are cached, as a policy
// that counts no calls has them.
func unguardedPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	files := defaultpolicy.Default()
	files["loops.rego"], files["loops_test.rego"] = "package toolbus.session\n", "package toolbus_loops_test\n"
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	if pol.ReadsSession() {
		t.Fatal("the policy without loops.rego reads input.session")
	}
	return pol
}

// budgetPolicy is the default policy with a session budget of n calls.
func budgetPolicy(t *testing.T, n string) *policy.Policy {
	t.Helper()
	files := defaultpolicy.Default()
	const budget = "call_budget := 2000"
	if !strings.Contains(files["loops.rego"], budget) {
		t.Fatalf("loops.rego does not set %q", budget)
	}
	files["loops.rego"] = strings.Replace(files["loops.rego"], budget, "call_budget := "+n, 1)
	files["loops_test.rego"] = "package toolbus_loops_test\n" // its tests assume the default budget
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestLoopGuardAsksAtTheFifthRepeat: a session writes the same file with
// the same content again and again. The first write asks (an edit), and
// the person's "always" remembers the path, so the next three run without
// asking; the fifth asks again, whatever the allowlist says, and offers
// no "always". A write with other content, and the same write from
// another caller, count apart: neither is the fifth.
func TestLoopGuardAsksAtTheFifthRepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := startApprover(t, e.bus, func(req *events.ConfirmRequest) *events.ConfirmAnswer {
		if strings.Contains(req.Reason, "same call") {
			return &events.ConfirmAnswer{Outcome: events.Cancel, Message: "stop looping"}
		}
		return &events.ConfirmAnswer{Outcome: events.ProceedAlways}
	})
	write := `{"file_path":"loop.txt","content":"again"}`
	// The caller can ask its own user: an edit may be confirmed there, a
	// loop of them only by the fleet's approvers.
	writeAsking := func() *events.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		inv := &events.Invocation{Tool: "write_file", Args: json.RawMessage(write), CallerConfirms: true}
		inv.Sender = events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}
		res, err := e.client.InvokeAs(ctx, inv, &invoke.Watch{Confirm: func(*events.ConfirmRequest) {}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := writeAsking(); res.Error != nil || verdictOf(res) != events.AskUser {
		t.Fatalf("first write: %s %s %q", verdictOf(res), errType(res), res.LLMContent)
	}
	if req := <-a.requests; strings.Contains(req.Reason, "same call") || !req.CallerMayAnswer {
		t.Fatalf("the first write was asked about as a repeat (%q), or not of the caller's user (%v)", req.Reason, req.CallerMayAnswer)
	}
	testkit.Eventually(t, "the path remembered", func() bool {
		return len(e.exec.allowlist.entriesFor("write_file", events.SourceBuiltin, "")) > 0
	})
	for i := 2; i <= 4; i++ {
		if res := e.call(t, "write_file", write); res.Error != nil || verdictOf(res) != events.Allow {
			t.Fatalf("write %d: %s %s %q, want allowed by the remembered path", i, verdictOf(res), errType(res), res.LLMContent)
		}
	}
	other := clientAs(t, e, events.Identity{ID: "agent:other", Role: "agent", Session: "s1"}, "")
	for _, c := range []struct {
		what   string
		client *invoke.Client
		args   string
	}{
		{"other content", e.client, `{"file_path":"loop.txt","content":"other"}`},
		{"another caller", other, write},
	} {
		if res := callWith(t, c.client, "write_file", c.args); res.Error != nil || verdictOf(res) != events.Allow {
			t.Errorf("%s: %s %s %q, want allowed: not a fifth repeat", c.what, verdictOf(res), errType(res), res.LLMContent)
		}
	}
	res := writeAsking()
	if verdictOf(res) != events.AskUser || !strings.Contains(res.Policy.Reason, "made this same call 5 times") {
		t.Fatalf("fifth write: %s %q, want ASK_USER: made this same call 5 times", verdictOf(res), res.Policy.Reason)
	}
	req := <-a.requests
	if len(req.Always) != 0 || req.CallerMayAnswer {
		t.Errorf("the fifth repeat offers the approver %+v, the caller's user may answer: %v; want no \"always\", the approvers alone", req.Always, req.CallerMayAnswer)
	}
	if errType(res) != events.ErrUserCancelled || !strings.Contains(res.LLMContent, "stop looping") {
		t.Errorf("the person's cancel: %s %q", errType(res), res.LLMContent)
	}
	// The trail records the counts with the decision: a replay asks
	// again, for the same reason.
	var d *events.Decision
	testkit.Eventually(t, "the fifth write's decision in the trail", func() bool {
		for _, rec := range audittest.Decisions(t, e.bus.JetStream()) {
			if rec.InvocationID == res.InvocationID {
				d = rec
			}
		}
		return d != nil
	})
	args, err := policy.DecodeArgs(json.RawMessage(write))
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := e.exec.Policy().Replay(context.Background(), policy.Recorded{Input: d.Input, Session: d.Session}, args)
	if err != nil || replayed.Verdict != events.AskUser || replayed.Reason != d.Reason {
		t.Errorf("the fifth write replayed: %+v %v, recorded %s %q (input %s)", replayed, err, d.Verdict, d.Reason, d.Input)
	}
	// Reads repeat freely.
	for range 6 {
		if res := e.call(t, "read_file", `{"file_path":"README.md"}`); res.Error != nil {
			t.Fatalf("read: %s %q", errType(res), res.LLMContent)
		}
	}
}

// TestLoopGuardAsksAtTheFifthRepeatedCommand: the same shell command,
// remembered, runs four times and is asked about the fifth time; and a
// command that differs only in its spacing is a different call.
func TestLoopGuardAsksAtTheFifthRepeatedCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := startApprover(t, e.bus, answer(events.ProceedAlways))
	cmd := shellArgs("echo looping")
	for i := 1; i <= 5; i++ {
		res := e.call(t, "run_shell_command", cmd)
		want := events.Allow
		if i == 1 || i == 5 {
			want = events.AskUser
		}
		if verdictOf(res) != want || res.Error != nil {
			t.Fatalf("run %d: %s %s %q, want %s", i, verdictOf(res), errType(res), res.LLMContent, want)
		}
		if i == 1 {
			<-a.requests
			testkit.Eventually(t, "the command remembered", func() bool {
				return len(e.exec.allowlist.entriesFor("run_shell_command", events.SourceBuiltin, "")) > 0
			})
		}
	}
	if req := <-a.requests; !strings.Contains(req.Reason, "same call 5 times") || len(req.Always) != 0 {
		t.Errorf("the fifth run asks %q, offering %+v", req.Reason, req.Always)
	}
}

// TestSessionPastItsBudgetIsDenied: a session's calls of any tool count
// toward its budget; past it, every call is denied, saying why, and
// nothing runs. Another session, and a caller naming none, go on.
func TestSessionPastItsBudgetIsDenied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Policy = budgetPolicy(t, "3") })
	os.WriteFile(filepath.Join(e.ws.Root(), "secret.txt"), []byte("SECRET\n"), 0o644)
	for _, call := range [][2]string{{"read_file", `{"file_path":"README.md"}`}, {"list_directory", `{"path":"."}`}, {"read_file", `{"file_path":"README.md"}`}} {
		if res := e.call(t, call[0], call[1]); res.Error != nil {
			t.Fatalf("%s within the budget: %s %q", call[0], errType(res), res.LLMContent)
		}
	}
	res := e.call(t, "read_file", `{"file_path":"secret.txt"}`)
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "this session made 4 calls, past its budget of 3") || strings.Contains(res.LLMContent, "SECRET") {
		t.Fatalf("the fourth call: %s %q, want %s: made 4 calls, past its budget of 3", errType(res), res.LLMContent, events.ErrPolicyDenied)
	}
	other := clientAs(t, e, events.Identity{ID: "agent:test", Role: "agent", Session: "s2"}, "")
	for _, c := range []*invoke.Client{other, sessionless(t, e)} {
		if res := callWith(t, c, "read_file", `{"file_path":"secret.txt"}`); res.Error != nil {
			t.Errorf("another session's call: %s %q", errType(res), res.LLMContent)
		}
	}
}

// heardAll waits until ex has taken in every count message other
// published so far (the two the only executors that count): the event
// after which ex's counts hold every call other counted.
func heardAll(t *testing.T, ex, other *Executor) {
	t.Helper()
	told := other.counts.Told()
	testkit.Eventually(t, fmt.Sprintf("%s heard the %d count messages of %s", ex.id.ID, told, other.id.ID), func() bool { return ex.counts.Heard() >= told })
}

// TestSessionCountsAreSharedByTheFleet: the session's calls alternate
// between two executors (each hosts a tool the other forwards to it);
// once each has heard the other's counts, the budget counts them all,
// wherever they ran.
func TestSessionCountsAreSharedByTheFleet(t *testing.T) {
	t.Parallel()
	pol := budgetPolicy(t, "3")
	e := newEnv(t, func(c *Config) { c.Policy = pol })
	noop := tool.Func(events.ToolSpec{Name: "noop_b", Kind: events.KindThink, Description: "does nothing, on executor b"},
		func(context.Context, *tool.Call) (*tool.Output, error) { return tool.Text("ok"), nil })
	b, _ := e.hostTools(t, "executor@b", []tool.Tool{noop}, func(c *Config) { c.Policy = pol })
	for i, step := range []struct {
		name      string
		on, other *Executor
	}{{"read_file", e.exec, b}, {"noop_b", b, e.exec}, {"read_file", e.exec, b}} {
		heardAll(t, step.on, step.other)
		args := `{}`
		if step.name == "read_file" {
			args = `{"file_path":"README.md"}`
		}
		if res := e.call(t, step.name, args); res.Error != nil {
			t.Fatalf("call %d (%s): %s %q", i+1, step.name, errType(res), res.LLMContent)
		}
	}
	heardAll(t, b, e.exec)
	res := e.call(t, "noop_b", `{}`)
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "made 4 calls") {
		t.Fatalf("the fourth call, on executor b: %s %q, want denied: made 4 calls", errType(res), res.LLMContent)
	}
}

// TestALoopAcrossTwoExecutorsIsCaught: a looping caller's same command
// runs in two workspaces by turns, so that each executor judges every
// other call. Each, once it has heard the other's counts, counts the
// calls the other judged: the fifth is asked about as the fifth repeat,
// though its executor judged only three of them.
func TestALoopAcrossTwoExecutorsIsCaught(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.WorkspaceName = "one" })
	two, _ := e.startWorkspace(t, "executor@two", "two")
	hostedFor(t, map[string]string{"executor@test": "one", "executor@two": "two"}, e.exec, two)
	a := startApprover(t, e.bus, func(req *events.ConfirmRequest) *events.ConfirmAnswer {
		if strings.Contains(req.Reason, "same call") {
			return &events.ConfirmAnswer{Outcome: events.Cancel, Message: "stop looping"}
		}
		return &events.ConfirmAnswer{Outcome: events.ProceedOnce}
	})
	cmd := shellArgs("echo looping")
	for i := 1; i <= 5; i++ {
		workspace, on, other := "one", e.exec, two
		if i%2 == 0 {
			workspace, on, other = "two", two, e.exec
		}
		heardAll(t, on, other)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		res, err := e.client.Invoke(ctx, &events.Invocation{Tool: "run_shell_command", Workspace: workspace, Args: json.RawMessage(cmd)}, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		req := <-a.requests
		if i < 5 {
			if res.Error != nil || strings.Contains(req.Reason, "same call") {
				t.Fatalf("run %d in workspace %s: %s %q, asked %q; want run once asked as any command", i, workspace, errType(res), res.LLMContent, req.Reason)
			}
			continue
		}
		if verdictOf(res) != events.AskUser || !strings.Contains(res.Policy.Reason, "made this same call 5 times") || errType(res) != events.ErrUserCancelled {
			t.Fatalf("the fifth run, in workspace %s: %s %s %q (%q), want asked as the fifth repeat and cancelled", workspace, verdictOf(res), errType(res), res.LLMContent, res.Policy.Reason)
		}
		if n := on.counts.Heard(); n < 2 {
			t.Errorf("executor %s heard %d count messages, want those of 2 calls at least", on.id.ID, n)
		}
	}
}

// TestAnotherPrincipalsSessionNameCountsApart: where the bus proves who
// calls, a caller naming another principal's session counts its own
// calls under its own principal: it neither raises that session's counts
// (pushing it past its budget) nor shares in them.
func TestAnotherPrincipalsSessionNameCountsApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true; c.Policy = budgetPolicy(t, "4") })
	x := clientAs(t, e, events.Identity{ID: "agent:x", Role: "agent", Session: "s1"}, "agent:x")
	y := clientAs(t, e, events.Identity{ID: "agent:y", Role: "agent", Session: "s1"}, "agent:y")
	read := `{"file_path":"README.md"}`
	for _, step := range []struct {
		who    *invoke.Client
		name   string
		denied bool
	}{
		{x, "x 1", false}, {x, "x 2", false},
		{y, "y 1", false}, {y, "y 2", false}, {y, "y 3", false},
		{x, "x 3", false}, {x, "x 4", false}, {x, "x 5", true},
		{y, "y 4", false}, {y, "y 5", true},
	} {
		res := callWith(t, step.who, "read_file", read)
		if denied := errType(res) == events.ErrPolicyDenied; denied != step.denied {
			t.Fatalf("%s: %s %q, want denied %v", step.name, errType(res), res.LLMContent, step.denied)
		}
	}
}

// TestSessionCountsFailClosed: when the counts cannot be had (the
// counters are closed), a call is not judged and does not run, and says
// why, whether its caller names a session or not.
func TestSessionCountsFailClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ws.Root(), "secret.txt"), []byte("SECRET\n"), 0o644)
	if res := e.call(t, "read_file", `{"file_path":"README.md"}`); res.Error != nil {
		t.Fatalf("read with the counters there: %s %q", errType(res), res.LLMContent)
	}
	e.exec.counts.Close()
	res := e.call(t, "read_file", `{"file_path":"secret.txt"}`)
	if errType(res) != events.ErrExecutionFailed || !strings.Contains(res.LLMContent, "could not count this session's calls") || strings.Contains(res.LLMContent, "SECRET") || res.Policy != nil {
		t.Fatalf("a session's read without counters: %s %q (policy %+v), want %s: could not count", errType(res), res.LLMContent, res.Policy, events.ErrExecutionFailed)
	}
	if res := callWith(t, sessionless(t, e), "read_file", `{"file_path":"secret.txt"}`); errType(res) != events.ErrExecutionFailed || strings.Contains(res.LLMContent, "SECRET") || res.Policy != nil {
		t.Errorf("a read without a session, without counters: %s %q (policy %+v), want %s", errType(res), res.LLMContent, res.Policy, events.ErrExecutionFailed)
	}
}

// TestNoCountsForAPolicyThatReadsNone: a policy that never reads
// input.session is not shown the counts, and a session's decisions are
// cached as any other's.
func TestNoCountsForAPolicyThatReadsNone(t *testing.T) {
	t.Parallel()
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": "package toolbus\n\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"ok\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Policy = pol })
	// With no counters to be had, a call that needed them would fail.
	e.exec.counts.Close()
	for i := range 2 {
		res := e.call(t, "read_file", `{"file_path":"README.md"}`)
		if res.Error != nil || res.Policy.Cached != (i == 1) {
			t.Fatalf("read %d: %s %q cached=%v", i+1, errType(res), res.LLMContent, res.Policy.Cached)
		}
	}
}

// sessionlessBudgetPolicy is the default policy with a budget of n calls
// without a session.
func sessionlessBudgetPolicy(t *testing.T, n string) *policy.Policy {
	t.Helper()
	files := defaultpolicy.Default()
	const budget = "sessionless_call_budget := 100000"
	if !strings.Contains(files["loops.rego"], budget) {
		t.Fatalf("loops.rego does not set %q", budget)
	}
	files["loops.rego"] = strings.Replace(files["loops.rego"], budget, "sessionless_call_budget := "+n, 1)
	files["loops_test.rego"] = "package toolbus_loops_test\n"
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestALoopThatRenamesOrDropsItsSessionIsCounted: where the bus proves
// who calls, an agent runs the same command again and again, naming a
// new session for each call, or none. Every call counts toward its
// repeats all the same: the fifth asks, as a repeat, and is not run on
// the "always" a person gave the first. Another principal's same command
// is no repeat of it.
func TestALoopThatRenamesOrDropsItsSessionIsCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	a := startApprover(t, e.bus, func(req *events.ConfirmRequest) *events.ConfirmAnswer {
		if strings.Contains(req.Reason, "same call") {
			return &events.ConfirmAnswer{Outcome: events.Cancel, Message: "stop looping"}
		}
		return &events.ConfirmAnswer{Outcome: events.ProceedAlways}
	})
	cmd := shellArgs("echo looping")
	ran := 0
	for i, session := range []string{"s1", "s2", "", "s3", "s4"} {
		c := clientAs(t, e, events.Identity{ID: "agent:x", Role: "agent", Session: session}, "agent:x")
		res := callWith(t, c, "run_shell_command", cmd)
		if strings.Contains(res.LLMContent, "Stdout: looping") {
			ran++
		}
		switch i {
		case 0:
			if verdictOf(res) != events.AskUser || res.Error != nil {
				t.Fatalf("the first run: %s %s %q", verdictOf(res), errType(res), res.LLMContent)
			}
			<-a.requests
			testkit.Eventually(t, "the command remembered", func() bool {
				return len(e.exec.allowlist.entriesFor("run_shell_command", events.SourceBuiltin, "")) > 0
			})
		case 4:
			if verdictOf(res) != events.AskUser || !strings.Contains(res.Policy.Reason, "made this same call 5 times") || errType(res) != events.ErrUserCancelled {
				t.Fatalf("the fifth run, in session %q: %s %s %q (%q), want asked as the fifth repeat and cancelled", session, verdictOf(res), errType(res), res.LLMContent, res.Policy.Reason)
			}
		default:
			if verdictOf(res) != events.Allow || res.Error != nil {
				t.Fatalf("run %d, in session %q: %s %s %q, want allowed by the remembered command", i+1, session, verdictOf(res), errType(res), res.LLMContent)
			}
		}
	}
	if ran != 4 {
		t.Errorf("the command ran %d times, want 4", ran)
	}
	y := clientAs(t, e, events.Identity{ID: "agent:y", Role: "agent", Session: "s1"}, "agent:y")
	if res := callWith(t, y, "run_shell_command", cmd); res.Policy == nil || strings.Contains(res.Policy.Reason, "same call") {
		t.Errorf("another principal's same command: %s %+v, want no repeat of agent:x's", verdictOf(res), res.Policy)
	}
}

// TestCallsWithoutASessionHaveABudget: where the bus proves who calls,
// an agent that names no session is counted under its principal: past
// the budget for such calls, its calls are denied, saying why, and
// nothing runs. Its calls in a session, and another principal's calls
// without one, go on.
func TestCallsWithoutASessionHaveABudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true; c.Policy = sessionlessBudgetPolicy(t, "3") })
	os.WriteFile(filepath.Join(e.ws.Root(), "secret.txt"), []byte("SECRET\n"), 0o644)
	x := clientAs(t, e, events.Identity{ID: "agent:x", Role: "agent"}, "agent:x")
	for i := range 3 {
		if res := callWith(t, x, "read_file", `{"file_path":"README.md"}`); res.Error != nil {
			t.Fatalf("call %d without a session, within the budget: %s %q", i+1, errType(res), res.LLMContent)
		}
	}
	res := callWith(t, x, "read_file", `{"file_path":"secret.txt"}`)
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "made 4 calls without naming a session, past the budget of 3") || strings.Contains(res.LLMContent, "SECRET") {
		t.Fatalf("the fourth call without a session: %s %q, want %s: past the budget", errType(res), res.LLMContent, events.ErrPolicyDenied)
	}
	inSession := clientAs(t, e, events.Identity{ID: "agent:x", Role: "agent", Session: "s1"}, "agent:x")
	y := clientAs(t, e, events.Identity{ID: "agent:y", Role: "agent"}, "agent:y")
	for who, c := range map[string]*invoke.Client{"agent:x in a session": inSession, "agent:y without one": y} {
		if res := callWith(t, c, "read_file", `{"file_path":"secret.txt"}`); res.Error != nil {
			t.Errorf("%s: %s %q", who, errType(res), res.LLMContent)
		}
	}
}

// TestRepeatsCountTheWindowBefore: a call reads the count of its own
// window, which the calls of the window before wrote to as their next:
// the repeats a call sees are those of one window at least. Each count
// is kept to the end of the window that reads it.
func TestRepeatsCountTheWindowBefore(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 0).Truncate(repeatWindow)
	for _, d := range []time.Duration{0, time.Second, repeatWindow - time.Nanosecond} {
		current, next := repeatCounts("k", at.Add(d))
		later, _ := repeatCounts("k", at.Add(d+repeatWindow))
		if later.Key != next.Key || current.Key == next.Key {
			t.Errorf("a call at +%s writes %s and %s; one a window later reads %s, want the first's next", d, current.Key, next.Key, later.Key)
		}
		if !current.Until.Equal(at.Add(repeatWindow)) || !next.Until.Equal(at.Add(2*repeatWindow)) {
			t.Errorf("a call at +%s keeps its counts until %s and %s, want the ends of their windows", d, current.Until, next.Until)
		}
		if other, _ := repeatCounts("other", at.Add(d)); other.Key == current.Key {
			t.Errorf("two calls share the count %s", current.Key)
		}
	}
}
