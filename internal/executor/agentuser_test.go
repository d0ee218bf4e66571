package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// answerAs sends an answer to a confirmation request as approver and
// returns the executor's acknowledgement.
func answerAs(t *testing.T, nc *nats.Conn, req *events.ConfirmRequest, approver events.Identity, outcome events.Outcome) *events.ConfirmAck {
	t.Helper()
	data, err := events.Encode(&events.ConfirmAnswer{Header: events.Header{Sender: approver}, InvocationID: req.InvocationID, Outcome: outcome})
	if err != nil {
		t.Fatal(err)
	}
	as := events.AnswerAsApprover
	if approver.Role == events.RoleAgentUser {
		as = events.AnswerAsCaller
	}
	msg, err := nc.Request(events.AnswerSubject(req.AnswerTo, as, ""), data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := events.Decode[events.ConfirmAck](msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// The agent's user, asked through the caller (Invocation.CallerConfirms),
// from the attacker's side: answers that would widen what they may
// decide are refused, recorded, and decide nothing, and only an answer
// the policy allows (once, as the user of this caller and session) runs
// the call. Nothing is remembered.
func TestAgentUserAnswersAreJudgedByThePolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := bustest.Connect(t, e.bus).Conn()
	var rejected []string
	var mu sync.Mutex
	sub, err := nc.Subscribe(events.SubjectConfirmRejected, func(m *nats.Msg) {
		if r, err := events.Decode[events.ConfirmRejected](m.Data); err == nil {
			mu.Lock()
			rejected = append(rejected, r.Answer.Sender.ID+": "+r.Reason)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()

	caller := events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}
	other := events.Identity{ID: "agent:other", Role: "agent", Session: "s9"}
	sameAgentOtherSession := caller
	sameAgentOtherSession.Session = "s2"
	type attempt struct {
		who     events.Identity
		outcome events.Outcome
		refusal string
	}
	attempts := []attempt{
		{events.AgentUser(other), events.ProceedOnce, "answers only for the calls of the agent it is in front of"},
		{events.AgentUser(sameAgentOtherSession), events.ProceedOnce, "answers only for the calls of its own session"},
		{events.AgentUser(caller), events.ProceedAlways, "may allow a call once or cancel it, not proceed_always"},
		{events.AgentUser(caller), events.ProceedAlwaysTool, "not proceed_always_tool"},
		{caller, events.ProceedOnce, "only the approver role may answer"},
		{events.Identity{ID: caller.ID, Role: events.RoleAgentUser, Session: "s1"}, events.ProceedOnce, "nobody may approve a call they made"},
	}
	asked := make(chan *events.ConfirmRequest, 4)
	w := &invoke.Watch{Confirm: func(req *events.ConfirmRequest) { asked <- req }}
	done := make(chan *events.Result, 1)
	go func() {
		inv := &events.Invocation{Header: events.Header{Sender: caller}, Tool: "write_file", Args: json.RawMessage(`{"file_path":"notes.md","content":"x"}`), CallerConfirms: true}
		res, err := e.client.InvokeAs(context.Background(), inv, w)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var req *events.ConfirmRequest
	select {
	case req = <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the caller was not asked to confirm")
	}
	if !req.CallerMayAnswer || !strings.Contains(req.Diff, "+x") {
		t.Errorf("the request to the caller: callerMayAnswer %v, diff %q", req.CallerMayAnswer, req.Diff)
	}
	for _, a := range attempts {
		ack := answerAs(t, nc, req, a.who, a.outcome)
		if ack.Accepted || !strings.Contains(ack.Reason, a.refusal) {
			t.Errorf("%s answering %s: accepted %v, %q; want refused: %q", a.who.ID, a.outcome, ack.Accepted, ack.Reason, a.refusal)
		}
	}
	select {
	case res := <-done:
		t.Fatalf("the call ended on refused answers: %s", res.LLMContent)
	default:
	}
	if ack := answerAs(t, nc, req, events.AgentUser(caller), events.ProceedOnce); !ack.Accepted {
		t.Fatalf("the caller's user allowing once was refused: %s", ack.Reason)
	}
	if res := <-done; res.Error != nil {
		t.Fatalf("the allowed call failed: %s", res.LLMContent)
	}
	// Each refusal was recorded before the next answer was read.
	testkit.Eventually(t, "every refused answer is recorded", func() bool { mu.Lock(); defer mu.Unlock(); return len(rejected) >= len(attempts) })
	mu.Lock()
	if len(rejected) != len(attempts) {
		t.Errorf("%d refused answers recorded, want %d: %q", len(rejected), len(attempts), rejected)
	}
	mu.Unlock()
	if got := e.exec.allowlist.entriesFor("write_file", events.SourceBuiltin, ""); len(got) != 0 {
		t.Errorf("the agent's user widened the allowlist: %+v", got)
	}
}

// A caller that says it confirms through its user gets nothing for a
// kind the policy keeps from that user: no request comes to it, and with
// no approver connected the call is denied.
func TestCallerConfirmsWidensNothingForAShellLine(t *testing.T) {
	t.Parallel()
	// Denied at once; a caller wrongly asked waits this long, not the
	// default five minutes.
	e := newEnv(t, func(c *Config) { c.ConfirmTimeout = 20 * time.Second })
	asked := make(chan *events.ConfirmRequest, 1)
	inv := &events.Invocation{Header: events.Header{Sender: events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}}, Tool: "run_shell_command",
		Args: json.RawMessage(`{"command":"touch x"}`), CallerConfirms: true}
	res, err := e.client.InvokeAs(context.Background(), inv, &invoke.Watch{Confirm: func(req *events.ConfirmRequest) { asked <- req }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Type != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "no approver is connected") {
		t.Errorf("got %+v %q", res.Error, res.LLMContent)
	}
	select {
	case <-asked:
		t.Error("the caller was asked to confirm a shell line")
	default:
	}
}

// dismissWith sends a dismissal of req, as who on the subject of as and
// principal, for invocation id, and returns the executor's
// acknowledgement.
func dismissWith(t *testing.T, nc *nats.Conn, req *events.ConfirmRequest, as, principal string, who events.Identity, id string) *events.ConfirmAck {
	t.Helper()
	data, err := events.Encode(&events.ConfirmDismissed{Header: events.Header{Sender: who}, InvocationID: id, Why: "dismissed the question"})
	if err != nil {
		t.Fatal(err)
	}
	return sendAnswerBytes(t, nc, req, as, principal, data)
}

// sendAnswerBytes sends data to req's answer subject of as and
// principal, and returns the executor's acknowledgement.
func sendAnswerBytes(t *testing.T, nc *nats.Conn, req *events.ConfirmRequest, as, principal string, data []byte) *events.ConfirmAck {
	t.Helper()
	msg, err := nc.Request(events.AnswerSubject(req.AnswerTo, as, principal), data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := events.Decode[events.ConfirmAck](msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// A dismissal (the caller's user made no decision: MCP's cancel) from
// the attacker's side, where the bus proves who sends: one that does not
// come from this caller's user, on the caller's subject, for this call,
// is refused; the genuine one decides nothing, not even with an outcome
// slipped into it, and leaves the call to the approvers, who alone may
// answer it from then on. With no approver present, a dismissal ends the
// call at once as a denial that names where to approve, never as the
// user's refusal.
func TestADismissalDecidesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true; c.ConfirmTimeout = time.Hour })
	const principal = "agent:x"
	caller := events.Identity{ID: principal, Role: "agent", Session: "s1"}
	agentConn := bustest.Connect(t, e.bus).Conn()
	client := invoke.NewClient(agentConn, caller, principal)
	t.Cleanup(func() { client.Close() })
	var mu sync.Mutex
	var steps []string
	sub, err := agentConn.Subscribe(events.SubjectStep, func(m *nats.Msg) {
		if s, err := events.Decode[events.Step](m.Data); err == nil {
			mu.Lock()
			steps = append(steps, s.Step+": "+s.Detail)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	stepped := func(prefix string) bool {
		return testkit.Poll(30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range steps {
				if strings.HasPrefix(s, prefix) {
					return true
				}
			}
			return false
		})
	}
	present := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	req, done := askCaller(t, client, caller, "kept.txt")
	user := events.AgentUser(caller)
	otherConn := bustest.Connect(t, e.bus).Conn()
	for _, a := range []struct {
		name          string
		nc            *nats.Conn
		as, principal string
		who           events.Identity
		id            string
		refusal       string
	}{
		{"an approver dismissing", otherConn, events.AnswerAsApprover, "approver:ada", events.Identity{ID: "approver:ada", Role: "approver"}, req.InvocationID, "only the caller's user dismisses"},
		{"the user on the approvers' subject", agentConn, events.AnswerAsApprover, principal, user, req.InvocationID, "only the caller's user dismisses"},
		{"another caller's user", agentConn, events.AnswerAsCaller, principal, events.AgentUser(events.Identity{ID: "agent:y", Role: "agent", Session: "s1"}), req.InvocationID, "a dismissal must come from"},
		{"the caller itself", agentConn, events.AnswerAsCaller, principal, caller, req.InvocationID, "a dismissal must come from"},
		{"sent with another identity", otherConn, events.AnswerAsCaller, "agent:y", user, req.InvocationID, `sent with the identity "agent:y"`},
		{"for another call", agentConn, events.AnswerAsCaller, principal, user, "another-call", "is for invocation"},
	} {
		ack := dismissWith(t, a.nc, req, a.as, a.principal, a.who, a.id)
		if ack.Accepted || !strings.Contains(ack.Reason, a.refusal) {
			t.Errorf("%s: accepted %v, %q; want refused: %q", a.name, ack.Accepted, ack.Reason, a.refusal)
		}
	}
	// The genuine dismissal, with an outcome slipped in: a dismissal has
	// no outcome to read.
	raw, err := events.Encode(&events.ConfirmDismissed{Header: events.Header{Sender: user}, InvocationID: req.InvocationID, Why: "dismissed the question"})
	if err != nil {
		t.Fatal(err)
	}
	raw = append(raw[:len(raw)-1], []byte(`,"outcome":"proceed_always"}`)...)
	if ack := sendAnswerBytes(t, agentConn, req, events.AnswerAsCaller, principal, raw); ack.Accepted || !strings.Contains(ack.Reason, "decides nothing") {
		t.Fatalf("the user's dismissal: accepted %v, %q; want taken as deciding nothing", ack.Accepted, ack.Reason)
	}
	if !stepped("dismissed: user-of:agent:x made no decision (dismissed the question)") {
		t.Errorf("no dismissed step recorded: %q", steps)
	}
	for _, a := range []struct {
		name    string
		send    func() *events.ConfirmAck
		refusal string
	}{
		{"a second dismissal", func() *events.ConfirmAck {
			return dismissWith(t, agentConn, req, events.AnswerAsCaller, principal, user, req.InvocationID)
		}, "made no decision on this question already"},
		{"the user's accept after it", func() *events.ConfirmAck {
			return answerWith(t, agentConn, req, events.AnswerAsCaller, principal, user, events.ProceedOnce)
		}, "the approvers answer it now"},
		{"the user's decline after it", func() *events.ConfirmAck {
			return answerWith(t, agentConn, req, events.AnswerAsCaller, principal, user, events.Cancel)
		}, "the approvers answer it now"},
	} {
		if ack := a.send(); ack.Accepted || !strings.Contains(ack.Reason, a.refusal) {
			t.Errorf("%s: accepted %v, %q; want refused: %q", a.name, ack.Accepted, ack.Reason, a.refusal)
		}
	}
	select {
	case res := <-done:
		t.Fatalf("the call ended before an approver answered: %s %q", errType(res), res.LLMContent)
	default:
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "kept.txt")); err == nil {
		t.Fatal("the write ran on a dismissal")
	}
	personConn := bustest.Connect(t, e.bus).Conn()
	if ack := answerWith(t, personConn, req, events.AnswerAsApprover, "approver:ada", events.Identity{ID: "approver:ada", Role: "approver"}, events.ProceedOnce); !ack.Accepted {
		t.Fatalf("the approver's answer after the dismissal was refused: %s", ack.Reason)
	}
	if res := <-done; res.Error != nil {
		t.Fatalf("the approved call failed: %s %q", errType(res), res.LLMContent)
	}
	if got := e.exec.allowlist.entriesFor("write_file", events.SourceBuiltin, ""); len(got) != 0 {
		t.Errorf("a dismissal widened the allowlist: %+v", got)
	}

	// Nobody else to ask: denied at once, naming where to approve.
	present.stop()
	req, done = askCaller(t, client, caller, "alone.txt")
	if ack := dismissWith(t, agentConn, req, events.AnswerAsCaller, principal, user, req.InvocationID); ack.Accepted {
		t.Fatalf("a dismissal was accepted as an answer: %+v", ack)
	}
	res := <-done
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "no approver is connected to give it") || !strings.Contains(res.LLMContent, "To approve calls like this one, "+DefaultApproveHint) {
		t.Errorf("dismissed with no approver: %s %q; want %s naming where to approve", errType(res), res.LLMContent, events.ErrPolicyDenied)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "alone.txt")); err == nil {
		t.Fatal("the write ran on a dismissal")
	}
}
