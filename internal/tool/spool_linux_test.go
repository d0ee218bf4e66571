package tool

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A process watching the temp dir with inotify while spools past
// SpoolHead are written (another call's large output) sees no file made
// there and nothing it could open: the spool's file has no name (its
// writes show as events of "#INODE", which no path opens). The
// watcher here is this process itself, unconfined, which is more than a
// confined tool process may do. With a named file, created and unlinked
// at once, the watcher saw it made (IN_CREATE) every time, and opened it
// before the unlink often enough.
func TestASpoolsFileIsSeenByNoWatcher(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_ALL_EVENTS); err != nil {
		t.Fatal(err)
	}
	secret := []byte("API_TOKEN=victim-secret-123\n")
	for range 5 {
		s := NewSpool()
		s.Write(bytes.Repeat([]byte("x"), SpoolHead))
		s.Write(bytes.Repeat(secret, 1000))
		if n := spoolFiles(t); n == 0 {
			t.Fatal("the spool keeps no file: the test would prove nothing")
		}
		got, err := io.ReadAll(s.Reader())
		if err != nil || !bytes.HasSuffix(got, secret) {
			t.Fatalf("the spool lost its tail: %v", err)
		}
		s.Close()
	}
	var seen []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				t.Errorf("the watcher saw %q made in the temp dir", name)
			}
			if name == "" {
				continue
			}
			seen = append(seen, name)
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				t.Errorf("the watcher opened %q: %d bytes", name, len(b))
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the temp dir holds %d entries", len(entries))
	}
	t.Logf("names in the watcher's events: %q", seen)
}
