package builtin

import (
	"context"
	"encoding/json"
	"github.com/toolbus/toolbus/internal/proctree"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/sandbox"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// A shell line a model wrote, approved or not, in the foreground or the
// background, cannot read the identity seeds, nor find toolbus's own
// secrets in its environment; it still reads the workspace.
func TestAConfinedShellCannotReadTheSeeds(t *testing.T) {
	t.Setenv("TOOLBUS_CONSOLE_TOKEN", "CONSOLETOKEN")
	t.Setenv("TOOLBUS_STORE_KEY", "STOREKEY")
	t.Setenv("NATS_CREDS", "NATSCREDS")
	seeds := t.TempDir()
	seed := filepath.Join(seeds, "developer.nk")
	if err := os.WriteFile(seed, []byte("SUADMINSEED\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws, _ := newWorkspace(t)
	sb, err := sandbox.New(sandbox.Policy{Writable: []string{ws.Root()}, Hidden: []string{seeds}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	starter := proctree.NewStarter(sb)
	defer starter.Close()
	shells := NewShells(ws, starter)
	defer shells.Close()
	tools := map[string]tool.Tool{}
	for _, tl := range Tools(ws, shells) {
		tools[tl.Spec().Name] = tl
	}

	out, err := shellCall(t, context.Background(), tools, "cat README.md; env")
	if err != nil || !strings.Contains(out.LLMContent, "# demo") {
		t.Fatalf("reading the workspace: %+v %v", out, err)
	}
	for _, secret := range []string{"CONSOLETOKEN", "STOREKEY", "NATSCREDS"} {
		if strings.Contains(out.LLMContent, secret) {
			t.Errorf("the shell's environment holds %s", secret)
		}
	}

	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlock(t)
		out, err := shellCall(t, context.Background(), tools, "cat "+seed)
		if err != nil || strings.Contains(out.LLMContent, "SUADMINSEED") || !strings.Contains(out.LLMContent, "Permission denied") {
			t.Errorf("foreground: %+v %v", out, err)
		}
		args, _ := json.Marshal(map[string]any{"command": "cat " + seed + " > bg.out 2>&1; touch bg.done", "run_in_background": true})
		run(t, tools["run_shell_command"], string(args))
		done := filepath.Join(ws.Root(), "bg.done")
		testkit.Eventually(t, "the background command ends", func() bool { _, err := os.Stat(done); return err == nil })
		b, _ := os.ReadFile(filepath.Join(ws.Root(), "bg.out"))
		if strings.Contains(string(b), "SUADMINSEED") || !strings.Contains(string(b), "Permission denied") {
			t.Errorf("background: %q", b)
		}
	})
}
