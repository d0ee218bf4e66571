package builtin

import (
	"fmt"
	"sync"

	"github.com/toolbus/toolbus/internal/tool"
)

// What a command prints is kept in bounded memory whatever its size: each
// stream goes to a tool.Spool (its head in memory, the rest in an
// unlinked temporary file), both streams together keep at most the call's
// MaxOutput bytes, and live output stops being copied once the executor
// wants no more of it.

// quota is what a command's output may still keep, shared by its stdout
// and its stderr.
type quota struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

// take claims up to n bytes and returns how many it got.
func (q *quota) take(n int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	got := int(min(int64(n), max(q.limit-q.used, 0)))
	q.used += int64(got)
	return got
}

// give returns n bytes that are no longer held.
func (q *quota) give(n int64) {
	q.mu.Lock()
	q.used = max(q.used-n, 0)
	q.mu.Unlock()
}

// capped is one stream of a command: an io.Writer that keeps what the
// quota allows in a spool and forwards the rest of its chunks live for as
// long as progress wants them.
type capped struct {
	mu       sync.Mutex
	spool    *tool.Spool
	quota    *quota
	dropped  int64 // bytes over the quota, not kept
	progress func(string) bool
}

// streams returns the stdout and stderr of a command whose call keeps at
// most maxOutput bytes (0: tool.DefaultMaxOutput).
func streams(progress func(string) bool, maxOutput int64) (stdout, stderr *capped) {
	if maxOutput <= 0 {
		maxOutput = tool.DefaultMaxOutput
	}
	q := &quota{limit: maxOutput}
	return &capped{spool: tool.NewSpool(), quota: q, progress: progress},
		&capped{spool: tool.NewSpool(), quota: q, progress: progress}
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.quota.take(len(p))
	c.spool.Write(p[:keep])
	c.dropped += int64(len(p) - keep)
	// The chunk is copied into a string only while someone watches.
	if c.progress != nil && !c.progress(string(p)) {
		c.progress = nil
	}
	return len(p), nil
}

// head is the first n bytes kept, for display.
func (c *capped) head(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, _ := c.spool.Head(n)
	return s
}

// takeInto moves what the stream kept since the last take to the end of
// whole, with a note of what was not kept, and gives its room back to the
// quota: a background command keeps at most the quota between two reads.
func (c *capped) takeInto(whole *tool.Spool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	size := c.spool.Size()
	if size == 0 && c.dropped == 0 && c.spool.Err() == nil {
		whole.WriteString("(empty)")
		return
	}
	lost, lostErr := c.spool.Lost(), c.spool.Err()
	whole.Append(c.spool)
	c.quota.give(size)
	if c.dropped > 0 {
		fmt.Fprintf(whole, "\n[output truncated: %d bytes not kept; a call keeps at most %d bytes of output]", c.dropped, c.quota.limit)
	}
	if lostErr != nil {
		fmt.Fprintf(whole, "\n[%d bytes of output lost: %v]", lost, lostErr)
	}
	c.spool, c.dropped = tool.NewSpool(), 0
}

// release frees the stream's spool.
func (c *capped) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spool.Close()
}

// shellOutput formats a finished command the way Gemini CLI does. The
// streams' spools move into the output, so a large one is never copied
// into memory.
func shellOutput(line, dir string, p *process) *tool.Output {
	exit, signal, errText := "(none)", "(none)", "(none)"
	var status *int // as a shell reports it
	if ws, err := p.tree.Wait(); err != nil {
		errText = err.Error()
	} else if ws.Signaled() {
		signal = ws.Signal().String()
		status = new(128 + int(ws.Signal()))
	} else {
		exit = fmt.Sprint(ws.ExitStatus())
		status = new(ws.ExitStatus())
	}
	display := p.stdout.head(tool.SpoolHead/2) + p.stderr.head(tool.SpoolHead/2)
	if display == "" {
		display = fmt.Sprintf("(no output; exit code %s)", exit)
	}
	whole := tool.NewSpool()
	fmt.Fprintf(whole, "Command: %s\nDirectory: %s\nStdout: ", line, dir)
	p.stdout.takeInto(whole)
	whole.WriteString("\nStderr: ")
	p.stderr.takeInto(whole)
	fmt.Fprintf(whole, "\nError: %s\nExit Code: %s\nSignal: %s\nProcess Group PGID: %d", errText, exit, signal, p.tree.Pid())
	out := spooled(whole, display)
	out.ExitCode = status
	return out
}

// spooled is the Output of whole: a plain one when whole is small enough
// to hold in memory, else its head with the spool.
func spooled(whole *tool.Spool, display string) *tool.Output {
	head, err := whole.Head(tool.SpoolHead)
	if err == nil && int64(len(head)) == whole.Size() {
		whole.Close()
		return &tool.Output{LLMContent: head, ReturnDisplay: display}
	}
	return &tool.Output{LLMContent: head, ReturnDisplay: display, Whole: whole}
}

// textOutput is the Output of head followed by body, text a tool read
// whole (a file): a plain one when it is small, else spooled, so that
// the output holds its head in memory, not body, while the executor
// stores it.
func textOutput(head, body []byte, display string) *tool.Output {
	if len(head)+len(body) <= tool.SpoolHead {
		return &tool.Output{LLMContent: string(head) + string(body), ReturnDisplay: display}
	}
	whole := tool.NewSpool()
	whole.Write(head)
	whole.Write(body)
	if whole.Err() != nil {
		// No room for the temporary file: memory it is, rather than a
		// file read in part.
		whole.Close()
		return &tool.Output{LLMContent: string(head) + string(body), ReturnDisplay: display}
	}
	return spooled(whole, display)
}
