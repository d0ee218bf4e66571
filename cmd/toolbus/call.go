package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/telemetry"
)

// callFailed carries a failed call's error type to the exit code.
type callFailed struct{ res *events.Result }

func (c callFailed) Error() string {
	return fmt.Sprintf("%s: %s", c.res.Error.Type, c.res.Error.Message)
}

func (c callFailed) ExitCode() int { return resultExitCode(c.res.Error.Type) }

func (c callFailed) ErrorType() string { return string(c.res.Error.Type) }

func (c callFailed) invocationID() string { return c.res.InvocationID }

// stoppedBy is the cause of a command's end by a signal: Ctrl-C
// (SIGINT), or SIGTERM. Its exit code is the shell's for a death by that
// signal, 128 + its number, so a script tells it from a failed call.
type stoppedBy struct{ sig syscall.Signal }

func (s stoppedBy) Error() string {
	if s.sig == syscall.SIGINT {
		return "cancelled by you"
	}
	return "cancelled: " + s.sig.String()
}

func (s stoppedBy) ExitCode() int { return 128 + int(s.sig) }

func (stoppedBy) ErrorType() string { return string(events.ErrCancelled) }

// errCallerTimeout is the cause of the end of a call's context when
// --timeout passed: the caller's deadline, not the executor's.
var errCallerTimeout = errors.New("--timeout passed")

// callContext is a context that ends, with a stoppedBy as its cause, at
// the first Ctrl-C or SIGTERM; a second one stops the command at once,
// as it would have with no handler.
func callContext() (context.Context, context.CancelFunc) {
	// The agent that runs the command names its span in TRACEPARENT:
	// the call is its child.
	ctx, cancel := context.WithCancelCause(telemetry.FromEnv(context.Background(), os.Getenv))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			if sig, ok := s.(syscall.Signal); ok {
				cancel(stoppedBy{sig})
			} else {
				cancel(stoppedBy{syscall.SIGINT})
			}
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// toolExited is the end of a call whose tool ran a command that exited
// non-zero: the tool did its work, and the command failed.
type toolExited struct{ res *events.Result }

func (e toolExited) Error() string {
	return fmt.Sprintf("%s: the command exited with status %d", e.res.Tool, *e.res.ExitCode)
}

func (toolExited) ExitCode() int { return exitFailure }

func (toolExited) ErrorType() string { return "EXIT_STATUS" }

func (e toolExited) invocationID() string { return e.res.InvocationID }

func newCallCommand() *cobra.Command {
	var (
		argsJSON, id, workspace string
		asJSON, stream          bool
		timeout                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "call NAME [--args JSON]",
		Short: "Run a tool",
		Long: `Runs the tool NAME through the bus, as an agent's call runs: the policy judges
it, an approver answers when the policy asks (the command says that it
waits), and the audit trail records it.

The tool's output goes to stdout. The exit code says how the call ended (see
'Exit codes' in docs/cli.md): 0 it ran, 1 it failed (a shell command that
exited non-zero included), 4 it was denied, 124 a deadline passed, 130 it
was cancelled (Ctrl-C, or toolbus cancel).`,
		Example: `  toolbus call read_file --args '{"file_path": "README.md"}'
  toolbus call run_shell_command --args '{"command": "go test ./..."}' --stream --timeout 10m

  # The whole result as JSON, and the call's id, for toolbus cancel.
  toolbus call glob --args '{"pattern": "**/*.go"}' --json --id my-call-1`,
		ValidArgsFunction: completeToolName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("call takes one tool name")}
			}
			if err := jsonAt(argsJSON); err != nil {
				return usageError{fmt.Errorf("--args is not valid JSON: %w", err)}
			}
			if workspace == "" {
				workspace = os.Getenv("TOOLBUS_WORKSPACE")
			}
			return runCall(busURLFor(cmd), &events.Invocation{Header: events.Header{ID: id}, Tool: args[0], Args: json.RawMessage(argsJSON), Workspace: workspace},
				timeout, stream, asJSON)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&argsJSON, "args", "{}", "the arguments, a `JSON` object")
	fs.BoolVar(&asJSON, "json", false, "print the whole result as JSON")
	fs.DurationVar(&timeout, "timeout", 0, "give up (and cancel the call) after this long, a wait for approval included; it is also the tool's deadline once it runs (default: the executor's deadlines)")
	fs.BoolVar(&stream, "stream", false, "print output to stderr as the tool produces it")
	fs.StringVar(&id, "id", "", "the invocation id, for toolbus cancel (default: a new unique one)")
	fs.StringVar(&workspace, "workspace", "", "the workspace a file or shell tool acts on, as its executors name it (default $TOOLBUS_WORKSPACE, else the one there is)")
	return cmd
}

