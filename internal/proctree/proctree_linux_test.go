package proctree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/testkit"
)

// ownerEnv makes the test binary an owner that starts a tree and waits to
// be killed: see TestTreeEndsWithItsOwner.
const ownerEnv = "PROCTREE_TEST_OWNER_DIR"

func TestMain(m *testing.M) {
	if name := os.Getenv(dialAbstractEnv); name != "" {
		dialAbstract(name)
	}
	if dir := os.Getenv(ownerEnv); dir != "" {
		s := Unconfined()
		if _, err := s.Start(bashCommand(dir, "setsid sh -c 'echo $$ > left.pid; exec sleep 62' & sleep 62", nil)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		select {} // until killed
	}
	goleak.VerifyTestMain(m)
}

func bashCommand(dir, line string, out *testkit.Buffer) Command {
	bash, err := exec.LookPath("bash")
	if err != nil {
		panic(err)
	}
	c := Command{Path: bash, Args: []string{"bash", "-c", line}, Dir: dir, Grace: 200 * time.Millisecond}
	if out != nil {
		c.Stdout = out
	}
	return c
}

func start(t *testing.T, s *Starter, c Command) *Tree {
	t.Helper()
	tr, err := s.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestRootStatusAndOutput(t *testing.T) {
	s := Unconfined()
	defer s.Close()
	tests := []struct {
		line     string
		exit     int
		signal   syscall.Signal
		output   string
		errors   string
		keepTree bool
	}{
		{line: "echo out; echo err >&2; exit 3", exit: 3, output: "out\n", errors: "err\n"},
		{line: "kill -TERM $$", signal: syscall.SIGTERM},
		// Command lines are passed on byte for byte.
		{line: "printf '%s' '\xff<&>\"'", output: "\xff<&>\""},
		{line: "echo kept", output: "kept\n", keepTree: true},
	}
	for _, tt := range tests {
		var out, errs testkit.Buffer
		c := bashCommand(t.TempDir(), tt.line, &out)
		c.Stderr = &errs
		c.Keep = tt.keepTree
		ws, err := start(t, s, c).Wait()
		if err != nil {
			t.Fatalf("%q: %v", tt.line, err)
		}
		if tt.signal != 0 {
			if !ws.Signaled() || ws.Signal() != tt.signal {
				t.Errorf("%q: status %#x, want killed by %v", tt.line, ws, tt.signal)
			}
		} else if ws.Signaled() || ws.ExitStatus() != tt.exit {
			t.Errorf("%q: status %#x, want exit %d", tt.line, ws, tt.exit)
		}
		if out.String() != tt.output || errs.String() != tt.errors {
			t.Errorf("%q: output %q and %q, want %q and %q", tt.line, out.String(), errs.String(), tt.output, tt.errors)
		}
	}
	if _, err := s.Start(Command{Path: "/nonexistent", Args: []string{"x"}}); err == nil {
		t.Error("a missing program started")
	}
}

// TestStdinAndEnv: the root reads the input the owner writes to a pipe
// and sees exactly the environment given, or the owner's when none is.
func TestStdinAndEnv(t *testing.T) {
	s := Unconfined()
	defer s.Close()
	t.Setenv("PROCTREE_OWNER_VAR", "owner")
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testkit.Buffer
	c := bashCommand(t.TempDir(), `read -r line; echo "got $line ${ONLY-unset} ${PROCTREE_OWNER_VAR-unset}"`, &out)
	c.Stdin, c.Env = inR, []string{"ONLY=given"}
	tr := start(t, s, c)
	inR.Close()
	inW.WriteString("hello\n")
	inW.Close()
	if _, err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "got hello given unset\n"; got != want {
		t.Errorf("with Env and Stdin: %q, want %q", got, want)
	}
	var out2 testkit.Buffer
	c = bashCommand(t.TempDir(), `read -r line; echo "[$line] ${PROCTREE_OWNER_VAR-unset}"`, &out2)
	if _, err := start(t, s, c).Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := out2.String(), "[] owner\n"; got != want {
		t.Errorf("without: %q, want %q (stdin /dev/null, the owner's environment)", got, want)
	}
}

// TestSupervisorIsReused: a supervisor whose tree ended cleanly runs the
// next tree; one killed while idle is replaced; Close reaps the idle ones.
func TestSupervisorIsReused(t *testing.T) {
	s := Unconfined()
	ppid := func() int {
		t.Helper()
		var out testkit.Buffer
		if _, err := start(t, s, bashCommand("", "echo $PPID", &out)).Wait(); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(out.String()))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := ppid()
	if again := ppid(); again != first {
		t.Errorf("the second tree ran under supervisor %d, the first under %d", again, first)
	}
	syscall.Kill(first, syscall.SIGKILL)
	testkit.WaitGone(t, first)
	next := ppid()
	if next == first {
		t.Fatal("a killed supervisor served again")
	}
	s.Close()
	testkit.WaitReaped(t, first)
	testkit.WaitReaped(t, next)
	if _, err := s.Start(bashCommand("", "true", nil)); err != ErrClosed {
		t.Errorf("Start after Close: %v", err)
	}
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies left: %v", z)
	}
}

// TestStopEndsEveryProcess: Stop ends processes that left the group, that
// ignore SIGTERM, and that are stopped.
func TestStopEndsEveryProcess(t *testing.T) {
	s := Unconfined()
	defer s.Close()
	for _, line := range []string{
		"setsid sh -c 'echo $$ > left.pid; exec sleep 62' & sleep 62",
		`setsid sh -c "trap '' TERM; echo \$\$ > left.pid; exec sleep 62" & sleep 62`,
		"sleep 62 & echo $! > left.pid; kill -STOP $!; sleep 62",
	} {
		dir := t.TempDir()
		for _, keep := range []bool{false, true} {
			os.Remove(filepath.Join(dir, "left.pid"))
			c := bashCommand(dir, line, nil)
			c.Keep = keep
			tr := start(t, s, c)
			pid := testkit.WaitPID(t, filepath.Join(dir, "left.pid"))
			tr.Stop()
			ws, err := tr.Wait()
			if err != nil || !ws.Signaled() {
				t.Errorf("%q: root ended with %#x %v, want a signal", line, ws, err)
			}
			testkit.WaitReaped(t, pid)
		}
	}
}

// TestRootExitEndsWhatItLeft: a root that exits on its own, leaving
// behind processes that left its session, lost their parent, ignore
// SIGTERM or were stopped, and one that exited unreaped while the root
// ran, gives its own status, and nothing of the tree is left once Wait
// returns.
func TestRootExitEndsWhatItLeft(t *testing.T) {
	s := Unconfined()
	defer s.Close()
	dir := t.TempDir()
	line := `( setsid sh -c "trap '' TERM; echo \$\$ > left.pid; exec sleep 62" & ) ; ` +
		`( sh -c 'echo $$ > gone.pid' & ) ; ` +
		`sleep 62 & echo $! > stopped.pid; kill -STOP $!; ` +
		`while [ ! -s left.pid ] || [ ! -s gone.pid ]; do sleep 0.01; done; exit 5`
	ws, err := start(t, s, bashCommand(dir, line, nil)).Wait()
	if err != nil || ws.ExitStatus() != 5 {
		t.Errorf("root ended with %#x %v, want exit 5", ws, err)
	}
	for _, f := range []string{"left.pid", "gone.pid", "stopped.pid"} {
		pid := testkit.WaitPID(t, filepath.Join(dir, f))
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("%s: process %d is still there after Wait returned", f, pid)
		}
	}
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies left: %v", z)
	}
}

