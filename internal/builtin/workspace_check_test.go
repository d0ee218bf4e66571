package builtin

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/tool"
)

// TestOpenShowsTheFileToItsCheck: Open shows the check the file it opened
// (its device and inode, its links) before a byte is read, and a check
// that refuses it refuses the open.
func TestOpenShowsTheFileToItsCheck(t *testing.T) {
	ws, _ := newWorkspace(t)
	var shown []tool.File
	f, err := ws.Open("README.md", func(f tool.File) error { shown = append(shown, f); return nil })
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(f)
	f.Close()
	if len(shown) != 1 || shown[0].ID.Ino == 0 || shown[0].Links != 1 || !strings.Contains(string(data), "# demo") {
		t.Fatalf("the check was shown %+v, the read gave %q", shown, data)
	}
	refuse := errors.New("not the file judged")
	if f, err := ws.Open("README.md", func(tool.File) error { return refuse }); !errors.Is(err, ErrChanged) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("Open with a refusing check: %v, want ErrChanged", err)
	}
	// A second name: the check sees the links.
	if err := os.Link(filepath.Join(ws.Root(), "README.md"), filepath.Join(ws.Root(), "twin")); err != nil {
		t.Fatal(err)
	}
	shown = nil
	f, err = ws.Open("twin", func(f tool.File) error { shown = append(shown, f); return nil })
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if len(shown) != 1 || shown[0].Links != 2 {
		t.Errorf("the check of a file with two names was shown %+v", shown)
	}
}

// TestListDirectoryListsEveryEntry: list_directory shows every entry of a
// directory, not the first few.
func TestListDirectoryListsEveryEntry(t *testing.T) {
	ws, tools := newWorkspace(t)
	names := []string{"a.txt", "b.txt", "c.txt", "d.txt"}
	os.Mkdir(filepath.Join(ws.Root(), "many"), 0o755)
	for _, n := range names {
		os.WriteFile(filepath.Join(ws.Root(), "many", n), nil, 0o644)
	}
	out := run(t, tools["list_directory"], `{"path":"many"}`)
	for _, n := range names {
		if !strings.Contains(out.LLMContent, n) {
			t.Errorf("list_directory many lacks %s:\n%s", n, out.LLMContent)
		}
	}
}

// TestWriteFileShowsAnExistingFileToItsCheck, from the attacker's side:
// a name in the workspace made a second name of a file elsewhere (a hard
// link to a key) is shown to the check as the file it is, with its two
// names, before a byte is written; a check that refuses it leaves the
// file as it was.
func TestWriteFileShowsAnExistingFileToItsCheck(t *testing.T) {
	ws, _ := newWorkspace(t)
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(key, []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(key, filepath.Join(ws.Root(), "notes.txt")); err != nil {
		t.Skipf("no hard link across the two directories: %v", err)
	}
	var shown []tool.File
	refuse := errors.New("a file with more than one name")
	_, err := ws.WriteFile("notes.txt", []byte("planted"), func(f tool.File) error {
		shown = append(shown, f)
		if f.Links > 1 {
			return refuse
		}
		return nil
	})
	if !errors.Is(err, ErrChanged) {
		t.Errorf("writing a hard link to a key: %v, want ErrChanged", err)
	}
	if len(shown) != 1 || shown[0].ID.Ino == 0 || shown[0].Links != 2 {
		t.Errorf("the check was shown %+v, want the file with its 2 names", shown)
	}
	if data, _ := os.ReadFile(key); string(data) != "KEY" {
		t.Errorf("the key now holds %q", data)
	}
}
