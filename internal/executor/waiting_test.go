package executor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestACallerHearsWhereToApprove: a call nobody is there to approve is
// denied with where to approve the next one (Config.ApproveHint); one an
// approver sees tells its caller, once, that it waits, until when and
// where to approve it; one nobody answers in time says where, too.
func TestACallerHearsWhereToApprove(t *testing.T) {
	t.Parallel()
	const hint = "open the console at http://console.test:7878/ or run `toolbus confirm`"
	e := newEnv(t, func(c *Config) { c.ConfirmTimeout, c.ApproveHint = time.Hour, hint })
	write := `{"file_path":"notes.md","content":"v1"}`
	if res := e.call(t, "write_file", write); errType(res) != events.ErrPolicyDenied ||
		!strings.Contains(res.LLMContent, "no approver is connected") || !strings.Contains(res.LLMContent, hint) {
		t.Errorf("no approver: %s %q, want POLICY_DENIED saying where to approve", errType(res), res.LLMContent)
	}

	silent := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	notices := make(chan *invoke.Waiting, 4)
	results := make(chan *events.Result, 1)
	asked := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.client.InvokeWatch(ctx, &events.Invocation{Tool: "write_file", Args: json.RawMessage(write)},
			&invoke.Watch{Waiting: func(w *invoke.Waiting) { notices <- w }})
		if err != nil {
			res = &events.Result{Error: &events.ToolError{Type: "CLIENT", Message: err.Error()}}
		}
		results <- res
	}()
	var w *invoke.Waiting
	select {
	case w = <-notices:
	case res := <-results:
		t.Fatalf("the call ended before its caller heard it waits: %s %q", errType(res), res.LLMContent)
	}
	if w.Tool != "write_file" || w.Hint != hint || !strings.Contains(w.Reason, "edit tools ask") {
		t.Errorf("the notice: %+v", w.ConfirmWaiting)
	}
	if w.Deadline.Before(asked.Add(59*time.Minute)) || w.Deadline.After(time.Now().Add(time.Hour)) {
		t.Errorf("the notice's deadline is %s, want an hour from when it was sent", w.Deadline)
	}
	if msg := w.Message(w.Deadline.Add(-4*time.Minute - 59*time.Second)); !strings.HasPrefix(msg, "waiting for approval of write_file (") ||
		!strings.Contains(msg, " — 4m59s left; to approve it, "+hint) {
		t.Errorf("the notice says %q", msg)
	}
	req := <-silent.requests
	person := bustest.Connect(t, e.bus).Conn()
	if ack := answerAs(t, person, req, events.Identity{ID: "approver:ada", Role: "approver"}, events.ProceedOnce); !ack.Accepted {
		t.Fatalf("the answer was refused: %s", ack.Reason)
	}
	if res := <-results; res.Error != nil {
		t.Fatalf("the approved call: %s %q", errType(res), res.LLMContent)
	}
	select {
	case w := <-notices:
		t.Errorf("a second notice for one question: %+v", w.ConfirmWaiting)
	default:
	}
	silent.stop()
}

// TestATimedOutConfirmationSaysWhereToApprove: nobody answered in time,
// and the caller is told where a person would have.
func TestATimedOutConfirmationSaysWhereToApprove(t *testing.T) {
	t.Parallel()
	const hint = "run `toolbus confirm` on the build host"
	e := newEnv(t, func(c *Config) { c.ConfirmTimeout, c.ApproveHint = 300*time.Millisecond, hint })
	startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	if res := e.call(t, "write_file", `{"file_path":"notes.md","content":"v1"}`); errType(res) != events.ErrConfirmationTimeout || !strings.Contains(res.LLMContent, hint) {
		t.Errorf("silence: %s %q, want CONFIRMATION_TIMEOUT saying where to approve", errType(res), res.LLMContent)
	}
}

// TestACallDeniedWhenTheApproversLeave: a call waits while an approver is
// there; once the last leaves (the console's last page closed), it is
// denied after two checks, saying where to approve, not held until the
// confirmation timeout.
func TestACallDeniedWhenTheApproversLeave(t *testing.T) {
	t.Parallel()
	const hint = "open the console at http://console.test:7878/"
	e := newEnv(t, func(c *Config) {
		c.ConfirmTimeout, c.ApproveHint, c.PresenceCheck = time.Hour, hint, 50*time.Millisecond
	})
	silent := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	results := make(chan *events.Result, 1)
	go func() { results <- e.call(t, "write_file", `{"file_path":"notes.md","content":"v1"}`) }()
	<-silent.requests
	// Many checks pass while the approver stays: the call waits on.
	select {
	case res := <-results:
		t.Fatalf("the call ended while its approver was there: %s %q", errType(res), res.LLMContent)
	case <-time.After(time.Second):
	}
	silent.stop()
	select {
	case res := <-results:
		if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "No approver is connected any more") || !strings.Contains(res.LLMContent, hint) {
			t.Errorf("the approver left: %s %q, want POLICY_DENIED saying where to approve", errType(res), res.LLMContent)
		}
	case <-time.After(time.Minute):
		t.Fatal("the call still waits a minute after its last approver left")
	}
}
