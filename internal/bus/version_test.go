package bus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	ctx := context.Background()
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MANY", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 2100 // past a page of Read (2000), and past multi_last's 1024
	for i := range keys {
		if _, err := kv.PutString(ctx, fmt.Sprintf("k%d", i), "first"); err != nil {
			t.Fatal(err)
		}
	}
	middle := time.Now()
	for i := range 10 {
		if _, err := kv.PutString(ctx, fmt.Sprintf("k%d", i), "second"); err != nil {
			t.Fatal(err)
		}
	}
	msgs, upTo, err := bus.LastOfEach(ctx, b.JetStream(), "KV_MANY", "$KV.MANY.>")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != keys || upTo != keys+10 {
		t.Fatalf("read %d keys up to %d, want %d up to %d", len(msgs), upTo, keys, keys+10)
	}
	for i, m := range msgs {
		if i > 0 && m.Sequence <= msgs[i-1].Sequence {
			t.Fatalf("out of stream order at %d", i)
		}
		if want := "first"; m.Sequence > keys {
			want = "second"
			if string(m.Data) != want {
				t.Fatalf("%s holds %q, want %q", m.Subject, m.Data, want)
			}
		} else if string(m.Data) != want {
			t.Fatalf("%s holds %q, want %q", m.Subject, m.Data, want)
		}
	}
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
