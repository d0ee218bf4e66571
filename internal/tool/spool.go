package tool

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
)

// SpoolHead is how much of a Spool is kept in memory: enough for the
// 40,000-character cap of a result even at four bytes a character. What
// comes after it goes to a temporary file.
const SpoolHead = 256 << 10

// SpoolFilePrefix starts the name of a Spool's file where it has one: a
// memory file's (Linux, where the temp dir cannot hold unnamed files),
// or elsewhere than Linux a temporary file's for the moment between its
// creation and its unlinking.
const SpoolFilePrefix = "toolbus-output-"

// Spool holds output that may be too large for memory: the first
// SpoolHead bytes in memory, the rest in an unnamed file, so that a call
// whose tool prints 300 MB holds a few hundred KB. The file never has a
// name (spool_linux.go): a tool process watching the temp dirs, which it
// may read, has nothing to open, so it cannot read another call's
// output. It bounds
// memory, not size: the tool bounds what it writes (Call.MaxOutput).
//
// Whoever holds a Spool closes it, which releases the file; a tool that
// returns one in Output.Whole hands it to the executor, which stores it
// and closes it whatever becomes of the call. A Spool is safe for
// concurrent use.
type Spool struct {
	mu     sync.Mutex
	parts  []spoolPart
	size   int64 // bytes kept
	inMem  int   // bytes of parts held in memory
	lost   int64 // bytes written but not kept, after a file error
	err    error // why bytes were lost
	closed bool
}

// spoolPart is a run of a Spool's bytes: in memory, or the first n bytes
// of an unlinked file the Spool owns.
type spoolPart struct {
	mem  []byte
	file *os.File
	n    int64
}

// NewSpool returns an empty Spool.
func NewSpool() *Spool { return &Spool{} }

// Write keeps p. It never fails, so a command writing into a Spool is not
// stopped by it: bytes that cannot be kept (no room for the temporary
// file) are counted in Lost and the reason is in Err. Writes after Close
// are dropped.
func (s *Spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(p)
	return len(p), nil
}

// WriteString is Write for a string, without converting it first.
func (s *Spool) WriteString(str string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	written := len(str)
	for len(str) > 0 {
		n := min(len(str), 32<<10)
		s.write([]byte(str[:n])) // small pieces: the conversion copies
		str = str[n:]
	}
	return written, nil
}

func (s *Spool) write(p []byte) {
	if s.closed || len(p) == 0 {
		return
	}
	if s.err != nil {
		s.lost += int64(len(p))
		return
	}
	if room := SpoolHead - s.inMem; room > 0 {
		n := min(room, len(p))
		last := len(s.parts) - 1
		if last < 0 || s.parts[last].file != nil {
			s.parts = append(s.parts, spoolPart{})
			last++
		}
		s.parts[last].mem = append(s.parts[last].mem, p[:n]...)
		s.inMem += n
		s.size += int64(n)
		p = p[n:]
		if len(p) == 0 {
			return
		}
	}
	last := len(s.parts) - 1
	if last < 0 || s.parts[last].file == nil {
		f, err := tempFile()
		if err != nil {
			s.err, s.lost = err, int64(len(p))
			return
		}
		s.parts = append(s.parts, spoolPart{file: f})
		last = len(s.parts) - 1
	}
	part := &s.parts[last]
	n, err := part.file.Write(p)
	part.n += int64(n)
	s.size += int64(n)
	if err != nil {
		s.err, s.lost = err, int64(len(p)-n)
	}
}

// Append moves what other holds to the end of s, without copying its
// file: other is left empty, and s now owns (and closes) its parts.
func (s *Spool) Append(other *Spool) {
	if other == nil || other == s {
		return
	}
	other.mu.Lock()
	parts, size, inMem, lost, err := other.parts, other.size, other.inMem, other.lost, other.err
	other.parts, other.size, other.inMem, other.lost = nil, 0, 0, 0
	other.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		closeParts(parts)
		return
	}
	s.parts = append(s.parts, parts...)
	s.size += size
	s.inMem += inMem
	s.lost += lost
	if s.err == nil {
		s.err = err
	}
}

// Size is how many bytes s holds.
func (s *Spool) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// Lost is how many bytes were written but not kept, and Err why.
func (s *Spool) Lost() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Err is why bytes were lost, nil if none were.
func (s *Spool) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Reader reads what s holds, from the start; each call gives a reader of
// its own, so a failed store can be tried again. Reading after Close
// fails.
func (s *Spool) Reader() io.Reader {
	s.mu.Lock()
	defer s.mu.Unlock()
	readers := make([]io.Reader, 0, len(s.parts))
	for _, p := range s.parts {
		if p.file != nil {
			readers = append(readers, io.NewSectionReader(p.file, 0, p.n))
		} else {
			readers = append(readers, bytes.NewReader(p.mem))
		}
	}
	if s.closed {
		readers = append(readers, errReader{errSpoolClosed})
	}
	return io.MultiReader(readers...)
}

var errSpoolClosed = errors.New("the output spool is closed")

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// Head is the first n bytes s holds, or all of them when it holds fewer.
func (s *Spool) Head(n int) (string, error) {
	var b strings.Builder
	b.Grow(int(min(int64(n), s.Size())))
	_, err := io.Copy(&b, io.LimitReader(s.Reader(), int64(n)))
	return b.String(), err
}

// Close releases what s holds; it may be called more than once, and on a
// nil Spool.
func (s *Spool) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	parts := s.parts
	s.parts, s.closed = nil, true
	s.mu.Unlock()
	return closeParts(parts)
}

func closeParts(parts []spoolPart) error {
	var errs []error
	for _, p := range parts {
		if p.file != nil {
			errs = append(errs, p.file.Close())
		}
	}
	return errors.Join(errs...)
}
