package builtin

import (
	"bytes"
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

// maxShellOutput bounds what one command's stream is kept of in memory.
const maxShellOutput = 64 << 20

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
	}
}

// process is one started command.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *capped
	done           chan struct{}
	err            error // from Wait, set before done closes
}

func (s *Shells) start(line, dir string, progress func(string)) (*process, error) {
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir = dir
	// Its own process group, so the whole tree can be signalled.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &process{cmd: cmd, stdout: &capped{progress: progress}, stderr: &capped{progress: progress}, done: make(chan struct{})}
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

// capped is an io.Writer that keeps at most maxShellOutput bytes.
type capped struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
	progress  func(string)
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := maxShellOutput - c.buf.Len(); room < len(p) {
		c.buf.Write(p[:max(room, 0)])
		c.truncated = true
	} else {
		c.buf.Write(p)
	}
	if c.progress != nil {
		c.progress(string(p))
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	if c.truncated {
		s += fmt.Sprintf("\n[output truncated at %d bytes]", maxShellOutput)
	}
	return s
}

// take returns what was written since the last take.
func (c *capped) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	c.buf.Reset()
	return s
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
		return t.shells.runBackground(a.Command, dir)
	}
	p, err := t.shells.start(a.Command, dir, call.Progress)
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

// shellOutput formats a finished command the way Gemini CLI does.
func shellOutput(line, dir string, p *process) *tool.Output {
	exit, signal, errText := "(none)", "(none)", "(none)"
	if st := p.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			signal = ws.Signal().String()
		} else {
			exit = fmt.Sprint(st.ExitCode())
		}
	}
	var exitErr *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exitErr) {
		errText = p.err.Error()
	}
	stdout, stderr := p.stdout.String(), p.stderr.String()
	content := fmt.Sprintf("Command: %s\nDirectory: %s\nStdout: %s\nStderr: %s\nError: %s\nExit Code: %s\nSignal: %s\nProcess Group PGID: %d",
		line, dir, orEmpty(stdout), orEmpty(stderr), errText, exit, signal, p.cmd.Process.Pid)
	display := stdout + stderr
	if display == "" {
		display = fmt.Sprintf("(no output; exit code %s)", exit)
	}
	return &tool.Output{LLMContent: content, ReturnDisplay: display}
}

func orEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}

// --- background commands (seed 004 Bash / BashOutput / KillShell) -----------

type background struct {
	id, line, dir string
	*process
}

func (s *Shells) runBackground(line, dir string) (*tool.Output, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return tool.Failed(events.ErrShellFailed, "the executor is shutting down"), nil
	}
	p, err := s.start(line, dir, nil)
	if err != nil {
		return tool.Failed(events.ErrShellFailed, "could not start bash: "+err.Error()), nil
	}
	id := "shell_" + nuid.Next()[:10]
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
	act    func(s *Shells, b *background) string
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
	return tool.Text(t.act(t.shells, b)), nil
}

// readBackground reports what a background command wrote since the last
// call, and forgets it once it has exited and everything was read.
func readBackground(s *Shells, b *background) string {
	status := "running"
	select {
	case <-b.done:
		status = "exited with code " + fmt.Sprint(b.cmd.ProcessState.ExitCode())
		s.forget(b.id)
	default:
	}
	return fmt.Sprintf("Shell %s (%s): %s\nStdout since last read: %s\nStderr since last read: %s", b.id, b.line, status, orEmpty(b.stdout.take()), orEmpty(b.stderr.take()))
}

// killBackground stops a background command and its whole process group.
func killBackground(s *Shells, b *background) string {
	b.kill()
	<-b.done
	s.forget(b.id)
	return fmt.Sprintf("Killed shell %s (%s).", b.id, b.line)
}
