package builtin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// TestBeneathAgreesWithRoot holds the openat2 fast path to what os.Root
// does, path by path: the same bytes, and a refusal where os.Root refuses.
func TestBeneathAgreesWithRoot(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "b", "f.txt"), []byte("inside\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644)
	big := make([]byte, 300_000)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	os.WriteFile(filepath.Join(dir, "big"), big, 0o644)
	os.Symlink("a/b/f.txt", filepath.Join(dir, "link-in"))
	os.Symlink(filepath.Join(dir, "a/b/f.txt"), filepath.Join(dir, "abs-link-in"))
	os.Symlink(outside, filepath.Join(dir, "escape"))
	os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "rel-escape"))
	os.Symlink("/proc/self/root/etc/hostname", filepath.Join(dir, "magic"))
	syscall.Mkfifo(filepath.Join(dir, "fifo-unused"), 0o644)

	b := openBeneath(dir)
	if b == nil {
		t.Fatal("openBeneath failed")
	}
	defer b.close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	for _, p := range []string{"a/b/f.txt", "a/b/../b/f.txt", "empty", "big", "link-in", "abs-link-in",
		"escape/secret", "rel-escape", "a/../../x", "magic", "a", "nope", "a/nope/x"} {
		want, rootErr := root.ReadFile(p)
		got, ok, err := b.readFile(p, MaxReadBytes, nil)
		if !ok {
			t.Fatalf("%s: openat2 not used; this kernel should have it", p)
		}
		if (err == nil) != (rootErr == nil) {
			t.Errorf("%s: openat2 says %v, os.Root says %v", p, err, rootErr)
			continue
		}
		if err == nil && string(got) != string(want) {
			t.Errorf("%s: openat2 read %d bytes, os.Root %d", p, len(got), len(want))
		}
		if errors.Is(rootErr, fs.ErrNotExist) != errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: not-found differs: openat2 %v, os.Root %v", p, err, rootErr)
		}
	}
	// Every way out is named as leaving the workspace.
	ws := &Workspace{root: dir, fs: root, beneath: b}
	for _, p := range []string{"escape/secret", "rel-escape"} {
		if _, err := ws.ReadFile(p, nil); !errors.Is(err, ErrOutsideWorkspace) {
			t.Errorf("%s: %v does not say it leaves the workspace", p, err)
		}
	}
}

// TestLookAgreesWithResolve: the one-lookup shortcut gives the real path
// the component-by-component resolution gives, and the file found there:
// its identity and, for a regular file, its number of names.
func TestLookAgreesWithResolve(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "b", "f.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, ".env"), []byte("x"), 0o644)
	os.Link(filepath.Join(dir, "a", "b", "f.txt"), filepath.Join(dir, "twin.txt"))
	os.Symlink(".env", filepath.Join(dir, "notes.txt"))
	os.Symlink("a/b", filepath.Join(dir, "short"))
	os.Symlink("..", filepath.Join(dir, "a", "up"))
	ws, err := NewWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, p := range []string{"a/b/f.txt", ".env", "notes.txt", "short/f.txt", "a/up/.env", "a/up/notes.txt", "new.txt", "short/new.txt", "a/b", "twin.txt"} {
		got, err1 := ws.Look(p)
		want, err2 := ws.Resolve(p)
		if got.Real != want || (err1 == nil) != (err2 == nil) {
			t.Errorf("%s: Look %q %v, Resolve %q %v", p, got.Real, err1, want, err2)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(want, &st); err != nil {
			if got.ID != (tool.FileID{}) {
				t.Errorf("%s: nothing there, but Look found %+v", p, got.ID)
			}
			continue
		}
		if got.ID != (tool.FileID{Dev: st.Dev, Ino: st.Ino}) {
			t.Errorf("%s: Look found %+v, stat %d/%d", p, got.ID, st.Dev, st.Ino)
		}
		wantLinks := uint64(0)
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			wantLinks = st.Nlink
		}
		if got.Links != wantLinks {
			t.Errorf("%s: Look says %d names, stat %d", p, got.Links, wantLinks)
		}
	}
	if got, _ := ws.Look("twin.txt"); got.Links != 2 {
		t.Errorf("twin.txt has %d names, want 2", got.Links)
	}
	if got, _ := ws.Look("notes.txt"); got.Real != filepath.Join(ws.Root(), ".env") {
		t.Errorf("notes.txt leads to %s", got.Real)
	}
}

// TestReadsAreBounded: a file over the limit, or a pipe that never ends,
// fails the read with FILE_TOO_LARGE instead of filling memory.
func TestReadsAreBounded(t *testing.T) {
	ws, tools := newWorkspace(t)
	big := filepath.Join(ws.Root(), "big.bin")
	if err := os.WriteFile(big, make([]byte, MaxReadBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(ws.Root(), "endless")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		chunk := make([]byte, 1<<16)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}()
	for _, name := range []string{"big.bin", "endless"} {
		out := run(t, tools["read_file"], `{"file_path":"`+name+`"}`)
		if out.Err == nil || out.Err.Type != events.ErrFileTooLarge {
			t.Errorf("%s: %+v", name, out.Err)
		}
	}
	// read_many_files reads no more in one call than one file may hold.
	for i := range 3 {
		os.WriteFile(filepath.Join(ws.Root(), fmt.Sprintf("part%d.bin", i)), make([]byte, MaxReadBytes/2), 0o644)
	}
	out := run(t, tools["read_many_files"], `{"paths":["part*.bin"]}`)
	if !strings.Contains(out.LLMContent, "1 file(s) not read: 1 more, as the call read 20 MB already") || len(out.LLMContent) > MaxReadBytes+1000 {
		t.Errorf("read_many_files over the budget: %d bytes, ending %q", len(out.LLMContent), out.LLMContent[max(0, len(out.LLMContent)-200):])
	}
	// read_many_files reads the rest and says which it could not read.
	out = run(t, tools["read_many_files"], `{"paths":["big.bin","README.md"]}`)
	if !strings.Contains(out.LLMContent, "line two") || !strings.Contains(out.LLMContent, "1 file(s) not read: big.bin (file is larger than the 20 MB") {
		t.Errorf("read_many_files:\n%s", out.LLMContent)
	}
}

// TestAWriteCutShortIsAnError: a write the kernel refuses part of (here
// past the file size limit; a full disk alike) fails the call, and is
// never reported as written.
func TestAWriteCutShortIsAnError(t *testing.T) {
	ws, _ := newWorkspace(t)
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	// Go ignores SIGXFSZ: the write returns EFBIG instead.
	limit := was
	limit.Cur = 1 << 16
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Skipf("cannot lower the file size limit: %v", err)
	}
	created, err := ws.WriteFile("big.txt", make([]byte, 1<<17), nil)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, syscall.EFBIG) {
		t.Errorf("a write cut at the size limit: created %v, err %v; want EFBIG", created, err)
	}
}
