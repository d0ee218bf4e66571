package executornode_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/settings"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
)

func TestMain(m *testing.M) {
	if os.Getenv(probeServerEnv) != "" {
		serveProbe()
	}
	goleak.VerifyTestMain(m, testkit.NATSLeaks()...)
}

func workspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func config(t *testing.T) executornode.Config {
	t.Helper()
	b := bustest.Start(t, "")
	registrytest.Start(t, b)
	return executornode.Config{Bus: b, Workspace: workspace(t),
		Executor: executor.Config{Identity: events.Identity{ID: "executor@test"}, Logger: bustest.Quiet()}}
}

// A node hosts the built-in tools over its workspace under the built-in
// policy, and Close stops all of it, twice without harm.
func TestANodeRunsTheBuiltinsAndStops(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	n, err := executornode.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := invoke.NewClient(bustest.Connect(t, cfg.Bus).Conn(), events.Identity{ID: "agent:test", Role: "agent"}, "")
	defer c.Close()
	res, err := c.Invoke(context.Background(), &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
	if err != nil || res.Error != nil || !strings.Contains(res.LLMContent, "# hello") {
		t.Fatalf("read_file: %+v %v", res, err)
	}
	if n.Executor.Policy() == nil || n.Workspace.Root() == "" {
		t.Errorf("the node has no policy or workspace")
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Errorf("closed again: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	good := config(t)
	for _, tt := range []struct {
		name   string
		break_ func(*executornode.Config)
		says   string
	}{
		{"no bus", func(c *executornode.Config) { c.Bus = nil }, "no bus"},
		{"no workspace", func(c *executornode.Config) { c.Workspace = "" }, "no workspace"},
		{"no identity", func(c *executornode.Config) { c.Executor.Identity.ID = "" }, "no identity"},
		{"a workspace that is not there", func(c *executornode.Config) { c.Workspace = filepath.Join(t.TempDir(), "gone") }, "gone"},
		{"a policy that does not compile", func(c *executornode.Config) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "broken.rego"), []byte("package toolbus\nallow if {"), 0o644)
			c.PolicyDir = dir
		}, "broken.rego"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.break_(&cfg)
			n, err := executornode.Start(context.Background(), cfg)
			if err == nil {
				n.Close(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %q does not say %q", err, tt.says)
			}
		})
	}
}

// A Start that fails after the executor started (here: a discovery
// command that does not parse) stops the executor and its workspace
// again: nothing of the node is left running or listed.
func TestAFailedStartStopsWhatItStarted(t *testing.T) {
	cfg := config(t)
	gemini, err := settings.Parse([]byte(`{"tools": {"discoveryCommand": "sh 'unterminated"}}`), "settings.json", settings.GeminiSettings)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Settings = &settings.Files{Gemini: gemini, Claude: &settings.File{}, MCPConfig: &settings.File{}}
	start := func() {
		t.Helper()
		if n, err := executornode.Start(context.Background(), cfg); err == nil {
			n.Close(context.Background())
			t.Fatal("started with a discovery command that does not parse")
		}
	}
	// The first start makes the fleet's stores, whose goroutines are the
	// server's; the second must leave nothing of its own behind.
	start()
	before := goleak.IgnoreCurrent()
	start()
	goleak.VerifyNone(t, append(testkit.NATSLeaks(), before)...)
	c := invoke.NewClient(bustest.Connect(t, cfg.Bus).Conn(), events.Identity{ID: "agent:test", Role: "agent"}, "")
	defer c.Close()
	if err := c.Ping(context.Background()); err == nil {
		t.Error("an executor of the failed node still answers")
	}
}
