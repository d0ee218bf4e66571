package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestOneProcessOwnsADataDir: a `toolbus up` or a `bus` on a data dir
// another process holds refuses at once, naming the dir and the holder's
// pid, exits non-zero and leaves the dir alone; once the holder is gone,
// killed or stopped, the next one starts.
func TestOneProcessOwnsADataDir(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), t.TempDir()
	up := func() *daemon {
		return startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "off")
	}
	refused := func(name string, holder int, args ...string) {
		t.Helper()
		d := startDaemon(t, name, args...)
		err := <-d.done
		stderr := d.output.String()
		if err == nil || d.cmd.ProcessState.ExitCode() == 0 {
			t.Fatalf("a second %s on %s exited 0; stderr:\n%s", name, data, stderr)
		}
		for _, want := range []string{data, "in use", "pid " + strconv.Itoa(holder)} {
			if !strings.Contains(stderr, want) {
				t.Errorf("a second %s: stderr does not say %q:\n%s", name, want, stderr)
			}
		}
	}

	first := up()
	first.waitLine(t, "Press Ctrl-C to stop.")
	refused("toolbus", first.cmd.Process.Pid, "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "off")
	refused("bus", first.cmd.Process.Pid, "--listen", "127.0.0.1:0", "--data", data)

	// Killed, it leaves its lock file with its pid: the kernel released
	// the lock all the same.
	first.cmd.Process.Kill()
	for range first.lines {
	}
	<-first.done
	second := up()
	url := busURL(t, second.waitLine(t, "bus:"))
	second.waitLine(t, "Press Ctrl-C to stop.")
	if tools := listJSON(t, url); len(tools) == 0 {
		t.Error("the up started after the first was killed lists no tools")
	}
	second.stop(t)

	addr := testkit.UnusedAddr(t)
	busd := startDaemon(t, "bus", "--listen", addr, "--data", data)
	busd.waitLog(t, "bus listening")
	busd.stop(t)
}

// TestARefusedUpTouchesNothing: an up refused a data dir that a bus
// holds has made nothing there, not even its identities, which it makes
// on the first start.
func TestARefusedUpTouchesNothing(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	addr := testkit.UnusedAddr(t)
	busd := startDaemon(t, "bus", "--listen", addr, "--data", data)
	busd.waitLog(t, "bus listening") // it holds the dir
	before := listDir(t, data)
	d := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", t.TempDir(), "--console", "off", "--mcp-listen", "off")
	if err := <-d.done; err == nil {
		t.Fatalf("up on a dir a bus holds exited 0; stderr:\n%s", d.output.String())
	}
	if !strings.Contains(d.output.String(), "pid "+strconv.Itoa(busd.cmd.Process.Pid)) {
		t.Errorf("the refusal does not name the bus's pid %d:\n%s", busd.cmd.Process.Pid, d.output.String())
	}
	if _, err := os.Stat(filepath.Join(data, "identities")); err == nil {
		t.Error("the refused up made its identities in the dir")
	}
	for name := range listDir(t, data) {
		if !before[name] && !strings.HasPrefix(name, "jetstream") {
			t.Errorf("the refused up left %s in the dir", name)
		}
	}
	busd.stop(t)
}

// listDir is the names of the entries of dir, and of the directories
// under it, relative to it.
func listDir(t *testing.T, dir string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, path); err == nil && rel != "." {
			names[rel] = true
		}
		return nil
	})
	return names
}
