package console

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestPresentWhileAPageWatches: a console whose approver is present only
// while held (as toolbus up and toolbus console start it) is no approver
// while no page watches: a call the policy asks about is denied at once.
// With a page's stream open the call waits and the page's answer runs
// it; with one of two pages gone it still does; with the last gone, a
// call is denied at once again.
func TestPresentWhileAPageWatches(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, approve.Config{Identity: events.Identity{ID: "approver:ada"}, PresentWhileHeld: true})
	denied := func(when, id string) {
		t.Helper()
		res := e.callAsync(t, id, "write_file", `{"file_path":"a.txt","content":"x\n"}`).wait(t)
		if res.Error == nil || res.Error.Type != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "no approver is connected") {
			t.Errorf("%s: got %+v, want the call denied at once for want of an approver", when, res.Error)
		}
	}
	approved := func(when, id string) {
		t.Helper()
		c := e.callAsync(t, id, "write_file", `{"file_path":"a.txt","content":"x\n"}`)
		r := e.waitPending(t, id)
		if ack, err := e.approver.Answer(context.Background(), r.AnswerTo, approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted {
			t.Fatalf("%s: the answer: %+v %v", when, ack, err)
		}
		if res := c.wait(t); res.Error != nil {
			t.Errorf("%s: the approved call: %+v", when, res.Error)
		}
	}

	denied("no page", "inv-no-page")
	first := e.stream(t)
	if name, _ := first.next(t); name != "snapshot" {
		t.Fatalf("the first event is %s", name)
	}
	if !e.approver.Present() {
		t.Fatal("a page watches, and the console is not present")
	}
	approved("a page", "inv-page")
	second := e.stream(t)
	second.next(t)
	first.close()
	approved("one of two pages gone", "inv-one-left")
	second.close()
	if !testkit.Poll(wait, func() bool { return !e.approver.Present() }) {
		t.Fatal("the console is still present with no page")
	}
	denied("the last page gone", "inv-gone")
}