// TestKeptTreeOutlivesItsRoot: a kept tree runs on after its root exited,
// and ends when its last process does.
func TestKeptTreeOutlivesItsRoot(t *testing.T) {
	s := Unconfined()
	defer s.Close()
	dir := t.TempDir()
	c := bashCommand(dir, "setsid sh -c 'echo $$ > left.pid; while [ ! -e stop ]; do sleep 0.01; done' >/dev/null 2>&1 &", nil)
	c.Keep = true
	tr := start(t, s, c)
	pid := testkit.WaitPID(t, filepath.Join(dir, "left.pid"))
	select {
	case <-tr.Done():
		t.Fatal("the tree ended with its root")
	default:
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the root's child is gone: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
	if ws, err := tr.Wait(); err != nil || ws.ExitStatus() != 0 {
		t.Errorf("got %#x %v", ws, err)
	}
	testkit.WaitReaped(t, pid)
}

// TestTreeEndsWithItsOwner: when the process that started a tree dies,
// even by SIGKILL, the tree ends.
func TestTreeEndsWithItsOwner(t *testing.T) {
	dir := t.TempDir()
	owner := exec.Command(os.Args[0], "-test.run=^$")
	owner.Env = append(os.Environ(), ownerEnv+"="+dir)
	owner.Stderr = os.Stderr
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	pid := testkit.WaitPID(t, filepath.Join(dir, "left.pid"))
	owner.Process.Kill()
	owner.Wait()
	testkit.WaitReaped(t, pid)
}
