package busnode_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.NATSLeaks()...) }

func TestEmbeddedBusKeepsEventsAndAnswersRequests(t *testing.T) {
	b := bustest.Start(t, "")
	if !b.Embedded() || !strings.HasPrefix(b.URL(), "nats://127.0.0.1:") {
		t.Fatalf("embedded=%v url=%s", b.Embedded(), b.URL())
	}
	client := bustest.Connect(t, b)
	if client.Embedded() {
		t.Error("a client connection claims to embed a server")
	}

	// A request on a captured subject is answered by the stream: that is
	// why requests go on events.Request, outside it.
	reply, err := client.Conn().Request("tool.echo", []byte("hi"), 5*time.Second)
	if err != nil || !strings.Contains(string(reply.Data), `"stream":"`+events.AuditStream+`"`) {
		t.Fatalf("request on a captured subject: %v, %v", reply, err)
	}

	// Everything under tool.> is kept.
	stream, err := client.JetStream().Stream(context.Background(), events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	// The stream stores without acknowledging, so poll for the message.
	var msg *jetstream.RawStreamMsg
	if !testkit.Poll(10*time.Second, func() bool {
		msg, err = stream.GetLastMsgForSubject(context.Background(), "tool.echo")
		return err == nil && string(msg.Data) == "hi"
	}) {
		t.Fatalf("audit stream: %v, %v", msg, err)
	}
	if cfg := stream.CachedInfo().Config; cfg.NoAck || cfg.Subjects[0] != events.SubjectAll {
		t.Errorf("audit stream config: no_ack=%v subjects=%v", cfg.NoAck, cfg.Subjects)
	}
}

func TestOpenErrors(t *testing.T) {
	b := bustest.Start(t, "")
	taken := strings.TrimPrefix(b.URL(), "nats://")
	ctx := context.Background()
	open := func(cfg busnode.Config) func() (interface{ Close(context.Context) error }, error) {
		return func() (interface{ Close(context.Context) error }, error) { return busnode.Start(ctx, cfg) }
	}
	tests := []struct {
		name string
		open func() (interface{ Close(context.Context) error }, error)
		says string
	}{
		{"no data dir", open(busnode.Config{Listen: "127.0.0.1:0"}), "no data directory"},
		{"bad listen address", open(busnode.Config{Listen: "localhost", DataDir: t.TempDir()}), `listen address "localhost"`},
		{"bad port", open(busnode.Config{Listen: "127.0.0.1:99999", DataDir: t.TempDir()}), "bad port"},
		{"port taken", open(busnode.Config{Listen: taken, DataDir: t.TempDir(), Logger: bustest.Quiet()}), "address already in use"},
		{"nothing at URL", func() (interface{ Close(context.Context) error }, error) {
			return bus.Connect(ctx, bus.Config{URL: "nats://127.0.0.1:1", Logger: bustest.Quiet()})
		}, "connect to bus nats://127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.open()
			if err == nil {
				got.Close(ctx)
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %q does not say %q", err, tt.says)
			}
		})
	}
}

func TestCloseTwice(t *testing.T) {
	b := bustest.Start(t, "")
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !b.Conn().IsClosed() {
		t.Error("connection still open")
	}
	_, err := bus.Connect(context.Background(), bus.Config{URL: b.URL(), Logger: bustest.Quiet()})
	if err == nil || !errors.Is(err, nats.ErrNoServers) {
		t.Errorf("server still answers after Close: %v", err)
	}
}

// TestAClientKeepsTheOwnersRetention: the bus's owner sets the audit
// stream's retention; a part that only connects, with its own defaults,
// leaves it as it is.
func TestAClientKeepsTheOwnersRetention(t *testing.T) {
	ctx := context.Background()
	owner, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Name: "owner", Logger: bustest.Quiet(),
		AuditMaxAge: time.Hour, AuditMaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	client, err := bus.Connect(ctx, bus.Config{URL: owner.URL(), Name: "client", Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	s, err := client.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxAge != time.Hour || cfg.MaxBytes != 1<<20 || !cfg.DenyDelete {
		t.Errorf("after a client connected: max age %s, max bytes %d, deny delete %v", cfg.MaxAge, cfg.MaxBytes, cfg.DenyDelete)
	}
}
