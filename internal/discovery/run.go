package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/proctree"
)

// MaxDiscoveryOutput is how many bytes the discovery command may write to
// each of stdout and stderr (Gemini CLI's 10 MB): past it, the command and
// every process it started are killed and the discovery fails.
const MaxDiscoveryOutput = 10 << 20

// DiscoveryTimeout bounds one run of the discovery command.
const DiscoveryTimeout = 2 * time.Minute

// killGrace is how long the processes of a command being stopped have
// between SIGTERM and SIGKILL. Shorter than the executor's stop grace (2
// s), so that a cancelled call's tree is gone before the executor stops
// waiting for it.
const killGrace = time.Second

// stderrShown is how much of a failed discovery command's stderr its
// error quotes.
const stderrShown = 4 << 10

// command is a command line ready to start: its words, the executable
// they name, the directory it runs in and its environment.
type command struct {
	line string
	argv []string
	path string
	dir  string
	env  []string
}

// prepare splits line and finds its executable: a word with a slash is a
// path, relative to dir (where the command runs, not where the executor
// was started); a bare name is looked up in the PATH of env, skipping
// relative entries, which would name files of the project.
func prepare(line, dir string, env []string) (*command, error) {
	argv, err := SplitCommand(line)
	if err != nil {
		return nil, err
	}
	c := &command{line: line, argv: argv, dir: dir, env: env}
	c.path, err = lookPath(argv[0], dir, lookEnv(env, "PATH"))
	if err != nil {
		return nil, err
	}
	return c, nil
}

func lookPath(name, dir, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if err := executable(name); err != nil {
			return "", fmt.Errorf("cannot run %s: %w", name, err)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(d) {
			continue
		}
		if p := filepath.Join(d, name); executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("cannot run %s: not found in PATH (%s)", name, pathEnv)
}

func executable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case fi.IsDir():
		return errors.New("is a directory")
	case fi.Mode().Perm()&0o111 == 0:
		return errors.New("permission denied: not executable")
	}
	return nil
}

// start starts c as a process tree with stdin (nil: /dev/null).
func (c *command) start(starter *proctree.Starter, stdin *os.File, stdout, stderr *capWriter) (*proctree.Tree, error) {
	return starter.Start(proctree.Command{Path: c.path, Args: c.argv, Dir: c.dir, Env: c.env, Stdin: stdin,
		Stdout: stdout, Stderr: stderr, Grace: killGrace})
}

// capWriter keeps at most limit bytes written to it and drops the rest,
// closing over the first time a write would pass the limit. A tree's
// output goroutine is its only writer.
type capWriter struct {
	buf   bytes.Buffer
	limit int
	over  chan struct{}
	once  sync.Once
}

func newCapWriter(limit int, over chan struct{}) *capWriter {
	return &capWriter{limit: limit, over: over}
}

func (w *capWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.limit {
		w.once.Do(func() { close(w.over) })
		w.buf.Write(p[:w.limit-w.buf.Len()])
		return len(p), nil // drained, so that the writer is not stuck before it is killed
	}
	w.buf.Write(p)
	return len(p), nil
}

// exceeded reports whether more than limit bytes were written.
func (w *capWriter) exceeded() bool {
	select {
	case <-w.over:
		return true
	default:
		return false
	}
}

// runDiscovery runs the discovery command c to its end and returns its
// stdout and stderr. It fails, saying why with a cut of stderr, when the
// command cannot start, writes more than MaxDiscoveryOutput to either
// stream, exits non-zero, is killed by a signal, or ctx ends; the
// command's processes are gone when it returns.
func runDiscovery(ctx context.Context, starter *proctree.Starter, c *command) (stdout, stderr []byte, err error) {
	outOver, errOver := make(chan struct{}), make(chan struct{})
	out, errw := newCapWriter(MaxDiscoveryOutput, outOver), newCapWriter(MaxDiscoveryOutput, errOver)
	tree, err := c.start(starter, nil, out, errw)
	if err != nil {
		return nil, nil, fmt.Errorf("the discovery command `%s` could not start: %w", c.line, err)
	}
	var stopped error
	select {
	case <-tree.Done():
	case <-outOver:
		stopped = limitError("stdout")
	case <-errOver:
		stopped = limitError("stderr")
	case <-ctx.Done():
		stopped = fmt.Errorf("the discovery command `%s` was stopped: %w", c.line, context.Cause(ctx))
	}
	if stopped != nil {
		tree.Stop()
	}
	ws, werr := tree.Wait()
	stdout, stderr = out.buf.Bytes(), errw.buf.Bytes()
	switch {
	case stopped != nil:
		err = stopped
	case out.exceeded(): // the limit was passed as the command ended
		err = limitError("stdout")
	case errw.exceeded():
		err = limitError("stderr")
	case werr != nil:
		err = fmt.Errorf("the discovery command `%s` ended with an unknown status: %v", c.line, werr)
	case ws.Signaled():
		err = fmt.Errorf("the discovery command `%s` was killed by signal %s", c.line, signalName(ws.Signal()))
	case ws.ExitStatus() != 0:
		err = fmt.Errorf("the discovery command `%s` failed with exit code %d", c.line, ws.ExitStatus())
	default:
		return stdout, stderr, nil
	}
	return stdout, stderr, fmt.Errorf("%w; stderr: %s", err, cut(stderr, stderrShown))
}

func limitError(stream string) error {
	return fmt.Errorf("the discovery command wrote more than %d bytes (10 MiB) to %s, the most a discovery may write to each stream; it was killed", MaxDiscoveryOutput, stream)
}

// signalName is a signal's name as Node.js gives it to Gemini CLI:
// SIGTERM, SIGKILL.
func signalName(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(s))
}

// cut is at most n bytes of b as text, "(empty)" when there are none.
func cut(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "(empty)"
	}
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	head := b[:n]
	for i := 0; i < utf8.UTFMax-1 && len(head) > 0; i++ { // not in the middle of a character
		if r, size := utf8.DecodeLastRune(head); r != utf8.RuneError || size != 1 {
			break
		}
		head = head[:len(head)-1]
	}
	return fmt.Sprintf("%s… (%d more bytes)", strings.ToValidUTF8(string(head), "\uFFFD"), len(b)-len(head))
}

// found is what a successful discovery found.
type found struct {
	specs    []events.ToolSpec
	warnings []string
	at       time.Time
	// key is what the result depends on: the command and its
	// environment. A cached result of another key is not used.
	key string
}

// discover runs the discovery command line in dir with env and parses what
// it printed.
func discover(ctx context.Context, starter *proctree.Starter, line, dir string, env []string) (*found, error) {
	c, err := prepare(line, dir, env)
	if err != nil {
		return nil, fmt.Errorf("tools.discoveryCommand: %w", err)
	}
	stdout, stderr, err := runDiscovery(ctx, starter, c)
	if err != nil {
		return nil, err
	}
	specs, warnings, err := ParseDeclarations(stdout)
	if err != nil {
		return nil, fmt.Errorf("%w; stderr: %s", err, cut(stderr, stderrShown))
	}
	if len(stderr) > 0 {
		warnings = append(warnings, "the discovery command wrote to stderr: "+cut(stderr, stderrShown))
	}
	return &found{specs: specs, warnings: warnings}, nil
}
