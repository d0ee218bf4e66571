// Package proctree runs a command as the root of a process tree that ends
// as a whole: every process the command starts, those that leave its
// process group or session (setsid, a double fork) included, is killed when
// the tree is stopped, when the root exits (unless the tree is kept), and
// when the process that started the tree dies.
//
// On Linux each tree runs under a supervisor: the running binary
// re-executed through /proc/self/exe under a marker name, which this
// package's init recognises before main runs, so every binary that links
// the package can supervise without further wiring. The supervisor is a
// child subreaper (PR_SET_CHILD_SUBREAPER): a process of the tree whose
// parent dies is re-parented to it, not to init, so every live process of
// the tree is one of its descendants, found by walking the parent links in
// /proc. Ending the tree is SIGTERM to every descendant, a grace, then
// SIGKILL to every descendant again and again until none is left and all
// are reaped. The supervisor talks to its owner over a socket; the kernel
// closes it when the owner exits in any way, and the supervisor then ends
// the tree and exits. A supervisor runs one tree at a time and is kept for
// the next once its tree ended with nothing left, so only the first tree
// pays for starting it.
//
// What a tree cannot hold: a process that kills its own supervisor with
// SIGKILL, a process handed to another service (systemd-run, at), or one
// that runs as another user (sudo) and so cannot be signalled. Elsewhere
// than Linux the tree is the root's process group only.
package proctree

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// Command is what Start runs.
type Command struct {
	// Path is the executable, Args its argv (Args[0] included).
	Path string
	Args []string
	// Dir is the working directory; empty means the caller's.
	Dir string
	// Env is the environment, as os.Environ gives it; nil means the
	// caller's.
	Env []string
	// Stdin, when not nil, is the root's standard input (the read end of
	// a pipe whose write end the caller keeps, say); nil means
	// /dev/null. Start passes it on: the caller may close its copy once
	// Start returns.
	Stdin *os.File
	// Stdout and Stderr receive what the tree writes; nil discards it.
	// They are written from goroutines of the tree, one for each.
	Stdout, Stderr io.Writer
	// Keep keeps the tree after its root exits, until every process of it
	// has ended or Stop is called (a background command). Without it the
	// root's exit ends the tree.
	Keep bool
	// Grace is how long the tree's processes have between SIGTERM and
	// SIGKILL; zero means DefaultGrace.
	Grace time.Duration
	// Sandbox, when not nil, confines every process of the tree with
	// Landlock in place of the Starter's own, as far as the kernel can:
	// the root is forked from a thread of the supervisor confined by it,
	// so neither the caller nor the supervisor is. A ruleset that does
	// not build is an error of Start; a kernel without Landlock is not
	// (best effort). Elsewhere than Linux it is ignored.
	Sandbox *sandbox.Sandbox
}

// ErrClosed is returned by a Starter's Start after Close.
var ErrClosed = errors.New("proctree: starter closed")

// ErrNoConfinement is returned by the Start of a Starter that was built
// neither confined (NewStarter) nor explicitly unconfined (Unconfined),
// for a Command that names no Sandbox: a process toolbus starts is never
// unconfined by accident, by a zero value left unset.
var ErrNoConfinement = errors.New("proctree: the starter has no confinement; build it with NewStarter, or Unconfined where running unconfined is meant")

// confinement is how a Starter confines the trees it starts: by a
// sandbox, or explicitly not at all. Its zero value is neither, and
// starts nothing unconfined.
type confinement struct {
	sandbox    *sandbox.Sandbox
	unconfined bool
}

// of is the sandbox that confines a tree of c: c's own, else the
// starter's; nil only when the starter was built unconfined.
func (k confinement) of(c *Command) (*sandbox.Sandbox, error) {
	switch {
	case c.Sandbox != nil:
		return c.Sandbox, nil
	case k.sandbox != nil:
		return k.sandbox, nil
	case k.unconfined:
		return nil, nil
	}
	return nil, ErrNoConfinement
}

// NewStarter returns a Starter that confines every tree it starts by sb:
// the one way every part of an executor starts a process. A nil sb gives
// a Starter that starts nothing (ErrNoConfinement). Close it.
func NewStarter(sb *sandbox.Sandbox) *Starter {
	return &Starter{conf: confinement{sandbox: sb}}
}

// Unconfined returns a Starter that runs its trees unconfined: for tests
// that say so, never a default. (An operator's --unconfined lets an
// executor start where the kernel confines less; its starter still
// confines as far as the kernel can.) Close it.
func Unconfined() *Starter {
	return &Starter{conf: confinement{unconfined: true}}
}

// Confined says whether s confines every tree it starts.
func (s *Starter) Confined() bool { return s.conf.sandbox != nil }

// DefaultGrace is the time between SIGTERM and SIGKILL when a Command sets
// none.
const DefaultGrace = 2 * time.Second

// drainDelay bounds how long output is read after the supervisor exited:
// normally every writer is gone by then, but a supervisor that was killed
// may leave one holding the pipe.
const drainDelay = 2 * time.Second

func (c *Command) grace() time.Duration {
	if c.Grace <= 0 {
		return DefaultGrace
	}
	return c.Grace
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// result is what is known of a tree once it ended.
type result struct {
	status syscall.WaitStatus
	err    error // the root's status is unknown, and why
}
