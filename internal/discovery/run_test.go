package discovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/testkit"
)

// newStarter is a starter for the tests of the commands' own behaviour,
// unconfined on purpose: sandbox_linux_test.go holds the confinement.
func newStarter(t testing.TB) *proctree.Starter {
	s := proctree.Unconfined()
	t.Cleanup(s.Close)
	return s
}

// discoverLine runs the discovery command line in a fresh workspace.
func discoverLine(t *testing.T, ctx context.Context, line string) (*found, string, error) {
	t.Helper()
	dir := t.TempDir()
	f, err := discover(ctx, newStarter(t), line, dir, FilterEnv(os.Environ(), nil))
	return f, dir, err
}

func TestDiscoverRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	decls := filepath.Join(dir, "decls.json")
	os.WriteFile(decls, []byte(`[{"name": "calc"}, {"name": "wc"}]`), 0o644)
	f, err := discover(context.Background(), newStarter(t), "sh "+testkit.Testdata(t, "discover.sh")+" decls.json runs", dir, FilterEnv(os.Environ(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.specs) != 2 || f.specs[0].Name != "calc" || f.specs[1].Name != "wc" || len(f.warnings) != 0 {
		t.Errorf("found %+v", f)
	}
	// Relative paths in the command, and its output, are the workspace's.
	if data, err := os.ReadFile(filepath.Join(dir, "runs")); err != nil || string(data) != "run\n" {
		t.Errorf("the command did not run in the workspace: %q, %v", data, err)
	}
}

func TestDiscoverRelativeCommandIsTheWorkspaces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := "#!/bin/sh\necho '[{\"name\": \"local\"}]'\n"
	os.MkdirAll(filepath.Join(dir, "tools"), 0o755)
	os.WriteFile(filepath.Join(dir, "tools", "discover"), []byte(script), 0o755)
	f, err := discover(context.Background(), newStarter(t), "tools/discover", dir, FilterEnv(os.Environ(), nil))
	if err != nil || len(f.specs) != 1 || f.specs[0].Name != "local" {
		t.Fatalf("got %+v, %v", f, err)
	}
	// A bare name is not looked up in the workspace, even with "." in PATH.
	os.WriteFile(filepath.Join(dir, "discover-here"), []byte(script), 0o755)
	_, err = discover(context.Background(), newStarter(t), "discover-here", dir, []string{"PATH=.:/usr/bin:/bin"})
	if err == nil || !strings.Contains(err.Error(), "tools.discoveryCommand: cannot run discover-here: not found in PATH") {
		t.Errorf("got %v", err)
	}
}

func TestDiscoverFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, line, want string }{
		{"no such command", "no-such-discovery-command --json", "tools.discoveryCommand: cannot run no-such-discovery-command: not found in PATH"},
		{"not executable", testkit.Testdata(t, "call.sh"), ""}, // made non-executable below
		{"exit code", `sh -c 'echo "cannot read tools.yaml" >&2; exit 3'`, "the discovery command `sh -c 'echo \"cannot read tools.yaml\" >&2; exit 3'` failed with exit code 3; stderr: cannot read tools.yaml"},
		{"exit code, no stderr", `sh -c 'exit 1'`, "failed with exit code 1; stderr: (empty)"},
		{"signal", `sh -c 'echo dying >&2; kill -KILL $$'`, "was killed by signal SIGKILL; stderr: dying"},
		{"not JSON", `sh -c 'echo Usage: discover; echo "try --json" >&2'`, "the discovery output is not JSON: jsontext: invalid character 'U' at start of value; stderr: try --json"},
		{"not an array", `sh -c 'echo "{\"name\": \"x\"}"'`, "the discovery output is a JSON object, not an array of function declarations; stderr: (empty)"},
		{"empty", `true`, "the discovery command printed nothing"},
		{"stdout past the limit", `sh -c 'echo partial >&2; exec yes'`, "wrote more than 10485760 bytes (10 MiB) to stdout, the most a discovery may write to each stream; it was killed; stderr: partial"},
		{"stderr past the limit", `sh -c 'yes >&2'`, "wrote more than 10485760 bytes (10 MiB) to stderr"},
	} {
		t.Run(c.name, func(t *testing.T) {
			line := c.line
			if c.name == "not executable" {
				dir := t.TempDir()
				line = filepath.Join(dir, "discover")
				os.WriteFile(line, []byte("#!/bin/sh\necho []\n"), 0o644)
				c.want = "cannot run " + line + ": permission denied: not executable"
			}
			f, _, err := discoverLine(t, context.Background(), line)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
			if f != nil {
				t.Errorf("a failure found %+v", f)
			}
		})
	}
}

func TestDiscoverLimitIsExact(t *testing.T) {
	t.Parallel()
	// Exactly the limit is allowed (and is no JSON here); one byte more is
	// not.
	_, _, err := discoverLine(t, context.Background(), "head -c 10485760 /dev/zero")
	if err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("10 MiB: got %v, want a JSON error", err)
	}
	_, _, err = discoverLine(t, context.Background(), "head -c 10485761 /dev/zero")
	if err == nil || !strings.Contains(err.Error(), "wrote more than 10485760 bytes (10 MiB) to stdout") {
		t.Errorf("10 MiB + 1: got %v, want the limit", err)
	}
}

func TestDiscoverStderrWithSuccessIsAWarning(t *testing.T) {
	t.Parallel()
	f, _, err := discoverLine(t, context.Background(), `sh -c 'echo "[{\"name\": \"a\"}]"; echo "deprecated flag" >&2'`)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.specs) != 1 || len(f.warnings) != 1 || f.warnings[0] != "the discovery command wrote to stderr: deprecated flag" {
		t.Errorf("got %+v", f)
	}
}

func TestDiscoverCancelKillsTheTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := discover(ctx, newStarter(t), `sh -c 'setsid sh -c "echo \$\$ > left.pid; exec sleep 1000" >/dev/null 2>&1 & exec sleep 1000'`, dir, FilterEnv(os.Environ(), nil))
		done <- err
	}()
	pid := testkit.WaitPID(t, filepath.Join(dir, "left.pid"))
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "was stopped: context canceled") {
			t.Errorf("got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the discovery did not end")
	}
	testkit.WaitReaped(t, pid)
}
