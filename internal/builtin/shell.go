package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/tool"
)

// killGrace is how long the processes of a cancelled command have between
// SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

// Shells runs shell commands, each in its own process group and process
// tree (internal/proctree): every process a command starts ends with its
// call, whether it stays in the group or not. A foreground command's
// processes end when bash exits; a background command's run on until they
// end, kill_shell or Close. Shells owns the background commands; Close
// kills them all.
//
// A background command's shell_id is a capability (events.NewCapability)
// of the caller that started it (tool.Owner): shell_output and kill_shell
// serve that caller alone, and answer any other exactly as they answer an
// id that names nothing, so that an id neither found nor guessed tells
// whether it is live. Nobody else is served, an admin neither: what a
// command printed may hold its owner's secrets.
// kills them all. Every process starts through the starter it was given,
// which confines it (internal/sandbox) unless it was built unconfined on
// purpose.
type Shells struct {
	ws      *Workspace
	starter *proctree.Starter

	mu     sync.Mutex
	bg     map[string]*background
	closed bool
}

// NewShells returns a shell runner in ws whose commands, in the
// foreground or the background, start through starter: the node's one
// starter (proctree.NewStarter), whose sandbox keeps them from toolbus's
// secrets and ports. The starter stays the caller's to close; a nil one
// starts nothing (proctree.ErrNoConfinement).
func NewShells(ws *Workspace, starter *proctree.Starter) *Shells {
	if starter == nil {
		starter = new(proctree.Starter)
	}
	return &Shells{ws: ws, starter: starter, bg: make(map[string]*background)}
}

// ownEnv are the prefixes of toolbus's own environment variables, which
// hold its secrets (TOOLBUS_STORE_KEY, TOOLBUS_CONSOLE_TOKEN, the NATS
// credentials): a shell line gets the executor's environment without
// them. The rest is the user's, which the line is run for.
var ownEnv = []string{"TOOLBUS_", "NATS_"}

// callEnv is a command's environment: environ without toolbus's own
// variables and without the executor's own trace context, with the
// call's (TRACEPARENT), so that what the command traces is the call's
// child.
func callEnv(ctx context.Context, environ []string) []string {
	return telemetry.EnvFor(ctx, withoutOwnEnv(environ))
}

// withoutOwnEnv is environ without toolbus's own variables. It is never nil,
// so that it is never taken for "the caller's environment".
func withoutOwnEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !slices.ContainsFunc(ownEnv, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			out = append(out, kv)
		}
	}
	return out
}

// Close kills every background command and waits for it to end.
func (s *Shells) Close() {
	s.mu.Lock()
	s.closed = true
	bgs := make([]*background, 0, len(s.bg))
	for _, b := range s.bg {
		bgs = append(bgs, b)
	}
	s.mu.Unlock()
	for _, b := range bgs {
		b.kill()
		<-b.tree.Done()
		b.release()
	}
}

// process is one started command: bash, the leader of its process group,
// and every process it starts.
type process struct {
	tree           *proctree.Tree
	stdout, stderr *capped
}

// start starts bash -c line in dir, its output going to stdout and
// stderr. A background command (keep) outlives bash until its last
// process ends.
func (s *Shells) start(ctx context.Context, line, dir string, keep bool, stdout, stderr *capped) (*process, error) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, err
	}
	p := &process{stdout: stdout, stderr: stderr}
	p.tree, err = s.starter.Start(proctree.Command{Path: bash, Args: []string{"bash", "-c", line}, Dir: dir, Env: callEnv(ctx, os.Environ()),
		Stdout: p.stdout, Stderr: p.stderr, Keep: keep, Grace: killGrace})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// kill ends every process of the command: SIGTERM, then SIGKILL after the
// grace. It does not wait; p.tree.Done closes when they are gone.
func (p *process) kill() { p.tree.Stop() }

// --- run_shell_command -------------------------------------------------------

type runShell struct {
	spec   events.ToolSpec
	shells *Shells
}

type runShellArgs struct {
	Command         string `json:"command"`
	Description     string `json:"description"`
	Directory       string `json:"directory"`
	RunInBackground bool   `json:"run_in_background"`
}

func (t *runShell) Spec() events.ToolSpec { return t.spec }

// ValidateArgs implements tool.Validator.
func (t *runShell) ValidateArgs(args json.RawMessage) error {
	a, err := decode[runShellArgs](args)
	if err != nil {
		return err
	}
	if strings.TrimSpace(a.Command) == "" {
		return errors.New("command is empty")
	}
	return nil
}

// Look implements tool.LinkResolver.
func (t *runShell) Look(p string) (tool.File, error) { return t.shells.ws.Look(p) }

// Command implements tool.Commander.
func (t *runShell) Command(args json.RawMessage) (string, string) {
	a, _ := decode[runShellArgs](args)
	return a.Command, t.shells.ws.Abs(cmpOr(a.Directory, "."))
}

