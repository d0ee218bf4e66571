package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Where an export goes on after a stop is in what it wrote, so that
// nothing else can get out of step with it: an export to a file reads
// the file's last line (ExportFile); one to stdout or to a collector
// keeps the last sequence it wrote in a checkpoint file of its own
// (Checkpointed).

// ErrNotExport is the error of an export's output or checkpoint file that
// holds something an export does not write: the export refuses to go on
// from it, and leaves it as it is.
var ErrNotExport = errors.New("not written by an audit export")

// LineSeq is the sequence of the event a line of an export holds (its
// newline cut off); an error wrapping ErrNotExport when the line is not
// one an export writes.
func LineSeq(line []byte) (uint64, error) {
	var l struct {
		Seq     *uint64         `json:"seq"`
		Subject string          `json:"subject"`
		Kind    string          `json:"kind"`
		Event   json.RawMessage `json:"event"`
	}
	if !bytes.HasPrefix(line, linePrefix) {
		return 0, fmt.Errorf("%w: a line of an export starts with %s", ErrNotExport, linePrefix)
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNotExport, err)
	}
	if l.Seq == nil || *l.Seq == 0 || l.Subject == "" || l.Kind == "" || l.Event == nil {
		return 0, fmt.Errorf("%w: a line of an export has a seq, a subject, a kind and an event", ErrNotExport)
	}
	return *l.Seq, nil
}

// appendLines appends the lines of batch to buf, each with its newline.
func appendLines(buf []byte, batch []Line) ([]byte, error) {
	for _, l := range batch {
		data, err := json.Marshal(l)
		if err != nil {
			return buf, fmt.Errorf("event #%d: %w", l.Seq, err)
		}
		buf = append(append(buf, data...), '\n')
	}
	return buf, nil
}

// ExportFile is an export's output file, which is its own checkpoint:
// each line is one event, and its last complete line says where the
// export goes on. One process writes it at a time: it holds the file's
// lock (flock) until Close.
type ExportFile struct {
	f    *os.File
	path string
}

var _ Sink = (*ExportFile)(nil)

// OpenExportFile opens the output file at path, made when missing, for an
// export to go on writing, and returns it with the sequence of the last
// event it holds (0: none). A last line cut short as it was written (the
// export was killed, the machine crashed) is dropped: the export writes
// that event again. A file whose last complete line is not one an export
// writes, or that ends in something an export does not write, is refused
// with an error wrapping ErrNotExport, and left as it is.
func OpenExportFile(path string) (*ExportFile, uint64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	last, err := resume(f)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	// The file's name must outlast a machine's crash as its lines do.
	if err := syncDir(path); err != nil {
		f.Close()
		return nil, 0, err
	}
	return &ExportFile{f: f, path: path}, last, nil
}

