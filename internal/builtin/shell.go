package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// killGrace is how long a cancelled command's process group has between
// SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

// Shells runs shell commands, each in its own process group, and owns the
// commands left running in the background. Close kills them all.
type Shells struct {
	ws *Workspace

	mu     sync.Mutex
	bg     map[string]*background
	closed bool
}

// NewShells returns a shell runner confined to ws.
func NewShells(ws *Workspace) *Shells {
	return &Shells{ws: ws, bg: make(map[string]*background)}
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
		<-b.done
		b.release()
	}
}

// process is one started command.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *capped
	done           chan struct{}
	err            error // from Wait, set before done closes
}

func (s *Shells) start(line, dir string, stdout, stderr *capped) (*process, error) {
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir = dir
	// Its own process group, so the whole tree can be signalled.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &process{cmd: cmd, stdout: stdout, stderr: stderr, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// kill stops the process group: SIGTERM, then SIGKILL after the grace.
func (p *process) kill() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(killGrace):
	}
	// The leader may be gone while children of the group live on.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

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

// RealPath implements tool.LinkResolver.
func (t *runShell) RealPath(p string) (string, error) { return t.shells.ws.RealPath(p) }

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
		return t.shells.runBackground(a.Command, dir, call.MaxOutput)
	}
	stdout, stderr := streams(call.Progress, call.MaxOutput)
	defer stdout.release() // emptied when the output takes them over
	defer stderr.release()
	p, err := t.shells.start(a.Command, dir, stdout, stderr)
	if err != nil {
		return tool.Failed(events.ErrShellFailed, "could not start bash: "+err.Error()), nil
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		<-p.done
		return nil, ctx.Err() // the executor reports TIMEOUT or CANCELLED
	}
	return shellOutput(a.Command, t.shells.ws.Rel(dir), p), nil
}

// --- background commands (seed 004 Bash / BashOutput / KillShell) -----------

type background struct {
	id, line, dir string
	*process
}

func (s *Shells) runBackground(line, dir string, maxOutput int64) (*tool.Output, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return tool.Failed(events.ErrShellFailed, "the executor is shutting down"), nil
	}
	stdout, stderr := streams(nil, maxOutput)
	p, err := s.start(line, dir, stdout, stderr)
	if err != nil {
		stdout.release()
		stderr.release()
		return tool.Failed(events.ErrShellFailed, "could not start bash: "+err.Error()), nil
	}
	id := "shell_" + nuid.Next() // whole: the first characters of nuids made together are the same
	s.bg[id] = &background{id: id, line: line, dir: dir, process: p}
	msg := fmt.Sprintf("Started in the background with shell_id %s (PGID %d). Use shell_output to read its output and kill_shell to stop it.", id, p.cmd.Process.Pid)
	return tool.Text(msg), nil
}

func (s *Shells) lookup(id string) (*background, *tool.Output) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bg[id]
	if !ok {
		return nil, tool.Failed(events.ErrInvalidParams, fmt.Sprintf("no background shell %q", id))
	}
	return b, nil
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
	b, fail := t.shells.lookup(a.ShellID)
	if fail != nil {
		return fail, nil
	}
	return t.act(t.shells, b), nil
}

// readBackground reports what a background command wrote since the last
// call, and forgets it once it has exited and everything was read.
func readBackground(s *Shells, b *background) *tool.Output {
	status := "running"
	select {
	case <-b.done:
		status = "exited with code " + fmt.Sprint(b.cmd.ProcessState.ExitCode())
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

// killBackground stops a background command and its whole process group.
func killBackground(s *Shells, b *background) *tool.Output {
	b.kill()
	<-b.done
	s.forget(b.id)
	b.release()
	return tool.Text(fmt.Sprintf("Killed shell %s (%s).", b.id, b.line))
}

// release frees what the command's output holds, once nothing will read it.
func (b *background) release() {
	b.stdout.release()
	b.stderr.release()
}
