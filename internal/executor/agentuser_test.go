package executor

import (
	"context"
	"encoding/json"
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
