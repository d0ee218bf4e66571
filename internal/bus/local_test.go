package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestALocalConnectionLeavesTheServerToItsOwner: a part of the process
// that owns the embedded server connects to it without TCP, talks with a
// part connected over TCP, and closing it leaves the server running.
func TestALocalConnectionLeavesTheServerToItsOwner(t *testing.T) {
	owner := bustest.Start(t, "")
	if owner.Server() == nil {
		t.Fatal("the owner has no server")
	}
	ctx := context.Background()
	local, err := bus.Connect(ctx, bus.Config{URL: owner.URL(), Local: owner.Server(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if local.Server() != nil {
		t.Error("a local connection owns the server")
	}
	if addr := local.Conn().ConnectedAddr(); addr != "pipe" {
		t.Errorf("the local connection goes through %q, want the in-process pipe", addr)
	}
	remote := bustest.Connect(t, owner)
	sub, err := remote.Conn().Subscribe("local.echo", func(m *nats.Msg) { m.Respond(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	remote.Conn().Flush()
	if m, err := local.Conn().Request("local.echo", []byte("hi"), 10*time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("request over the local connection: %v %v", m, err)
	}
	if err := local.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := remote.Conn().Request("local.echo", []byte("still"), 10*time.Second); err != nil || string(m.Data) != "still" {
		t.Fatalf("the server after the local connection closed: %v %v", m, err)
	}
}
