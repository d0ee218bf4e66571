// Package approvetest starts approvers for tests: a seat on the bus that
// answers every confirmation request as the test says.
package approvetest

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// Seat starts an approver as id, on a connection of its own, that answers
// each pending request with what answer returns for it. It stops when the
// test ends.
func Seat(tb testing.TB, b *bus.Bus, id string, answer func(approve.Request) events.Outcome) *approve.Approver {
	tb.Helper()
	conn := bustest.Connect(tb, b)
	a, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{
		Identity: events.Identity{ID: id, Role: "approver"}, Logger: bustest.Quiet()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(a.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tb.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			s, changed := a.Snapshot()
			for _, r := range s.Pending {
				a.Answer(ctx, r.AnswerTo, approve.Answer{Outcome: answer(r)})
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return a
}