// resume takes f's lock, checks that f is an export's, drops its torn
// last line, and returns the sequence of its last event.
func resume(f *os.File) (uint64, error) {
	if err := flock(f); errors.Is(err, unix.EWOULDBLOCK) {
		return 0, errors.New("another export writes this file")
	} else if err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := info.Size()
	end, err := afterLast(f, size) // the end of the last complete line
	if err != nil {
		return 0, err
	}
	torn := make([]byte, size-end)
	if _, err := f.ReadAt(torn, end); err != nil && err != io.EOF {
		return 0, err
	}
	if !tornLine(torn) {
		return 0, fmt.Errorf("%w: it ends in %d bytes that are not the start of an exported event", ErrNotExport, len(torn))
	}
	var last uint64
	if end > 0 {
		start, err := afterLast(f, end-1)
		if err != nil {
			return 0, err
		}
		line := make([]byte, end-1-start)
		if _, err := f.ReadAt(line, start); err != nil {
			return 0, err
		}
		if last, err = LineSeq(line); err != nil {
			return 0, fmt.Errorf("its last line: %w", err)
		}
	}
	if len(torn) > 0 {
		if err := f.Truncate(end); err != nil {
			return 0, fmt.Errorf("drop its torn last line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
	}
	return last, nil
}

// tornLine says whether b, what follows a file's last newline, is what an
// export leaves when it stops as it writes a line: nothing, the start of
// a line, or the zeros a file system may show in place of what was
// written after the last sync when the machine crashed.
func tornLine(b []byte) bool {
	if bytes.HasPrefix(b, linePrefix) || bytes.HasPrefix(linePrefix, b) {
		return true
	}
	return len(bytes.Trim(b, "\x00")) == 0
}

// afterLast is the offset just past the last newline in f before offset
// end; 0 when there is none. It reads f backwards, a block at a time,
// since a line (an event with large fields) may be megabytes long.
func afterLast(f *os.File, end int64) (int64, error) {
	const block = 64 << 10
	buf := make([]byte, block)
	for end > 0 {
		n := min(end, block)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

// Write appends batch, one line an event, and syncs the file: once it
// returns nil the batch is on disk, and an export that starts again goes
// on after it.
func (e *ExportFile) Write(_ context.Context, batch []Line) error {
	buf, err := appendLines(nil, batch)
	if err != nil {
		return err
	}
	if _, err := e.f.Write(buf); err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if err := e.f.Sync(); err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	return nil
}

// Close closes the file, and lets its lock go.
func (e *ExportFile) Close() error { return e.f.Close() }

// ExportWriter writes an export to W (stdout), one line an event.
type ExportWriter struct {
	W io.Writer
}

var _ Sink = (*ExportWriter)(nil)

// Write writes batch to W.
func (e *ExportWriter) Write(_ context.Context, batch []Line) error {
	buf, err := appendLines(nil, batch)
	if err != nil {
		return err
	}
	_, err = e.W.Write(buf)
	return err
}

// Checkpointed keeps the cursor of an export to a Sink that keeps none
// (stdout, an OTLP collector) in a checkpoint file: once the Sink has
// taken a batch, the batch's last sequence goes to Path, replaced whole
// (WriteExportCheckpoint), so that a crash leaves the checkpoint before
// the batch or after it, never half of one. A crash between the two has
// the export give the Sink the batch again when it starts again: a reader
// drops repeats by their seq.
type Checkpointed struct {
	Sink Sink
	Path string
}

var _ Sink = (*Checkpointed)(nil)

// Write gives batch to the Sink, then moves the checkpoint past it.
func (c *Checkpointed) Write(ctx context.Context, batch []Line) error {
	if err := c.Sink.Write(ctx, batch); err != nil || len(batch) == 0 {
		return err
	}
	return WriteExportCheckpoint(c.Path, batch[len(batch)-1].Seq)
}

// maxCheckpoint bounds what ReadExportCheckpoint reads: a checkpoint is
// one number.
const maxCheckpoint = 64

// ReadExportCheckpoint reads the checkpoint file at path: the sequence of
// the last event the export wrote. 0 when there is no such file yet, or
// it is empty (made ahead of the export's first start).
func ReadExportCheckpoint(path string) (uint64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCheckpoint+1))
	if err != nil {
		return 0, err
	}
	seq, err := ParseExportCheckpoint(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return seq, nil
}

// ParseExportCheckpoint reads a checkpoint: a sequence in decimal and a
// newline, as WriteExportCheckpoint writes it, or nothing (0). Anything
// else is an error wrapping ErrNotExport.
func ParseExportCheckpoint(data []byte) (uint64, error) {
	if len(data) == 0 {
		return 0, nil
	}
	digits, ok := bytes.CutSuffix(data, []byte("\n"))
	seq, err := strconv.ParseUint(string(digits), 10, 64)
	if !ok || len(data) > maxCheckpoint || err != nil || seq == 0 || string(digits) != strconv.FormatUint(seq, 10) {
		return 0, fmt.Errorf("%w: a checkpoint is the sequence of the last event written, in decimal, and a newline; this one holds %.40q", ErrNotExport, data)
	}
	return seq, nil
}

// WriteExportCheckpoint replaces the checkpoint file at path with seq,
// whole or not at all: a temp file beside it, synced, renamed over it,
// and the directory synced.
func WriteExportCheckpoint(path string, seq uint64) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(strconv.FormatUint(seq, 10) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return syncDir(path)
}

// syncDir syncs the directory that holds path, so that a file made or
// renamed there is still there after the machine crashes.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Dir(path), err)
	}
	return nil
}

// flock takes f's exclusive lock without waiting, through an interrupted
// call.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
