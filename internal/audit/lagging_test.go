package audit

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// A read answered by a copy of the stream that lags (direct get is
// answered by any copy, and a copy still catching up after a node's loss
// holds the stream up to some sequence) goes on from where it stopped,
// and reads every invocation the stream's leader holds; a read whose
// every try lags says so instead of returning part of the trail.
func TestAReadOnACopyThatLagsIsNotCutShort(t *testing.T) {
	b := bustest.Start(t, "")
	ctx := context.Background()
	const n = 50
	for i := range n {
		data, err := events.Encode(&events.Invocation{Header: events.Header{ID: fmt.Sprintf("inv-%02d", i), Sender: events.Identity{ID: "agent"}}, Tool: "read_file"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.JetStream().Publish(ctx, events.SubjectInvoke+".agent", data); err != nil {
			t.Fatal(err)
		}
	}
	made := 0
	lagUntil := 1 // how many reads lag
	readRange = func(ctx context.Context, js jetstream.JetStream, stream string, r bus.Range, fn func(*bus.StoredMsg) error) (uint64, error) {
		if made++; made <= lagUntil {
			r.To = min(r.To, n/2) // what the lagging copy holds
		}
		return bus.Read(ctx, js, stream, r, fn)
	}
	t.Cleanup(func() { readRange = bus.Read })
	recs, _, err := Read(ctx, b.JetStream(), Query{})
	if err != nil || len(recs) != n {
		t.Fatalf("a read whose first try lags: %d of %d invocations, %v", len(recs), n, err)
	}
	if made != 2 {
		t.Errorf("%d tries, want the lagging one and one more", made)
	}

	made, lagUntil = 0, 1000
	if recs, _, err := Read(ctx, b.JetStream(), Query{}); err == nil {
		t.Errorf("a read whose every try lags returned %d of %d invocations and no error", len(recs), n)
	}
}
