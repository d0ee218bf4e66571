package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// answerWith sends an answer to req on the subject of principal, as the
// bus lets that principal alone send on it, and returns the executor's
// acknowledgement.
func answerWith(t *testing.T, nc *nats.Conn, req *events.ConfirmRequest, as, principal string, who events.Identity, outcome events.Outcome) *events.ConfirmAck {
	t.Helper()
	return requestAck(t, nc, events.AnswerSubject(req.AnswerTo, as, principal),
		&events.ConfirmAnswer{Header: events.Header{Sender: who}, InvocationID: req.InvocationID, Outcome: outcome})
}

// requestAck sends answer on subject as a request, and returns the
// executor's acknowledgement.
func requestAck(t *testing.T, nc *nats.Conn, subject string, answer events.Envelope) *events.ConfirmAck {
	t.Helper()
	data, err := events.Encode(answer)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := events.Decode[events.ConfirmAck](msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// TestAProvenAgentCannotApproveItsOwnCall: where the bus proves who sends
// (identities enforced), an agent answers its own confirmation request
// on the subjects it may send on. Naming itself as the bus knows it
// passes the executor's own checks, and the policy's refusal must still
// hold; naming anyone else (a person, its user with the approver role),
// or answering for another caller's user, the executor refuses. Only a
// person's answer runs the call.
func TestAProvenAgentCannotApproveItsOwnCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	const principal = "agent:x"
	caller := events.Identity{ID: principal, Role: "agent", Session: "s1"}
	agentConn := bustest.Connect(t, e.bus).Conn()
	client := invoke.NewClient(agentConn, caller, principal)
	t.Cleanup(func() { client.Close() })

	req, done := askCaller(t, client, caller, "self.txt")

	for _, a := range []struct {
		as      string
		who     events.Identity
		outcome events.Outcome
		refusal string
	}{
		// itself, as an approver, on the approvers' subject
		{events.AnswerAsApprover, events.Identity{ID: principal, Role: "approver", Session: "s1"}, events.ProceedOnce, "nobody may approve a call they made"},
		{events.AnswerAsApprover, events.Identity{ID: principal, Role: "approver"}, events.ProceedAlways, "nobody may approve a call they made"},
		// its own user, widening what it may answer
		{events.AnswerAsCaller, events.AgentUser(caller), events.ProceedAlways, "not proceed_always"},
		{events.AnswerAsCaller, events.AgentUser(caller), events.ProceedAlwaysTool, "not proceed_always_tool"},
	} {
		ack := answerWith(t, agentConn, req, a.as, principal, a.who, a.outcome)
		if ack.Accepted || !strings.Contains(ack.Reason, a.refusal) {
			t.Errorf("%s answering %s on the %s subject: accepted %v, %q; want refused: %q", a.who.ID, a.outcome, a.as, ack.Accepted, ack.Reason, a.refusal)
		}
	}
	// Answers that name someone the subject does not prove: the
	// executor's own checks refuse them before the policy is asked.
	otherConn := bustest.Connect(t, e.bus).Conn()
	for _, a := range []struct {
		as, principal string
		who           events.Identity
		refusal       string
	}{
		{events.AnswerAsApprover, principal, events.Identity{ID: "approver:ada", Role: "approver"}, `sent with the identity "agent:x"`},
		{events.AnswerAsApprover, principal, events.AgentUser(caller), "answers on the caller's subject"},
		{events.AnswerAsCaller, principal, events.Identity{ID: events.AgentUser(caller).ID, Role: "approver", Session: "s1"}, "must come from"},
		{events.AnswerAsCaller, principal, events.Identity{ID: "approver:ada", Role: events.RoleAgentUser, Session: "s1"}, "must come from"},
		{events.AnswerAsCaller, "agent:y", events.AgentUser(caller), `sent with the identity "agent:y"`},
		// a subject that names no way of answering proves nothing
		{"boss", principal, events.Identity{ID: "approver:ada", Role: "approver"}, "want"},
	} {
		nc := agentConn
		if a.principal != principal {
			nc = otherConn
		}
		ack := answerWith(t, nc, req, a.as, a.principal, a.who, events.ProceedAlways)
		if a.who.Role == events.RoleAgentUser && a.who.ID == events.AgentUser(caller).ID {
			ack = answerWith(t, nc, req, a.as, a.principal, a.who, events.ProceedOnce)
		}
		if ack.Accepted || !strings.Contains(ack.Reason, a.refusal) {
			t.Errorf("%s (%s) on the %s subject of %s: accepted %v, %q; want refused: %q", a.who.ID, a.who.Role, a.as, a.principal, ack.Accepted, ack.Reason, a.refusal)
		}
	}

	select {
	case res := <-done:
		t.Fatalf("the call ended on its own caller's answers: %s %q", errType(res), res.LLMContent)
	default:
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "self.txt")); err == nil {
		t.Fatal("the write ran on a self-approval")
	}
	if got := e.exec.allowlist.entriesFor("write_file", events.SourceBuiltin, ""); len(got) != 0 {
		t.Errorf("a self-approval widened the allowlist: %+v", got)
	}

	// A person, proven as themselves, still may.
	personConn := bustest.Connect(t, e.bus).Conn()
	if ack := answerWith(t, personConn, req, events.AnswerAsApprover, "approver:ada", events.Identity{ID: "approver:ada", Role: "approver"}, events.ProceedOnce); !ack.Accepted {
		t.Fatalf("a person's answer was refused: %s", ack.Reason)
	}
	if res := <-done; res.Error != nil {
		t.Fatalf("the approved call failed: %s %q", errType(res), res.LLMContent)
	}
}

// askCaller sends, as caller through client, a write of file that the
// caller confirms through its user, and returns the confirmation request
// the caller is asked, and where the call's result comes once answered.
func askCaller(t *testing.T, client *invoke.Client, caller events.Identity, file string) (*events.ConfirmRequest, <-chan *events.Result) {
	t.Helper()
	asked := make(chan *events.ConfirmRequest, 1)
	done := make(chan *events.Result, 1)
	go func() {
		args, _ := json.Marshal(map[string]string{"file_path": file, "content": "x"})
		inv := &events.Invocation{Header: events.Header{Sender: caller}, Tool: "write_file", Args: args, CallerConfirms: true}
		res, err := client.InvokeAs(context.Background(), inv, &invoke.Watch{Confirm: func(req *events.ConfirmRequest) { asked <- req }})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case req := <-asked:
		return req, done
	case res := <-done:
		t.Fatalf("the call ended before its caller was asked to confirm: %s %s", errType(res), res.LLMContent)
	case <-time.After(30 * time.Second):
		t.Fatal("the caller was not asked to confirm")
	}
	return nil, nil
}
