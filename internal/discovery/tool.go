package discovery

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/tool"
)

// Caller runs the calls of one discovered set (seed 001
// DiscoveredToolInvocation): the call command, split once, with the tool's
// name appended, started from the workspace root with the filtered
// environment, its own process group and process tree, the arguments as
// JSON on its stdin. It is safe for concurrent use.
type Caller struct {
	line    string   // the call command as configured
	words   []string // line, split
	dir     string
	env     []string
	starter *proctree.Starter
	now     func() time.Time
	// path is the executable the last call found for words[0], so that a
	// call checks that one file (still there, still executable) instead
	// of looking it up along PATH again, a stat for each directory before
	// it. A call that finds it gone or not executable looks it up anew.
	path atomic.Pointer[string]
}

// NewCaller returns a Caller of the call command line, run in dir with env
// (see FilterEnv), its process trees started by starter.
func NewCaller(line, dir string, env []string, starter *proctree.Starter) (*Caller, error) {
	words, err := SplitCommand(line)
	if err != nil {
		return nil, fmt.Errorf("tools.callCommand: %w", err)
	}
	if env == nil {
		env = []string{}
	}
	return &Caller{line: line, words: words, dir: dir, env: env, starter: starter, now: time.Now}, nil
}

// Tool is a discovered tool (seed 000 DiscoveredTool): kind other, source
// discovered, hosted by the executor whose workspace its commands run in.
// It records when it was last called, for the idle expiry.
type Tool struct {
	spec     events.ToolSpec
	caller   *Caller
	lastUsed atomic.Int64 // unix nanoseconds
}

var (
	_ tool.Tool   = (*Tool)(nil)
	_ tool.Origin = (*Tool)(nil)
)

// NewTool makes the tool of spec, a declaration ParseDeclarations gave,
// called through c. Its description is extended, as seed 000's is, with
// how it was found (discoveryLine) and how a call runs.
func (c *Caller) NewTool(spec events.ToolSpec, discoveryLine string) *Tool {
	// Only what a discovery command may say of a tool: its name, its
	// description and its parameters. Kind other, not read-only.
	spec = events.ToolSpec{Name: spec.Name, Kind: events.KindOther, Parameters: spec.Parameters,
		Description: describe(spec.Description, spec.Name, discoveryLine, c.line)}
	t := &Tool{spec: spec, caller: c}
	t.lastUsed.Store(c.now().UnixNano())
	return t
}

// describe is a discovered tool's description: its own, then how it came
// and how it runs, in the spirit of Gemini CLI's enhanced description, so
// that a model knows what a failure result looks like. Short: it is sent
// with every declaration, 10,000 times for 10,000 tools.
func describe(own, name, discoveryLine, callLine string) string {
	var b strings.Builder
	b.Grow(len(own) + len(name) + len(discoveryLine) + len(callLine) + 360)
	b.WriteString(own)
	if own != "" {
		b.WriteString("\n\n")
	}
	b.WriteString("Discovered by running `")
	b.WriteString(discoveryLine)
	b.WriteString("` in the project root. A call runs `")
	b.WriteString(callLine)
	b.WriteString(" ")
	b.WriteString(name)
	b.WriteString("` there, with the arguments as JSON on stdin, and returns its stdout. ")
	b.WriteString("If it fails (an exit code other than 0, a signal, or output on stderr), the result is five lines instead: ")
	b.WriteString("`Stdout:`, `Stderr:`, `Error:`, `Exit Code:` and `Signal:`, each `(empty)` or `(none)` when there is nothing to say.")
	return b.String()
}

// Spec implements tool.Tool.
func (t *Tool) Spec() events.ToolSpec { return t.spec }

// Origin implements tool.Origin: a discovered tool, of no server.
func (t *Tool) Origin() (events.Source, string, bool) { return events.SourceDiscovered, "", false }

// LastUsed is when the tool was last called, or made when it never was.
func (t *Tool) LastUsed() time.Time { return time.Unix(0, t.lastUsed.Load()) }

// stdinInline is how many bytes of arguments are written to the call's
// stdin before it starts: a pipe holds at least one page even when the
// user's pipe buffers are used up, so the write cannot block.
const stdinInline = 4 << 10

