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
	sb                       *sandbox.Sandbox
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
	var err error
	if c.sb, err = sandbox.New(sandbox.Policy{Writable: []string{c.ws}, Hidden: []string{c.seeds, c.data}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.sb.Close() })
	return c
}

// run runs line under bash in the workspace, confined, and returns its
// exit status and output (stdout and stderr).
func (c *confined) run(t *testing.T, s *Starter, line string) (int, string) {
	t.Helper()
	var out testkit.Buffer
	cmd := bashCommand(c.ws, line, &out)
	cmd.Stderr = &out
	cmd.Sandbox = c.sb
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
	s := Unconfined()
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
		if status, out := c.run(t, s, line); status != 0 {
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
			status, out := c.run(t, s, line)
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
	var out testkit.Buffer
	free := bashCommand(c.ws, "cat "+filepath.Join(c.seeds, "developer.nk"), &out)
	for range 3 { // each of the idle supervisors, and a new one
		out = testkit.Buffer{}
		free.Stdout = &out
		if _, err := start(t, s, free).Wait(); err != nil || out.String() != "SUADMINSEED\n" {
			t.Errorf("an unconfined tree after confined ones: %q %v", out.String(), err)
		}
	}
}

// The ruleset a Sandbox keeps follows the file system: a directory made
// beside a hidden one after the first confined command is readable by
// the next, and a hidden directory made since is hidden from it.
func TestTheRulesetFollowsTheFileSystem(t *testing.T) {
	s := Unconfined()
	defer s.Close()
	parent := t.TempDir()
	// late is in a directory that has nothing hidden yet, so none of the
	// directories listed for the first ruleset changes when it is made.
	ws, data, late := filepath.Join(parent, "ws"), filepath.Join(parent, "data"), filepath.Join(parent, "sub", "late-data")
	for _, d := range []string{ws, data, filepath.Dir(late)} {
		os.Mkdir(d, 0o700)
	}
	sb, err := sandbox.New(sandbox.Policy{Writable: []string{ws}, Hidden: []string{data, late}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	run := func(line string) (int, string) {
		t.Helper()
		var out testkit.Buffer
		cmd := bashCommand(ws, line, &out)
		cmd.Stderr, cmd.Sandbox = &out, sb
		st, err := start(t, s, cmd).Wait()
		if err != nil {
			t.Fatal(err)
		}
		return st.ExitStatus(), out.String()
	}
	if status, out := run("true"); status != 0 {
		t.Fatalf("exit %d: %s", status, out)
	}
	beside := filepath.Join(parent, "beside")
	os.Mkdir(beside, 0o700)
	os.WriteFile(filepath.Join(beside, "notes"), []byte("NOTES\n"), 0o600)
	if status, out := run("cat " + filepath.Join(beside, "notes")); status != 0 || out != "NOTES\n" {
		t.Errorf("a directory made beside the hidden one: exit %d, %q", status, out)
	}
	os.Mkdir(late, 0o700)
	os.WriteFile(filepath.Join(late, "checkpoint.key"), []byte("LATEKEY\n"), 0o600)
	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlock(t)
		if status, out := run("cat " + filepath.Join(late, "checkpoint.key")); status == 0 || strings.Contains(out, "LATEKEY") {
			t.Errorf("a hidden directory made after the first command: exit %d, %q", status, out)
		}
	})
}
