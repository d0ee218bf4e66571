//go:build !linux

package builtin

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/toolbus/toolbus/internal/tool"
)

// errEscapes never comes up without the fast path; os.Root's own error
// says so in words.
var errEscapes = errors.New("path escapes from parent")

// beneath is the openat2 fast path for reads, on Linux only; elsewhere
// every read goes through os.Root.
type beneath struct{}

func openBeneath(string) *beneath { return nil }

func (*beneath) close() {}

func (*beneath) works() bool { return false }

func (*beneath) readFile(string, int, func(tool.File) error) ([]byte, bool, error) {
	return nil, false, nil
}

func (*beneath) look(string) (tool.File, bool) { return tool.File{}, false }

// createIn creates rel, which must not exist, under root, never through a
// link as its last component. Without /proc to tell where the directory
// it lands in really is, check is shown the path as named: a directory on
// the way that became a link inside the workspace is not caught here.
func createIn(root *os.Root, rel string, check func(tool.File) error) (*os.File, error) {
	if err := check(tool.File{Real: filepath.Join(root.Name(), rel)}); err != nil {
		return nil, err
	}
	return root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}
