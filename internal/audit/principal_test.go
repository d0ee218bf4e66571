package audit

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// A caller's cancel and its own record of a result count only for its own
// calls: the subject names who sent them, and in a fleet the bus vouches
// for that name. Another principal's are left out of the call's story.
func TestOnlyTheCallersOwnCancelsAndResultsCount(t *testing.T) {
	t.Parallel()
	j := newJoiner(Query{}, true)
	at := time.Now()
	add := func(subject string, ev events.Envelope) {
		t.Helper()
		data, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !j.add(subject, data, 1, at) {
			t.Fatalf("%s did not decode", subject)
		}
	}
	alice := events.Identity{ID: "alice"}
	add(events.SubjectInvoke+".alice", &events.Invocation{Header: events.Header{ID: "c1", Sender: alice}, Tool: "read_file"})
	mallory := events.Identity{ID: "mallory"}
	add(events.SubjectCancel+".mallory", &events.CancelRequest{Header: events.Header{Sender: mallory}, InvocationID: "c1"})
	add(events.CallerResultSubject("mallory"), &events.Result{Header: events.Header{Sender: mallory}, InvocationID: "c1", Tool: "read_file",
		Error: &events.ToolError{Type: events.ErrExecutorLost, Message: "forged"}})
	r := j.records()[0]
	if r.Outcome != OutcomePending || len(r.Events) != 1 {
		t.Fatalf("another principal's cancel or result counted: outcome %s, %d events", r.Outcome, len(r.Events))
	}
	add(events.SubjectCancel+".alice", &events.CancelRequest{Header: events.Header{Sender: alice}, InvocationID: "c1"})
	add(events.CallerResultSubject("alice"), &events.Result{Header: events.Header{Sender: alice}, InvocationID: "c1", Tool: "read_file",
		Error: &events.ToolError{Type: events.ErrExecutorLost, Message: "lost"}})
	if r = j.records()[0]; r.Outcome != string(events.ErrExecutorLost) || len(r.Events) != 3 {
		t.Fatalf("the caller's own cancel and result: outcome %s, %d events", r.Outcome, len(r.Events))
	}
}