// runCall makes the call inv on the bus at natsURL and prints its result.
func runCall(natsURL string, inv *events.Invocation, timeout time.Duration, stream, asJSON bool) error {
	ctx, stop := callContext()
	defer stop()
	var due time.Time // when --timeout passes
	if timeout > 0 {
		// The executor enforces the deadline and reports TIMEOUT itself,
		// having stopped the tool; the command waits a little longer for
		// that result before giving up on its own.
		due = time.Now().Add(timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, due.Add(3*time.Second), errCallerTimeout)
		defer cancel()
	}
	res, err := callTool(ctx, natsURL, inv, timeout, due, stream)
	var sig stoppedBy
	if errors.As(context.Cause(ctx), &sig) && (err != nil || res.Error != nil) {
		// The call ended because the person stopped it: say so, not what
		// the call's end looks like from the bus.
		return sig
	}
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(os.Stdout, res); err != nil {
			return err
		}
	} else if res.Error == nil {
		fmt.Print(res.LLMContent)
		if len(res.LLMContent) > 0 && res.LLMContent[len(res.LLMContent)-1] != '\n' {
			fmt.Println()
		}
	}
	switch {
	case res.Error != nil:
		if res.Error.Type == events.ErrTimeout && errors.Is(context.Cause(ctx), errCallerTimeout) && res.Sender.Role != "executor" {
			// The command gave up, not the executor: say whose
			// deadline it was (the executor's say so themselves).
			res.Error.Message = fmt.Sprintf("the caller's --timeout of %s passed before the call ended, so it was cancelled", timeout)
		}
		return callFailed{res}
	case res.ExitCode != nil && *res.ExitCode != 0:
		return toolExited{res}
	}
	return nil
}

// callTool connects to the bus at natsURL and makes the call inv, printing to
// stderr that it waits for approval when it does (and the tool's output
// as it comes, with stream). timeout is the call's own deadline (0: the
// executor's), due when it passes (zero: never).
func callTool(ctx context.Context, natsURL string, inv *events.Invocation, timeout time.Duration, due time.Time, stream bool) (*events.Result, error) {
	log, _ := cli.Logger("warn")
	connectCtx, cancelConnect := context.WithTimeout(ctx, 30*time.Second)
	b, err := cli.Connect(connectCtx, natsURL, "toolbus-call", log)
	cancelConnect()
	if err != nil {
		return nil, err
	}
	defer cli.Close(b)
	client := invoke.NewClient(b.Conn(), cli.Identity("cli"), b.Principal())
	defer client.Close()
	if err := client.Ping(ctx); err != nil {
		return nil, err
	}
	w := &invoke.Watch{Waiting: func(n *invoke.Waiting) { fmt.Fprintln(os.Stderr, "toolbus: "+waitingLine(n, due, time.Now())) },
		Queued: func(q *events.Queued) { fmt.Fprintln(os.Stderr, "toolbus: "+invoke.QueuedMessage(q)) }}
	if stream {
		w.Progress = func(s string) { fmt.Fprint(os.Stderr, s) }
	}
	if timeout > 0 {
		inv.TimeoutMillis = timeout.Milliseconds()
	}
	return client.InvokeWatch(ctx, inv, w)
}

// waitingLine says that a call waits for approval, how long it may, and
// where it is approved; when the caller's --timeout (due) ends the wait
// before the executor's confirmation deadline, that is the time left,
// and the line says so.
func waitingLine(n *invoke.Waiting, due, now time.Time) string {
	if due.IsZero() || !due.Before(n.Deadline) {
		return n.Message(now)
	}
	m := *n
	m.Deadline = due
	return m.Message(now) + " (your --timeout ends the wait first)"
}

// jsonAt says where text stops being JSON: the line and column (in
// bytes, from 1) and what is wrong there, with the line and a caret under
// the place; nil for JSON.
func jsonAt(text string) error {
	var v any
	err := json.Unmarshal([]byte(text), &v)
	var syn *json.SyntaxError
	if err == nil || !errors.As(err, &syn) {
		return err
	}
	off := min(int(syn.Offset), len(text))
	if off > 0 && syn.Offset <= int64(len(text)) && !strings.HasPrefix(syn.Error(), "unexpected end") {
		off-- // Offset is just past the byte that broke it
	}
	before := text[:off]
	line := 1 + strings.Count(before, "\n")
	start := strings.LastIndexByte(before, '\n') + 1
	end := strings.IndexByte(text[start:], '\n')
	if end < 0 {
		end = len(text) - start
	}
	col := off - start + 1
	return fmt.Errorf("line %d, column %d: %s\n  %s\n  %s^", line, col, syn.Error(), text[start:start+end], strings.Repeat(" ", col-1))
}
