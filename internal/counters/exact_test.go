package counters

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/natsserver"
)

// TestExactCountsNeedCounters: the bus's counters add up an exact rate's
// calls on nats-server 2.12 and later; on 2.10, which has none, every
// count fails, saying which server it needs, rather than being stored as
// a message that counts nothing.
func TestExactCountsNeedCounters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := bustest.Start(t, "")
	x, err := OpenExact(ctx, b.Conn(), b.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 3; want++ {
		if n, err := x.Add(ctx, "k.1", 1); err != nil || n != want {
			t.Fatalf("count %d: %d %v", want, n, err)
		}
	}

	srv := natsserver.Start(t, natsserver.V210)
	old, err := bus.Connect(ctx, bus.Config{URL: srv.URL, Name: t.Name(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer bustest.Stop(t, old)
	x, err = OpenExact(ctx, old.Conn(), old.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := x.Add(ctx, "k.1", 1); err == nil || !strings.Contains(err.Error(), "nats-server 2.12") || !strings.Contains(err.Error(), srv.Version) {
		t.Fatalf("a count on nats-server %s: %d %v; want a refusal naming 2.12", srv.Version, n, err)
	}
}
