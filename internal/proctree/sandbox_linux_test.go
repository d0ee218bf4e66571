package proctree

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/sandbox"
	"github.com/toolbus/toolbus/internal/testkit"
)

// confined is a workspace, the secrets a tool must not read and a
// directory outside the workspace and the temp dirs, with a policy that
// hides the secrets.
type confined struct {
	ws, seeds, data, outside string
	policy                   *sandbox.Policy
}

func newConfined(t *testing.T) *confined {
	t.Helper()
	c := &confined{ws: t.TempDir(), seeds: t.TempDir(), data: t.TempDir()}
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(c.ws, "README.md"), "# hello\n")
	write(filepath.Join(c.seeds, "developer.nk"), "SUADMINSEED\n")
	write(filepath.Join(c.data, "jetstream", "$G", "streams", "AUDIT", "meta.inf"), "STREAMMETA\n")
	write(filepath.Join(c.data, "checkpoint.key"), "CHECKPOINTKEY\n")
	// Everything under the temp dirs is writable: the directory that is
	// not has to be elsewhere, and where this user can write unconfined.
	if cache, err := os.UserCacheDir(); err == nil {
		os.MkdirAll(cache, 0o700)
		if dir, err := os.MkdirTemp(cache, "toolbus-sandbox-test-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			c.outside = dir
		}
	}
	c.policy = &sandbox.Policy{Writable: []string{c.ws}, Hidden: []string{c.seeds, c.data}}
	return c
}

// run runs line under bash in the workspace, confined, and returns its
// exit status and output (stdout and stderr).
func (c *confined) run(t *testing.T, s *Starter, line string) (int, string) {
	t.Helper()
	var out buffer
	cmd := bashCommand(c.ws, line, &out)
	cmd.Stderr = &out
	cmd.Sandbox = c.policy
	ws, err := start(t, s, cmd).Wait()
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return ws.ExitStatus(), out.String()
}

// A shell line in a confined tree, and every process it starts, reads and
// writes the workspace but cannot read the identity seeds or the bus's
// data dir, nor write outside the workspace and temp dirs, nor read the
// owner's environment or files through /proc; the owner itself is not
// confined.
func TestASandboxedTreeCannotReadTheSecrets(t *testing.T) {
	var s Starter
	defer s.Close()
	c := newConfined(t)
	t.Logf("this kernel: %s", sandbox.Describe())
	held, err := os.Open(filepath.Join(c.seeds, "developer.nk"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	// What a tool needs works, confined or not.
	for _, line := range []string{
		"cat README.md",
		"echo new > made.txt && cat made.txt && rm made.txt",
		"mkdir -p sub/dir && mv README.md sub/dir/ && mv sub/dir/README.md . && rm -r sub",
		"echo scratch > " + filepath.Join(t.TempDir(), "scratch") + " && echo gone > /dev/null",
		"ls /usr/bin >/dev/null && ls . >/dev/null",
	} {
		if status, out := c.run(t, &s, line); status != 0 {
			t.Errorf("%q: exit %d: %s", line, status, out)
		}
	}

	attacks := []string{
		"cat " + filepath.Join(c.seeds, "developer.nk"),
		"ls " + c.seeds,
		"cat " + filepath.Join(c.data, "checkpoint.key"),
		"cat '" + filepath.Join(c.data, "jetstream", "$G", "streams", "AUDIT", "meta.inf") + "'",
		"ls " + c.data,
		"find " + c.data + " -type f",
		"cp " + filepath.Join(c.seeds, "developer.nk") + " stolen.nk && cat stolen.nk",
		// Through a link, a child, a background process, another shell.
		"ln -s " + filepath.Join(c.seeds, "developer.nk") + " link.nk && cat link.nk",
		"ln " + filepath.Join(c.seeds, "developer.nk") + " hard.nk && cat hard.nk",
		"bash -c 'cat " + filepath.Join(c.seeds, "developer.nk") + "'",
		"(cat " + filepath.Join(c.seeds, "developer.nk") + " > bg.out) & wait $!",
		// The owner's view of the files: through its root, a file it
		// holds open (as the bus holds its store), its memory.
		fmt.Sprintf("cat /proc/%d/root%s", os.Getpid(), filepath.Join(c.seeds, "developer.nk")),
		fmt.Sprintf("cat /proc/%d/fd/%d", os.Getpid(), held.Fd()),
		fmt.Sprintf("dd if=/proc/%d/mem bs=1 count=1 skip=4194304", os.Getpid()),
	}
	if c.outside != "" {
		attacks = append(attacks, "echo planted > "+filepath.Join(c.outside, "planted")+" && echo WRITTEN")
	}
	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlock(t)
		for _, line := range attacks {
			status, out := c.run(t, &s, line)
			if status == 0 || strings.Contains(out, "SUADMINSEED") || strings.Contains(out, "CHECKPOINTKEY") ||
				strings.Contains(out, "STREAMMETA") || strings.Contains(out, "WRITTEN") {
				t.Errorf("%q: exit %d, output %q: it got through", line, status, out)
			}
		}
		if c.outside != "" {
			if _, err := os.Stat(filepath.Join(c.outside, "planted")); err == nil {
				t.Error("a file was written outside the workspace and the temp dirs")
			}
		}
	})

	// The owner, and an unconfined tree of the same supervisors, still
	// read them: the confinement was the confined tree's alone.
	if b, err := os.ReadFile(filepath.Join(c.seeds, "developer.nk")); err != nil || string(b) != "SUADMINSEED\n" {
		t.Errorf("the owner reads the seed: %q %v", b, err)
	}
	if _, err := os.ReadDir(filepath.Join(c.data, "jetstream")); err != nil {
		t.Errorf("the owner lists its data dir: %v", err)
	}
	var out buffer
	free := bashCommand(c.ws, "cat "+filepath.Join(c.seeds, "developer.nk"), &out)
	for range 3 { // each of the idle supervisors, and a new one
		out = buffer{}
		free.Stdout = &out
		if _, err := start(t, &s, free).Wait(); err != nil || out.String() != "SUADMINSEED\n" {
			t.Errorf("an unconfined tree after confined ones: %q %v", out.String(), err)
		}
	}
}

// A policy that does not build is an error of Start, not a tree that
// runs unconfined.
func TestABadPolicyDoesNotStart(t *testing.T) {
	var s Starter
	defer s.Close()
	ws := t.TempDir()
	for _, p := range []*sandbox.Policy{
		{Hidden: []string{"relative/data"}},
		{Writable: []string{filepath.Join(ws, "data", "inside")}, Hidden: []string{filepath.Join(ws, "data")}},
	} {
		cmd := bashCommand(ws, "echo ran > ran", nil)
		cmd.Sandbox = p
		if tr, err := s.Start(cmd); err == nil {
			tr.Wait()
			t.Errorf("%+v: started", p)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("a command ran under a policy that does not build")
	}
}
