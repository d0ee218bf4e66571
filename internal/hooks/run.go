package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/telemetry"
)

// SecretEnvPrefixes are the variables of the executor's environment that a
// hook does not get: the executor's own secrets (TOOLBUS_NATS may hold
// credentials, TOOLBUS_*_TOKEN are tokens) and NATS client settings
// (NATS_CREDS, NATS_USER, NATS_PASSWORD, NATS_TOKEN, NATS_NKEY…).
var SecretEnvPrefixes = []string{"TOOLBUS_", "NATS_"}

// killGrace is how long a hook's processes have between SIGTERM and
// SIGKILL when it is stopped.
const killGrace = time.Second

// Runner runs hooks: commands with bash -c from the workspace root, each
// in a process tree of its own (internal/proctree) that ends as a whole
// when the hook exits, runs out of time, prints too much or its call is
// cancelled. A hook's code usually lives in the workspace (a formatter
// script, a lint script), where the agent can edit it, so a hook is
// confined as any tool process is: it runs through the starter the
// executor starts every process with. Safe for concurrent use.
type Runner struct {
	bash      string
	workspace string
	env       []string
	starter   *proctree.Starter
}

// NewRunner returns a Runner for hooks run from workspace through
// starter, with the environment of this process but for
// SecretEnvPrefixes, plus CLAUDE_PROJECT_DIR and GEMINI_PROJECT_DIR
// naming the workspace, as the agents set them. The starter stays the
// caller's to close; without one, a command hook fails to start
// (proctree.ErrNoConfinement) and only Func hooks run.
func NewRunner(workspace string, starter *proctree.Starter) (*Runner, error) {
	if starter == nil {
		starter = new(proctree.Starter)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("hooks: hooks are shell commands, and bash is not found: %w", err)
	}
	return &Runner{bash: bash, workspace: workspace, env: hookEnv(os.Environ(), workspace), starter: starter}, nil
}

func hookEnv(environ []string, workspace string) []string {
	env := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		secret := false
		for _, p := range SecretEnvPrefixes {
			secret = secret || strings.HasPrefix(strings.ToUpper(name), p)
		}
		if !secret && name != "CLAUDE_PROJECT_DIR" && name != "GEMINI_PROJECT_DIR" {
			env = append(env, kv)
		}
	}
	return append(env, "CLAUDE_PROJECT_DIR="+workspace, "GEMINI_PROJECT_DIR="+workspace)
}

// Run runs h for in and returns what came of it. It returns when the hook
// and every process it started have ended: on its own, at its timeout, or
// when ctx ends (the Outcome then has a Failure saying so).
func (r *Runner) Run(ctx context.Context, h *Hook, in *Input) Outcome {
	start := time.Now()
	var o Outcome
	if h.Func != nil {
		o = runFunc(ctx, h, in)
	} else {
		o = r.runCommand(ctx, h, in)
	}
	o.Duration = time.Since(start)
	return o
}

func runFunc(ctx context.Context, h *Hook, in *Input) (o Outcome) {
	ctx, cancel := context.WithTimeoutCause(ctx, h.timeout(), errTimedOut)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			o = Outcome{Failure: fmt.Sprintf("crashed: %v", p), ExitCode: -1}
		}
	}()
	o = h.Func(ctx, in)
	o.ExitCode = -1
	o.Message, o.Context = cut(o.Message, MaxMessage), cut(o.Context, MaxContext)
	if o.Failure == "" && ctx.Err() != nil {
		o = stopped(ctx, h, o)
	}
	return o
}

func (r *Runner) runCommand(ctx context.Context, h *Hook, in *Input) Outcome {
	failed := func(format string, args ...any) Outcome {
		return Outcome{Failure: fmt.Sprintf(format, args...), ExitCode: -1}
	}
	data, err := encodeInput(h.Dialect, in)
	if err != nil {
		return failed("its input does not encode: %v", err)
	}
	if ctx.Err() != nil {
		return failed("not run: %v", context.Cause(ctx))
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return failed("could not start: %v", err)
	}
	overflow := make(chan struct{})
	var once sync.Once
	tooMuch := func() { once.Do(func() { close(overflow) }) }
	stdout, stderr := &capped{limit: MaxOutput, full: tooMuch}, &capped{limit: MaxOutput, full: tooMuch}
	tree, err := r.starter.Start(proctree.Command{Path: r.bash, Args: []string{"bash", "-c", h.Command}, Dir: r.workspace,
		Env: telemetry.EnvFor(ctx, r.env), Stdin: stdinR, Stdout: stdout, Stderr: stderr, Grace: killGrace})
	stdinR.Close() // the hook has its own
	if err != nil {
		stdinW.Close()
		return failed("could not start: %v", err)
	}
	// The input is written while the hook runs: a hook that reads it
	// late, or never, cannot hold the writer beyond the hook's end.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		stdinW.Write(data) // a hook that exits unread gives EPIPE: not its failure
		stdinW.Close()
	}()
	ctx, cancel := context.WithTimeoutCause(ctx, h.timeout(), errTimedOut)
	defer cancel()
	ranOut, ended := false, false
	select {
	case <-tree.Done():
	case <-ctx.Done():
		ended = true
		tree.Stop()
		<-tree.Done()
	case <-overflow:
		ranOut = true
		tree.Stop()
		<-tree.Done()
	}
	stdinW.SetWriteDeadline(time.Now()) // frees the writer, should anything still hold the pipe
	<-wrote
	status, err := tree.Wait()
	switch {
	case ranOut:
		return failed("printed more than %d bytes and was killed", MaxOutput)
	case ended:
		return stopped(ctx, h, Outcome{ExitCode: -1})
	case err != nil:
		return failed("its end is unknown: %v", err)
	case status.Signaled():
		return failed("was killed by signal %v", status.Signal())
	}
	return Interpret(in.Event, status.ExitStatus(), stdout.bytes(), stderr.bytes())
}

// errTimedOut ends a hook's context at its timeout.
var errTimedOut = errors.New("the hook's timeout")

// stopped is the Outcome of a hook whose context ended before it did.
func stopped(ctx context.Context, h *Hook, o Outcome) Outcome {
	o.Decision = None
	if errors.Is(context.Cause(ctx), errTimedOut) {
		o.TimedOut = true
		o.Failure = fmt.Sprintf("did not finish within %s and was killed", h.timeout())
		return o
	}
	o.Failure = fmt.Sprintf("was stopped: %v", context.Cause(ctx))
	return o
}

// capped keeps the first limit bytes written to it and calls full once
// when more come; it takes (and drops) whatever comes after, so the
// writer is never blocked.
type capped struct {
	mu    sync.Mutex
	buf   []byte
	limit int
	full  func()
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	room := c.limit - len(c.buf)
	if len(p) <= room {
		c.buf = append(c.buf, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.buf = append(c.buf, p[:max(room, 0)]...)
	c.mu.Unlock()
	c.full()
	return len(p), nil
}

func (c *capped) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf
}
