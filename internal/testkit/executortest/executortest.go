// Package executortest starts a whole single-machine fleet for tests: an
// in-process bus with JetStream, the registry, and one executor hosting
// the built-in tools over a fresh workspace under the default policy.
package executortest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
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
// confirmation deadline, another policy) before it starts. The executor
// node is assembled as cmd/executor and toolbus up assemble theirs.
func Start(tb testing.TB, configure ...func(*executor.Config)) *Fleet {
	tb.Helper()
	b := bustest.Start(tb, "")
	registrytest.Start(tb, b)
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# hello\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	node, err := executornode.Start(context.Background(), executornode.Config{Bus: b, Workspace: dir,
		Executor: executor.Config{Identity: events.Identity{ID: "executor@test", Role: "executor"}, Policy: policytest.Default(tb), Logger: bustest.Quiet()},
		Configure: func(c *executor.Config) {
			for _, f := range configure {
				f(c)
			}
		}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { node.Close(context.Background()) })
	f := &Fleet{Bus: b, Workspace: node.Workspace, Executor: node.Executor, Caller: events.Identity{ID: "agent:test", Role: "agent", Session: "s1", User: "ada"}}
	f.Client = invoke.NewClient(bustest.Connect(tb, b).Conn(), f.Caller, "")
	tb.Cleanup(func() { f.Client.Close() })
	return f
}
