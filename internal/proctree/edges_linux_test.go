package proctree

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/sandbox"
	"github.com/toolbus/toolbus/internal/testkit"
)

// connects is a shell line that prints NAME=connected or NAME=refused
// for a TCP connection to 127.0.0.1:port, each port listening.
func connects(name string, port uint16) string {
	return fmt.Sprintf("if (exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null; then echo %s=connected; else echo %s=refused; fi; ", port, name, name)
}

// A confined tree connects over TCP to the ports its policy lists and to
// no other: not to a port nobody listed (the bus's, say), and not to a
// reserved one (toolbus's own) even when the list names it. Every port
// listens, so a refusal is the confinement's. An unconfined tree of the
// same supervisors connects to all three.
func TestAConfinedTreeConnectsOnlyToItsPorts(t *testing.T) {
	allowed, reserved, unlisted := testkit.Listen(t), testkit.Listen(t), testkit.Listen(t)
	ws := t.TempDir()
	sb, err := sandbox.New(sandbox.Policy{Writable: []string{ws}, Connect: []uint16{allowed, reserved}, Reserved: []uint16{reserved}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	s := NewStarter(sb)
	defer s.Close()
	line := connects("allowed", allowed) + connects("reserved", reserved) + connects("unlisted", unlisted)
	run := func(s *Starter) string {
		t.Helper()
		var out testkit.Buffer
		if _, err := start(t, s, bashCommand(ws, line, &out)).Wait(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	got := run(s)
	if !strings.Contains(got, "allowed=connected") {
		t.Errorf("a listed port: %q", got)
	}
	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlockABI(t, 4)
		for _, want := range []string{"reserved=refused", "unlisted=refused"} {
			if !strings.Contains(got, want) {
				t.Errorf("got %q, want %s", got, want)
			}
		}
	})
	free := Unconfined()
	defer free.Close()
	if got := run(free); strings.Count(got, "=connected") != 3 {
		t.Errorf("an unconfined tree: %q", got)
	}
}

// A confined tree cannot signal a process outside its confinement: not
// its owner (the executor), not its supervisor, not a tree of another
// confinement (an earlier call's background command); it signals its own
// processes. The supervisor, unconfined, still ends it.
func TestAConfinedTreeCannotSignalOutside(t *testing.T) {
	ws := t.TempDir()
	sb, err := sandbox.New(sandbox.Policy{Writable: []string{ws}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	s := NewStarter(sb)
	defer s.Close()
	earlier := start(t, s, bashCommand(ws, "exec sleep 100", nil))
	defer earlier.Stop()
	probe := func(name, pid string) string {
		return fmt.Sprintf("if kill -0 %s 2>/dev/null; then echo %s=signalled; else echo %s=refused; fi; ", pid, name, name)
	}
	line := "sleep 100 & own=$!; " + probe("own", "$own") + "kill $own; " +
		probe("owner", fmt.Sprint(os.Getpid())) + probe("supervisor", "$PPID") + probe("earlier", fmt.Sprint(earlier.Pid()))
	var out testkit.Buffer
	if _, err := start(t, s, bashCommand(ws, line, &out)).Wait(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "own=signalled") {
		t.Errorf("its own process: %q", got)
	}
	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlockABI(t, 6)
		for _, want := range []string{"owner=refused", "supervisor=refused", "earlier=refused"} {
			if !strings.Contains(got, want) {
				t.Errorf("got %q, want %s", got, want)
			}
		}
	})
	earlier.Stop()
	if _, err := earlier.Wait(); err != nil {
		t.Errorf("the supervisor ends a confined tree: %v", err)
	}
}

// dialAbstractEnv makes the test binary a client of the abstract Unix
// socket it names, which says abstract=connected or abstract=refused.
const dialAbstractEnv = "PROCTREE_TEST_DIAL_ABSTRACT"

func dialAbstract(name string) {
	c, err := net.Dial("unix", "@"+name)
	if err != nil {
		fmt.Println("abstract=refused")
		os.Exit(0)
	}
	c.Close()
	fmt.Println("abstract=connected")
	os.Exit(0)
}

// A confined tree cannot connect to an abstract Unix socket made outside
// its confinement (the executor's, say); an unconfined one can.
func TestAConfinedTreeCannotReachAbstractSockets(t *testing.T) {
	name := fmt.Sprintf("toolbus-proctree-test-%d", os.Getpid())
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	testkit.AcceptAndDrop(t, ln)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	sb, err := sandbox.New(sandbox.Policy{Writable: []string{ws}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	run := func(s *Starter) string {
		t.Helper()
		var out testkit.Buffer
		c := Command{Path: exe, Args: []string{exe}, Dir: ws, Env: append(os.Environ(), dialAbstractEnv+"="+name), Stdout: &out}
		if _, err := start(t, s, c).Wait(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	free := Unconfined()
	defer free.Close()
	if got := run(free); !strings.Contains(got, "abstract=connected") {
		t.Fatalf("an unconfined tree: %q: the test would prove nothing", got)
	}
	confined := NewStarter(sb)
	defer confined.Close()
	got := run(confined)
	t.Run("denied", func(t *testing.T) {
		testkit.NeedsLandlockABI(t, 6)
		if !strings.Contains(got, "abstract=refused") {
			t.Errorf("got %q, want abstract=refused", got)
		}
	})
}

// A Starter built neither confined nor unconfined starts nothing: a part
// that was handed no starter, or a zero one, cannot run a process
// unconfined by accident.
func TestAZeroStarterStartsNothing(t *testing.T) {
	var s Starter
	defer s.Close()
	_, err := s.Start(bashCommand(t.TempDir(), "true", nil))
	if !errors.Is(err, ErrNoConfinement) {
		t.Fatalf("got %v, want ErrNoConfinement", err)
	}
	if NewStarter(nil).Confined() || !NewStarter(&sandbox.Sandbox{}).Confined() {
		t.Error("Confined does not say whether a sandbox confines the trees")
	}
	if _, err := NewStarter(nil).Start(bashCommand(t.TempDir(), "true", nil)); !errors.Is(err, ErrNoConfinement) {
		t.Errorf("a starter given no sandbox: got %v, want ErrNoConfinement", err)
	}
}
