package tool

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testkit"
)

// spoolFiles counts this process's descriptors open on spool files: the
// unnamed files of the temp dir (O_TMPFILE, which /proc names "#INODE")
// and the memory files named after the spool.
func spoolFiles(t *testing.T) int {
	return testkit.OpenFiles(t, SpoolFilePrefix) + testkit.OpenFiles(t, filepath.Join(os.TempDir(), "#"))
}

func TestSpoolKeepsTheHeadInMemoryAndTheRestInAFile(t *testing.T) {
	before := spoolFiles(t)
	s := NewSpool()
	var want bytes.Buffer
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	for range 40 {                                          // 2.5 MiB, in pieces
		s.Write(chunk)
		want.Write(chunk)
	}
	s.WriteString("the end")
	want.WriteString("the end")
	if s.Size() != int64(want.Len()) {
		t.Fatalf("size %d, want %d", s.Size(), want.Len())
	}
	if s.inMem != SpoolHead {
		t.Errorf("%d bytes in memory, want the head of %d", s.inMem, SpoolHead)
	}
	if n := spoolFiles(t) - before; n != 1 {
		t.Errorf("%d spool files open, want 1", n)
	}
	// Every reader reads everything, from the start.
	for range 2 {
		got, err := io.ReadAll(s.Reader())
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("read back %d bytes (%v), want %d equal ones", len(got), err, want.Len())
		}
	}
	if head, err := s.Head(10); err != nil || head != "0123456789" {
		t.Errorf("head %q %v", head, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := spoolFiles(t) - before; n != 0 {
		t.Errorf("%d spool files still open after Close", n)
	}
	if _, err := io.ReadAll(s.Reader()); err == nil {
		t.Error("a closed spool still reads")
	}
	s.Close() // twice is fine
}

func TestSpoolAppendMovesWithoutCopying(t *testing.T) {
	before := spoolFiles(t)
	stdout, whole := NewSpool(), NewSpool()
	big := strings.Repeat("x", SpoolHead+1000)
	stdout.WriteString(big)
	whole.WriteString("Stdout: ")
	whole.Append(stdout)
	whole.WriteString("\nExit Code: 0")
	if stdout.Size() != 0 {
		t.Errorf("the appended spool still holds %d bytes", stdout.Size())
	}
	got, err := io.ReadAll(whole.Reader())
	if err != nil || string(got) != "Stdout: "+big+"\nExit Code: 0" {
		t.Fatalf("read %d bytes (%v)", len(got), err)
	}
	stdout.Close() // empty: closes nothing of whole's
	if got, err := io.ReadAll(whole.Reader()); err != nil || len(got) != len(big)+len("Stdout: \nExit Code: 0") {
		t.Errorf("after closing the emptied spool: %d bytes, %v", len(got), err)
	}
	whole.Close()
	if n := spoolFiles(t) - before; n != 0 {
		t.Errorf("%d spool files left open", n)
	}
}
