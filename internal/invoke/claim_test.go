package invoke

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestClaimHearsEachAnswer: a claim of a call on an executor that is gone
// is settled by the server's "no responders" at once, not taken for an
// executor that is silent, which a caller would wait on for
// UnansweredFor before it reports the call lost.
func TestClaimHearsEachAnswer(t *testing.T) {
	b := bustest.Start(t, "")
	nc := bustest.Connect(t, b).Conn()
	c := NewClient(nc, events.Identity{ID: "caller"}, "")
	answering := func(executor, answer string) {
		sub, err := bustest.Connect(t, b).Conn().Subscribe(events.ClaimSubject(executor), func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			r.Header.Set(events.ExecutorHeader, executor)
			r.Data = []byte(answer)
			_ = m.RespondMsg(r)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	answering("executor@running", events.ClaimRunning)
	answering("executor@behind", events.ClaimBehind)
	answering("executor@other", events.ClaimUnknown)
	silent, err := bustest.Connect(t, b).Conn().SubscribeSync(events.ClaimSubject("executor@frozen"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	for executor, want := range map[string]claimAnswer{
		"executor@gone":    notRunning,
		"executor@running": claimed,
		"executor@behind":  unanswered,
		"executor@other":   notRunning,
		"executor@frozen":  unanswered,
	} {
		named := executor
		if got := c.claim(context.Background(), "call-1", &named); got != want {
			t.Errorf("a claim on %s gave %d, want %d", executor, got, want)
		}
	}
}
