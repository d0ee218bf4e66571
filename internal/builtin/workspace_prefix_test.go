package builtin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
)

// TestSiblingWithTheRootAsPrefixIsOutside: a directory whose name starts
// with the workspace's (/x/w-old beside /x/w) is another directory, for
// every path an agent can name it by.
func TestSiblingWithTheRootAsPrefixIsOutside(t *testing.T) {
	parent := t.TempDir()
	root, sibling := filepath.Join(parent, "w"), filepath.Join(parent, "w-old")
	for _, d := range []string{root, sibling, filepath.Join(root, "old")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sibling, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := NewWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })

	for _, p := range []string{filepath.Join(sibling, "secret"), "../w-old/secret", sibling, "../w-old", root + "x"} {
		if real, err := ws.Resolve(p); !errors.Is(err, ErrOutsideWorkspace) {
			t.Errorf("Resolve(%q) = %q, %v; want ErrOutsideWorkspace", p, real, err)
		}
		if f, err := ws.Look(p); !errors.Is(err, ErrOutsideWorkspace) {
			t.Errorf("Look(%q) = %+v, %v; want ErrOutsideWorkspace", p, f, err)
		}
	}

	shells := NewShells(ws, unconfined(t))
	t.Cleanup(shells.Close)
	for _, tl := range Tools(ws, shells) {
		var args string
		switch tl.Spec().Name {
		case "read_file":
			args = `{"file_path":"` + filepath.Join(sibling, "secret") + `"}`
		case "write_file":
			args = `{"file_path":"` + filepath.Join(sibling, "planted") + `","content":"x"}`
		default:
			continue
		}
		out := run(t, tl, args)
		if out.Err == nil || out.Err.Type != events.ErrPathNotInWorkspace {
			t.Errorf("%s %s: got %+v, want %s", tl.Spec().Name, args, out, events.ErrPathNotInWorkspace)
		}
	}
	for _, p := range []string{filepath.Join(sibling, "planted"), filepath.Join(root, "old", "planted")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("write_file made %s", p)
		}
	}
}
