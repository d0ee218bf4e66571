// Package executortest starts a whole single-machine fleet for tests: an
// in-process bus with JetStream, the registry, and one executor hosting
// the built-in tools over a fresh workspace under the default policy.
package executortest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	defaultpolicy "github.com/toolbus/toolbus/policy"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
)

// Fleet is what Start started; everything stops when the test ends.
type Fleet struct {
	Bus       *bus.Bus
	Workspace *builtin.Workspace
	Executor  *executor.Executor
	// Client calls tools as Caller, on a connection of its own.
	Client *invoke.Client
	Caller events.Identity
}

// Start starts a fleet; configure adjusts the executor's Config (the
// confirmation deadline, another policy) before it starts.
func Start(tb testing.TB, configure ...func(*executor.Config)) *Fleet {
	tb.Helper()
	b := bustest.Start(tb, "")
	registrytest.Start(tb, b)
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# hello\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	ws, err := builtin.NewWorkspace(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ws.Close() })
	pol, err := policy.Compile(context.Background(), policy.Files(defaultpolicy.Default()))
	if err != nil {
		tb.Fatal(err)
	}
	shells := builtin.NewShells(ws)
	cfg := executor.Config{Identity: events.Identity{ID: "executor@test", Role: "executor"}, Tools: builtin.Tools(ws, shells),
		Policy: pol, Workspace: ws.Root(), Logger: bustest.Quiet()}
	for _, c := range configure {
		c(&cfg)
	}
	ex, err := executor.Start(context.Background(), b.Conn(), b.JetStream(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ex.Stop(ctx)
		shells.Close()
	})
	f := &Fleet{Bus: b, Workspace: ws, Executor: ex, Caller: events.Identity{ID: "agent:test", Role: "agent", Session: "s1", User: "ada"}}
	f.Client = invoke.NewClient(bustest.Connect(tb, b).Conn(), f.Caller, "")
	tb.Cleanup(func() { f.Client.Close() })
	return f
}
