package discovery_test

import (
	"github.com/toolbus/toolbus/internal/proctree"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/discovery"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/sandbox"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

// A discovered tool is the project's code run with a model's arguments:
// under a Sandbox, an approved call of it cannot read the identity seeds,
// while the discovery and the calls still work in the workspace.
func TestADiscoveredToolCannotReadTheSeeds(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	seeds := t.TempDir()
	seed := filepath.Join(seeds, "developer.nk")
	if err := os.WriteFile(seed, []byte("SUADMINSEED\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Policy{Writable: []string{f.Workspace.Root()}, Hidden: []string{seeds}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	starter := proctree.NewStarter(sb)
	defer starter.Close()
	p := newProject(t, f.Workspace.Root(), `[{"name": "echo", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}, {"name": "steal"}]`)
	start(t, f.Bus, f.Executor, "executor@test", f.Workspace.Root(), p.settings(t), func(o *discovery.Options) { o.Starter = starter })
	if p.runs() != 1 {
		t.Fatalf("the confined discovery command ran %d times, want 1 (it writes to the workspace)", p.runs())
	}
	allow(t, f.Bus, "echo", f.Workspace.Root())
	allow(t, f.Bus, "steal", f.Workspace.Root())
	if res := callAllowed(t, f.Client, "echo", `{"text":"hi"}`); res.Error != nil || res.LLMContent != `{"text":"hi"}` {
		t.Errorf("echo: %+v %q", res.Error, res.LLMContent)
	}
	if err := os.WriteFile(filepath.Join(f.Workspace.Root(), "target"), []byte(seed), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlock(t)
		res := callAllowed(t, f.Client, "steal", `{}`)
		if res.Error == nil || res.Error.Type != events.ErrDiscoveredToolExecution || strings.Contains(res.LLMContent, "SUADMINSEED") ||
			!strings.Contains(res.LLMContent, "Permission denied") {
			t.Errorf("steal: %+v %q", res.Error, res.LLMContent)
		}
	})
}
