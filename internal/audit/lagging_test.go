package audit

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// lagging is a consumer on a copy of the stream that has messages only
// up to upTo: it delivers those, and then nothing, as a copy still
// recovering after a node's loss does.
type lagging struct {
	jetstream.Consumer
	upTo uint64
}

func (l *lagging) Fetch(n int, _ ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	// What the stream has now, at once (a fetch waits for n messages or
	// its time), less what this copy does not have yet.
	b, err := l.Consumer.FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	out := make(chan jetstream.Msg, n)
	for m := range b.Messages() {
		if meta, err := m.Metadata(); err == nil && meta.Sequence.Stream <= l.upTo {
			out <- m
		}
	}
	close(out)
	return fixedBatch{out, b.Error()}, nil
}

type fixedBatch struct {
	msgs chan jetstream.Msg
	err  error
}

func (b fixedBatch) Messages() <-chan jetstream.Msg { return b.msgs }
func (b fixedBatch) Error() error                   { return b.err }

// A read whose consumer lands on a copy that lags goes on with a new one
// from where it stopped, and reads every invocation the stream's leader
// holds; a read whose every consumer lags says so instead of returning
// part of the trail.
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
	lagUntil := 1 // how many consumers lag
	orderedConsumer = func(ctx context.Context, s jetstream.Stream, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
		c, err := s.OrderedConsumer(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if made++; made <= lagUntil {
			return &lagging{Consumer: c, upTo: n / 2}, nil
		}
		return c, nil
	}
	t.Cleanup(func() {
		orderedConsumer = func(ctx context.Context, s jetstream.Stream, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
			return s.OrderedConsumer(ctx, cfg)
		}
	})
	recs, _, err := Read(ctx, b.JetStream(), Query{})
	if err != nil || len(recs) != n {
		t.Fatalf("a read whose first consumer lags: %d of %d invocations, %v", len(recs), n, err)
	}
	if made != 2 {
		t.Errorf("%d consumers made, want the lagging one and one more", made)
	}

	made, lagUntil = 0, 1000
	if recs, _, err := Read(ctx, b.JetStream(), Query{}); err == nil {
		t.Errorf("a read whose every consumer lags returned %d of %d invocations and no error", len(recs), n)
	}
}
