package discovery

import (
	"fmt"
	"sync"

	"github.com/toolbus/toolbus/internal/tool"
)

// What a call command prints is kept in bounded memory whatever its size,
// as the shell tool keeps it (internal/builtin/output.go): each stream
// goes to a tool.Spool (its head in memory, the rest in an unlinked
// temporary file), both streams together keep at most the call's
// MaxOutput bytes, and live output stops being copied once the executor
// wants no more of it.

// quota is what a call's output may still keep, shared by its stdout and
// its stderr.
type quota struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

func (q *quota) take(n int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	got := int(min(int64(n), max(q.limit-q.used, 0)))
	q.used += int64(got)
	return got
}

// stream is one output stream of a call: what the quota allows goes to
// its spool, each chunk goes live to progress while it wants them.
type stream struct {
	mu       sync.Mutex
	spool    *tool.Spool
	quota    *quota
	written  int64 // bytes the command wrote, kept or not
	progress func(string) bool
}

// streams returns the stdout and stderr of a call that keeps at most
// maxOutput bytes (0: tool.DefaultMaxOutput).
func streams(progress func(string) bool, maxOutput int64) (stdout, stderr *stream) {
	if maxOutput <= 0 {
		maxOutput = tool.DefaultMaxOutput
	}
	q := &quota{limit: maxOutput}
	return &stream{spool: tool.NewSpool(), quota: q, progress: progress},
		&stream{spool: tool.NewSpool(), quota: q, progress: progress}
}

func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spool.Write(p[:s.quota.take(len(p))])
	s.written += int64(len(p))
	// The chunk is copied into a string only while someone watches.
	if s.progress != nil && !s.progress(string(p)) {
		s.progress = nil
	}
	return len(p), nil
}

// empty reports whether the command wrote nothing to the stream.
func (s *stream) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written == 0
}

// moveInto moves what the stream kept to the end of whole, "(empty)" when
// the command wrote nothing, with a note of what was not kept.
func (s *stream) moveInto(whole *tool.Spool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == 0 {
		whole.WriteString("(empty)")
		return
	}
	kept, lost, lostErr := s.spool.Size(), s.spool.Lost(), s.spool.Err()
	whole.Append(s.spool)
	if dropped := s.written - kept - lost; dropped > 0 {
		fmt.Fprintf(whole, "\n[output truncated: %d bytes not kept; a call keeps at most %d bytes of output]", dropped, s.quota.limit)
	}
	if lostErr != nil {
		fmt.Fprintf(whole, "\n[%d bytes of output lost: %v]", lost, lostErr)
	}
}

// release frees the stream's spool.
func (s *stream) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spool.Close()
}

// spooled is the Output of whole: a plain one when it is small enough to
// hold in memory, else its head with the spool, which the executor then
// owns.
func spooled(whole *tool.Spool) *tool.Output {
	head, err := whole.Head(tool.SpoolHead)
	if err == nil && int64(len(head)) == whole.Size() {
		whole.Close()
		return tool.Text(head)
	}
	return &tool.Output{LLMContent: head, ReturnDisplay: head, Whole: whole}
}