// Run implements tool.Tool: it runs the call command with the tool's
// name and the arguments on stdin, and returns its stdout, or the failure
// block of seed 000 with DISCOVERED_TOOL_EXECUTION_ERROR when the command
// could not start, exited non-zero, was killed by a signal or wrote
// anything to stderr. When ctx ends, every process of the call is killed
// and Run returns ctx's error (the executor reports TIMEOUT or CANCELLED).
func (t *Tool) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	c := t.caller
	t.lastUsed.Store(c.now().UnixNano())
	stdout, stderr := streams(call.Progress, call.MaxOutput)
	defer stdout.release() // emptied when the output takes them over
	defer stderr.release()

	cmd := &command{line: c.line, argv: append(c.words[:len(c.words):len(c.words)], t.spec.Name), dir: c.dir, env: c.env}
	var err error
	if cmd.path, err = c.executable(); err != nil {
		return failure(stdout, stderr, err, "(none)", "(none)"), nil
	}
	stdin, feed, err := stdinOf(call.Args)
	if err != nil {
		return failure(stdout, stderr, err, "(none)", "(none)"), nil
	}
	tree, err := c.starter.Start(proctree.Command{Path: cmd.path, Args: cmd.argv, Dir: cmd.dir, Env: cmd.env, Stdin: stdin,
		Stdout: stdout, Stderr: stderr, Grace: killGrace})
	stdin.Close() // the tree has its own
	if err != nil {
		feed.stop()
		return failure(stdout, stderr, fmt.Errorf("cannot start %s: %w", cmd.path, err), "(none)", "(none)"), nil
	}
	select {
	case <-tree.Done():
	case <-ctx.Done():
		tree.Stop()
		<-tree.Done()
		feed.stop()
		return nil, ctx.Err()
	}
	feed.stop()
	ws, werr := tree.Wait()
	switch {
	case werr != nil:
		return failure(stdout, stderr, werr, "(none)", "(none)"), nil
	case ws.Signaled():
		return failure(stdout, stderr, nil, "(none)", signalName(ws.Signal())), nil
	case ws.ExitStatus() != 0 || !stderr.empty():
		return failure(stdout, stderr, nil, fmt.Sprint(ws.ExitStatus()), "(none)"), nil
	}
	whole := tool.NewSpool()
	stdout.moveInto(whole)
	if stdout.empty() { // moveInto wrote "(empty)": a success prints nothing
		whole.Close()
		return tool.Text(""), nil
	}
	return spooled(whole), nil
}

// executable is the file the call command runs: the one the last call
// ran when it is still an executable file, else the one lookPath finds.
func (c *Caller) executable() (string, error) {
	if p := c.path.Load(); p != nil && executable(*p) == nil {
		return *p, nil
	}
	p, err := lookPath(c.words[0], c.dir, lookEnv(c.env, "PATH"))
	if err != nil {
		c.path.Store(nil)
		return "", err
	}
	c.path.Store(&p)
	return p, nil
}

// failure is seed 000's failure block: five lines, each part "(empty)" or
// "(none)" when there is nothing to say, as the result and as the error's
// message.
func failure(stdout, stderr *stream, err error, exit, signal string) *tool.Output {
	whole := tool.NewSpool()
	whole.WriteString("Stdout: ")
	stdout.moveInto(whole)
	whole.WriteString("\nStderr: ")
	stderr.moveInto(whole)
	errText := "(none)"
	if err != nil {
		errText = err.Error()
	}
	fmt.Fprintf(whole, "\nError: %s\nExit Code: %s\nSignal: %s", errText, exit, signal)
	out := spooled(whole)
	out.Err = &events.ToolError{Type: events.ErrDiscoveredToolExecution, Message: out.LLMContent}
	return out
}

// feeder writes arguments too long to write before the start into the
// call's stdin, on a goroutine of its own; stop ends it.
type feeder struct {
	w    *os.File
	done chan struct{}
}

// stdinOf is the read end of a pipe holding args, for the call's stdin.
// Arguments longer than stdinInline are written as the command reads
// them, by a feeder.
func stdinOf(args []byte) (*os.File, *feeder, error) {
	if len(args) <= stdinInline {
		return stdinInlined(args)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot make the pipe for the arguments: %w", err)
	}
	f := &feeder{w: w, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		io.Copy(w, bytes.NewReader(args))
		w.Close()
	}()
	return r, f, nil
}

// stop ends the feeder: a command that ended without reading all its
// arguments leaves the write blocked on a pipe nobody reads, and closing
// the pipe ends it.
func (f *feeder) stop() {
	if f == nil {
		return
	}
	f.w.Close()
	<-f.done
}
