package executornode_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
)

// An approved shell line (here: a policy that allows everything, as a
// person answering yes would) cannot read the bus's JetStream store or
// the identity seeds, nor write outside the workspace, so it cannot take
// the admin's credentials; the executor, in the same process as the bus
// here, still reads its store and serves the next call. The node says in
// its log what confines its tools.
func TestAnApprovedShellLineCannotReadTheBusSecrets(t *testing.T) {
	t.Parallel()
	data, seeds := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(seeds, "developer.nk"), []byte("SUADMINSEED\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := bustest.Start(t, data)
	registrytest.Start(t, b)
	policyDir := t.TempDir()
	os.WriteFile(filepath.Join(policyDir, "allow.rego"), []byte(`package toolbus

decision := {"verdict": "ALLOW", "reason": "approved", "remember": false}
`), 0o644)
	var log testkit.Buffer
	cfg := executornode.Config{Bus: b, Workspace: workspace(t), PolicyDir: policyDir, Secrets: []string{data, seeds},
		Executor: executor.Config{Identity: events.Identity{ID: "executor@test"}, Logger: slog.New(slog.NewTextHandler(&log, nil))}}
	n, err := executornode.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	if got := log.String(); !strings.Contains(got, "tool processes confined") || !strings.Contains(got, "landlock=") {
		t.Errorf("the node's log does not say what confines the tools:\n%s", got)
	}
	c := invoke.NewClient(bustest.Connect(t, b).Conn(), events.Identity{ID: "agent:test", Role: "agent"}, "")
	defer c.Close()
	shell := func(line string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"command": line})
		res, err := c.Invoke(context.Background(), &events.Invocation{Tool: "run_shell_command", Args: args}, nil)
		if err != nil || res.Policy == nil || res.Policy.Verdict != events.Allow {
			t.Fatalf("%q: %+v %v", line, res, err)
		}
		return res.LLMContent
	}
	if out := shell("cat README.md && echo ok > made.txt && cat made.txt"); !strings.Contains(out, "# hello") || !strings.Contains(out, "ok") {
		t.Fatalf("the workspace: %s", out)
	}
	if _, err := os.ReadDir(filepath.Join(data, "jetstream")); err != nil {
		t.Fatalf("the bus keeps no store in its data dir: %v", err)
	}

	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlock(t)
		for _, line := range []string{
			"cat " + filepath.Join(seeds, "developer.nk"),
			"find " + data + " -type f | head -3 | xargs -r cat | head -c 300; test ${PIPESTATUS[0]} -eq 0 && echo LIS\"\"TED",
			"tar cf - " + data + " | wc -c; test ${PIPESTATUS[0]} -eq 0 && echo LIS\"\"TED",
			"echo planted > " + filepath.Join(filepath.Dir(data), "planted") + " && echo WRIT\"\"TEN",
		} {
			out := shell(line)
			if strings.Contains(out, "SUADMINSEED") || strings.Contains(out, "LISTED") || strings.Contains(out, "WRITTEN") ||
				!strings.Contains(out, "Permission denied") {
				t.Errorf("%q got through:\n%s", line, out)
			}
		}
	})

	// The executor is not confined: it reads its store, and calls go on.
	if _, err := os.ReadDir(filepath.Join(data, "jetstream")); err != nil {
		t.Errorf("the executor's process no longer reads the data dir: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(seeds, "developer.nk")); err != nil || string(b) != "SUADMINSEED\n" {
		t.Errorf("the executor's process no longer reads the seeds: %q %v", b, err)
	}
	if out := shell("cat README.md"); !strings.Contains(out, "# hello") {
		t.Errorf("a call after the attempts: %s", out)
	}
}

// Secrets that cannot be hidden as given are an error of Start, not tools
// that run with them readable.
func TestSecretsHoldingTheWorkspaceAreRefused(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	cfg.Secrets = []string{filepath.Dir(cfg.Workspace)}
	if n, err := executornode.Start(context.Background(), cfg); err == nil {
		n.Close(context.Background())
		t.Fatal("started with the workspace inside a secret directory")
	} else if !strings.Contains(err.Error(), "inside the hidden") {
		t.Errorf("error %q does not say why", err)
	}
}
