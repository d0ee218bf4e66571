package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/natsserver"
)

// connectTo connects to an existing server, as a part of a fleet does.
func connectTo(t *testing.T, url string) (*bus.Bus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, bus.Config{URL: url, Name: t.Name(), Logger: bustest.Quiet()})
	if err == nil {
		t.Cleanup(func() { bustest.Stop(t, b) })
	}
	return b, err
}

// TestTheOldestServerReadsAsTheNewest: on nats-server 2.10, which has no
// direct gets in batches, a bucket of more keys than one batch holds is
// read whole, the last value of each key once and in stream order, and a
// stretch of a stream from a time is read from there.
func TestTheOldestServerReadsAsTheNewest(t *testing.T) {
	t.Parallel()
	srv := natsserver.Start(t, natsserver.V210)
	b, err := connectTo(t, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if bus.ServerAtLeast(b.Conn(), 2, 11) {
		t.Fatalf("the server says %s: not the one without batches", b.Conn().ConnectedServerVersion())
	}
	const keys = 2100 // past a page of Read (2000), and past multi_last's 1024
	middle := fillMany(t, b.JetStream(), keys)
	checkLastOfEach(t, b.JetStream(), keys)
	ctx := context.Background()
	var since []string
	if _, err := bus.Read(ctx, b.JetStream(), "KV_MANY", bus.Range{Since: middle}, func(m *bus.StoredMsg) error {
		since = append(since, strings.TrimPrefix(m.Subject, "$KV.MANY.")+"="+string(m.Data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(since) != 10 || since[0] != "k0=second" || since[9] != "k9=second" {
		t.Errorf("read from the middle: %v, want the ten second values", since)
	}
}

// TestAServerOlderThanTheOldestIsRefused: Debian's nats-server 2.9 is
// refused at connect, with both versions named, before anything is made
// on it.
func TestAServerOlderThanTheOldestIsRefused(t *testing.T) {
	t.Parallel()
	srv := natsserver.Start(t, natsserver.Debian)
	_, err := connectTo(t, srv.URL)
	if err == nil || !strings.Contains(err.Error(), "runs nats-server "+srv.Version) || !strings.Contains(err.Error(), "needs nats-server "+bus.MinServerVersion+" or later") {
		t.Fatalf("connect to nats-server %s: %v; want a refusal naming both versions", srv.Version, err)
	}
}
