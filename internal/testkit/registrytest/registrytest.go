// Package registrytest starts a real registry service on a test's bus.
package registrytest

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// Start runs a registry on b, as "registry@test", until the test ends.
func Start(tb testing.TB, b *bus.Bus) *registry.Service {
	tb.Helper()
	reg, err := registry.Start(context.Background(), b.Conn(), b.JetStream(), registry.Config{
		Identity: events.Identity{ID: "registry@test"}, Logger: bustest.Quiet()})
	if err != nil {
		tb.Fatalf("start registry: %v", err)
	}
	tb.Cleanup(func() { reg.Stop() })
	return reg
}
