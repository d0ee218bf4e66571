package approve_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

// longConfirm is a confirmation deadline no test waits for: a call that
// ends was denied at once, not timed out.
const longConfirm = time.Hour

// heldSeat starts an approver as id that is present only while held.
func heldSeat(t *testing.T, f *executortest.Fleet, id string, linger time.Duration) *approve.Approver {
	t.Helper()
	conn := bustest.Connect(t, f.Bus)
	a, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: id, Role: "approver"},
		PresentWhileHeld: true, Linger: linger, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// deniedForNobody fails unless res is the denial of a call nobody was
// there to approve, saying where to approve the next one.
func deniedForNobody(t *testing.T, res *events.Result) {
	t.Helper()
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "no approver is connected") || !strings.Contains(res.LLMContent, "toolbus confirm") {
		t.Errorf("got %s %q, want POLICY_DENIED: no approver is connected, and how to approve next time", errType(res), res.LLMContent)
	}
}

// TestPresentOnlyWhileHeld: an approver started PresentWhileHeld follows
// the requests but is not there for executors until held; while held, a
// call waits for it and its answer runs the call; released, a call is
// denied at once again, long before the confirmation deadline.
func TestPresentOnlyWhileHeld(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.ConfirmTimeout = longConfirm })
	a := heldSeat(t, f, "approver:ada", 0)
	if a.Present() {
		t.Fatal("an approver nobody holds is present")
	}
	deniedForNobody(t, result(t, call(f, "inv-nobody", "write_file", `{"file_path":"a.txt","content":"x"}`)))

	release, err := a.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A second hold, released first, ends nothing.
	second, err := a.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	second()
	second()
	if !a.Present() {
		t.Fatal("a held approver is not present")
	}
	done := call(f, "inv-held", "write_file", `{"file_path":"a.txt","content":"x"}`)
	waitFor(t, a, "the request while held", pending("inv-held"))
	if ack, err := answer(a, "inv-held", approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted {
		t.Fatalf("answer: %+v %v", ack, err)
	}
	if res := result(t, done); res.Error != nil {
		t.Fatalf("the approved call: %+v", res.Error)
	}

	release()
	release() // again: nothing more
	if a.Present() {
		t.Fatal("the approver is present after its last hold was released")
	}
	deniedForNobody(t, result(t, call(f, "inv-released", "write_file", `{"file_path":"b.txt","content":"x"}`)))

	a.Stop()
	if _, err := a.Hold(context.Background()); !errors.Is(err, approve.ErrStopped) {
		t.Errorf("Hold after Stop: %v, want ErrStopped", err)
	}
}

// TestPresenceLingers: released, an approver with a Linger stays present
// a while (a page reloading), and a hold within it keeps it present; then
// it goes.
func TestPresenceLingers(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	a := heldSeat(t, f, "approver:ada", time.Hour)
	release, err := a.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	release()
	if !a.Present() {
		t.Fatal("the approver left at once, with an hour to linger")
	}
	again, err := a.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !a.Present() {
		t.Fatal("held again, the approver is not present")
	}
	again()

	b := heldSeat(t, f, "approver:bob", 50*time.Millisecond)
	release, err = b.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	release()
	if !testkit.Poll(20*time.Second, func() bool { return !b.Present() }) {
		t.Fatal("the approver never left after its linger")
	}
	// Stopped while lingering, it leaves at once.
	a.Stop()
	if a.Present() {
		t.Error("a stopped approver is present")
	}
}

// TestAlwaysPresentByDefault: without PresentWhileHeld an approver is
// present from Start to Stop, and a hold changes nothing.
func TestAlwaysPresentByDefault(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	a := seat(t, f, "approver:ada")
	if !a.Present() {
		t.Fatal("a started approver is not present")
	}
	release, err := a.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	release()
	if !a.Present() {
		t.Fatal("a release ended the presence of an approver present from Start")
	}
	a.Stop()
	if a.Present() {
		t.Error("a stopped approver is present")
	}
}