func (t *runShell) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[runShellArgs](call.Args)
	if err != nil {
		return nil, err
	}
	dir, err := t.shells.ws.Resolve(cmpOr(a.Directory, "."))
	if errors.Is(err, ErrOutsideWorkspace) {
		return tool.Failed(events.ErrPathNotInWorkspace, err.Error()), nil
	} else if err != nil {
		return tool.Failed(events.ErrInvalidParams, err.Error()), nil
	}
	if a.RunInBackground {
		return t.shells.runBackground(ctx, call.Owner(), a.Command, dir, call.MaxOutput)
	}
	stdout, stderr := streams(call.Progress, call.MaxOutput)
	defer stdout.release() // emptied when the output takes them over
	defer stderr.release()
	p, err := t.shells.start(ctx, a.Command, dir, false, stdout, stderr)
	if err != nil {
		return tool.Failed(events.ErrShellFailed, "could not start bash: "+err.Error()), nil
	}
	select {
	case <-p.tree.Done():
	case <-ctx.Done():
		p.kill()
		<-p.tree.Done()
		return nil, ctx.Err() // the executor reports TIMEOUT or CANCELLED
	}
	return shellOutput(a.Command, t.shells.ws.Rel(dir), p), nil
}

// --- background commands (seed 004 Bash / BashOutput / KillShell) -----------

type background struct {
	id, line, dir string
	owner         tool.Owner
	*process
}

func (s *Shells) runBackground(ctx context.Context, owner tool.Owner, line, dir string, maxOutput int64) (*tool.Output, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return tool.Failed(events.ErrShellFailed, "the executor is shutting down"), nil
	}
	stdout, stderr := streams(nil, maxOutput)
	p, err := s.start(ctx, line, dir, true, stdout, stderr)
	if err != nil {
		stdout.release()
		stderr.release()
		return tool.Failed(events.ErrShellFailed, "could not start bash: "+err.Error()), nil
	}
	id := shellIDPrefix + events.NewCapability()
	s.bg[id] = &background{id: id, line: line, dir: dir, owner: owner, process: p}
	msg := fmt.Sprintf("Started in the background with shell_id %s (PGID %d). Use shell_output to read its output and kill_shell to stop it and every process it started.", id, p.tree.Pid())
	return tool.Text(msg), nil
}

// shellIDPrefix starts every shell_id, so that a model tells it from
// the other ids it is shown.
const shellIDPrefix = "shell_"

// lookup is the background command id names, if call's caller started
// it. Any other caller is answered as for an id that names nothing.
func (s *Shells) lookup(call *tool.Call, id string) (*background, *tool.Output) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bg[id]
	if !ok || !b.owner.Owns(call) {
		return nil, noShell(id)
	}
	return b, nil
}

// noShell is the one answer to an id that names no background command
// of the caller's, whether it names none at all or another caller's.
func noShell(id string) *tool.Output {
	return tool.Failed(events.ErrInvalidParams, fmt.Sprintf("no background shell %q", id))
}

// forget drops a background command the model no longer needs to reach.
func (s *Shells) forget(id string) {
	s.mu.Lock()
	delete(s.bg, id)
	s.mu.Unlock()
}

type shellIDArgs struct {
	ShellID string `json:"shell_id"`
}

// backgroundTool is a tool acting on one background command, found by the
// shell_id run_shell_command gave: shell_output and kill_shell.
type backgroundTool struct {
	spec   events.ToolSpec
	shells *Shells
	act    func(s *Shells, b *background) *tool.Output
}

func (t *backgroundTool) Spec() events.ToolSpec { return t.spec }

func (t *backgroundTool) Run(_ context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[shellIDArgs](call.Args)
	if err != nil {
		return nil, err
	}
	b, fail := t.shells.lookup(call, a.ShellID)
	if fail != nil {
		return fail, nil
	}
	return t.act(t.shells, b), nil
}

// readBackground reports what a background command wrote since the last
// call, and forgets it once every process of it has ended and everything
// was read. It is running while any process it started runs, even after
// bash itself exited.
func readBackground(s *Shells, b *background) *tool.Output {
	status := "running"
	select {
	case <-b.tree.Done():
		status = exitText(b.tree.Wait())
		s.forget(b.id)
		defer b.release()
	default:
	}
	whole := tool.NewSpool()
	fmt.Fprintf(whole, "Shell %s (%s): %s\nStdout since last read: ", b.id, b.line, status)
	b.stdout.takeInto(whole)
	whole.WriteString("\nStderr since last read: ")
	b.stderr.takeInto(whole)
	head, _ := whole.Head(tool.SpoolHead)
	return spooled(whole, head)
}

// killBackground stops a background command and every process it started.
func killBackground(s *Shells, b *background) *tool.Output {
	b.kill()
	<-b.tree.Done()
	s.forget(b.id)
	b.release()
	return tool.Text(fmt.Sprintf("Killed shell %s (%s).", b.id, b.line))
}

// release frees what the command's output holds, once nothing will read it.
func (b *background) release() {
	b.stdout.release()
	b.stderr.release()
}

// exitText says how bash ended.
func exitText(ws syscall.WaitStatus, err error) string {
	switch {
	case err != nil:
		return "ended, status unknown: " + err.Error()
	case ws.Signaled():
		return "killed by signal " + ws.Signal().String()
	}
	return "exited with code " + fmt.Sprint(ws.ExitStatus())
}
