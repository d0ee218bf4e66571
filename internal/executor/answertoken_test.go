package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestOneAnswerRunsOneCall: two principals make the same call, with the
// same invocation id, and both wait for a person. Each confirmation has
// an answer subject of its own, a capability; the approver's proceed for
// the first runs the first alone, and the same answer sent again to its
// subject, once that call ended, runs nothing: the second call waits on
// until its own subject is answered, and the command ran once.
func TestOneAnswerRunsOneCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	approver := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	line := shellArgs("echo ran >> runs.txt")
	start := func(principal string) <-chan *events.Result {
		c := clientAs(t, e, events.Identity{ID: principal, Role: "agent"}, principal)
		done := make(chan *events.Result, 1)
		go func() {
			inv := &events.Invocation{Header: events.Header{ID: "same-id"}, Tool: "run_shell_command", Args: json.RawMessage(line)}
			inv.Sender = events.Identity{ID: principal, Role: "agent"}
			res, err := c.InvokeAs(context.Background(), inv, &invoke.Watch{})
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		return done
	}
	next := func() *events.ConfirmRequest {
		t.Helper()
		select {
		case req := <-approver.requests:
			return req
		case <-time.After(30 * time.Second):
			t.Fatal("no confirmation request")
		}
		return nil
	}
	doneA := start("agent:a")
	reqA := next()
	doneB := start("agent:b")
	reqB := next()
	for _, req := range []*events.ConfirmRequest{reqA, reqB} {
		token, ok := strings.CutPrefix(req.AnswerTo, events.AnswerSubjectPrefix)
		if !ok || !events.IsCapability(token) {
			t.Fatalf("the answer subject %q is not %s and a capability", req.AnswerTo, events.AnswerSubjectPrefix)
		}
	}
	if reqA.AnswerTo == reqB.AnswerTo {
		t.Fatalf("two confirmations share the answer subject %s", reqA.AnswerTo)
	}
	nc := bustest.Connect(t, e.bus).Conn()
	person := events.Identity{ID: "approver:ada", Role: "approver"}
	if ack := answerWith(t, nc, reqA, events.AnswerAsApprover, "", person, events.ProceedOnce); !ack.Accepted {
		t.Fatalf("the approver's answer to the first call: %q", ack.Reason)
	}
	if res := <-doneA; res.Error != nil {
		t.Fatalf("the first call: %s %q", errType(res), res.LLMContent)
	}
	// The same answer again: nobody takes it, or it is refused.
	data, _ := events.Encode(&events.ConfirmAnswer{Header: events.Header{Sender: person}, InvocationID: reqA.InvocationID, Outcome: events.ProceedOnce})
	if msg, err := nc.Request(events.AnswerSubject(reqA.AnswerTo, events.AnswerAsApprover, ""), data, 2*time.Second); err == nil {
		if ack, _ := events.Decode[events.ConfirmAck](msg.Data); ack == nil || ack.Accepted {
			t.Fatalf("the first call's answer, sent again, was taken: %+v", ack)
		}
	}
	select {
	case res := <-doneB:
		t.Fatalf("the second call ended on the first call's answer: %s %q", errType(res), res.LLMContent)
	default:
	}
	if ack := answerWith(t, nc, reqB, events.AnswerAsApprover, "", person, events.Cancel); !ack.Accepted {
		t.Fatalf("the approver's cancel of the second call: %q", ack.Reason)
	}
	if res := <-doneB; errType(res) != events.ErrUserCancelled {
		t.Fatalf("the second call: %s %q, want %s: it waited for its own answer", errType(res), res.LLMContent, events.ErrUserCancelled)
	}
	if data, err := os.ReadFile(filepath.Join(e.ws.Root(), "runs.txt")); err != nil || string(data) != "ran\n" {
		t.Fatalf("the command ran %q (%v), want once", data, err)
	}
}

// TestEachRoundHasItsOwnAnswerSubject: an approver edits a shell line,
// and the edited call is asked about again, on an answer subject of its
// own. A proceed sent to the first round's subject runs nothing: the
// edited line waits for its own answer, and a cancel there ends it
// without running it.
func TestEachRoundHasItsOwnAnswerSubject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	approver := startApprover(t, e.bus, func(r *events.ConfirmRequest) *events.ConfirmAnswer {
		if r.Command == "echo original" {
			return &events.ConfirmAnswer{Outcome: events.ModifyWithEditor, Args: json.RawMessage(`{"command":"echo edited > edited.txt"}`)}
		}
		return nil
	})
	done := make(chan *events.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.client.Invoke(ctx, &events.Invocation{Tool: "run_shell_command", Args: json.RawMessage(shellArgs("echo original"))}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var rounds []*events.ConfirmRequest
	for len(rounds) < 2 {
		select {
		case r := <-approver.requests:
			rounds = append(rounds, r)
		case res := <-done:
			t.Fatalf("the call ended after %d rounds: %s %q", len(rounds), errType(res), res.LLMContent)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d rounds asked, want 2", len(rounds))
		}
	}
	if rounds[1].Command != "echo edited > edited.txt" || rounds[0].AnswerTo == rounds[1].AnswerTo {
		t.Fatalf("the second round asks about %q on %s, the first was on %s: want the edited line, on a subject of its own", rounds[1].Command, rounds[1].AnswerTo, rounds[0].AnswerTo)
	}
	nc := bustest.Connect(t, e.bus).Conn()
	person := events.Identity{ID: "approver:ada", Role: "approver"}
	data, _ := events.Encode(&events.ConfirmAnswer{Header: events.Header{Sender: person}, InvocationID: rounds[0].InvocationID, Outcome: events.ProceedOnce})
	if msg, err := nc.Request(events.AnswerSubject(rounds[0].AnswerTo, events.AnswerAsApprover, ""), data, 2*time.Second); err == nil {
		if ack, _ := events.Decode[events.ConfirmAck](msg.Data); ack == nil || ack.Accepted {
			t.Fatalf("a proceed on the first round's subject was taken: %+v", ack)
		}
	}
	if ack := answerWith(t, nc, rounds[1], events.AnswerAsApprover, "", person, events.Cancel); !ack.Accepted {
		t.Fatalf("the cancel of the second round: %q", ack.Reason)
	}
	if res := <-done; errType(res) != events.ErrUserCancelled {
		t.Fatalf("the call: %s %q, want %s: the first round's subject decided nothing", errType(res), res.LLMContent, events.ErrUserCancelled)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "edited.txt")); err == nil {
		t.Fatal("the edited line ran")
	}
}
