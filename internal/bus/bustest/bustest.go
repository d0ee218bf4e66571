// Package bustest starts a real embedded bus for tests: a nats-server with
// JetStream on a free loopback port and a temporary store.
package bustest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
)

// Start runs an embedded bus for the length of the test, on a free port,
// with its store in dir (a fresh temporary directory when dir is empty).
func Start(tb testing.TB, dir string) *bus.Bus {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	b, err := bus.Open(context.Background(), bus.Config{
		Listen:  "127.0.0.1:0",
		DataDir: dir,
		Name:    tb.Name(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatalf("start bus: %v", err)
	}
	tb.Cleanup(func() { Stop(tb, b) })
	return b
}

// Stop closes b, failing the test if that does not finish in ten seconds.
func Stop(tb testing.TB, b *bus.Bus) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		tb.Errorf("close bus: %v", err)
	}
}

// Connect opens another connection to b over TCP, as a separate process
// would, closed when the test ends.
func Connect(tb testing.TB, b *bus.Bus) *bus.Bus {
	tb.Helper()
	c, err := bus.Open(context.Background(), bus.Config{URL: b.URL(), Name: tb.Name() + "-client",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatalf("connect to bus: %v", err)
	}
	tb.Cleanup(func() { Stop(tb, c) })
	return c
}

// Quiet is a logger that drops everything, for parts under test.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
