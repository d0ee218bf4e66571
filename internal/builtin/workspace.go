package builtin

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideWorkspace is returned for a path that leaves the workspace:
// through "..", as an absolute path elsewhere, or through a symbolic link.
var ErrOutsideWorkspace = errors.New("path is outside the workspace")

// MaxReadBytes is the largest file the tools read whole, Gemini CLI's 20 MB
// limit: a larger file (or a pipe that never ends) fails the read instead
// of filling the executor's memory.
const MaxReadBytes = 20 << 20

// ErrTooLarge is returned for a file larger than MaxReadBytes.
var ErrTooLarge = fmt.Errorf("file is larger than the %d MB the tools read", MaxReadBytes>>20)

// Workspace is the directory the built-in tools are confined to. File
// operations go through an os.Root, which refuses at the moment of the
// operation any path that leaves the directory, through ".." or through a
// symbolic link, so a link swapped in after a check cannot lead out.
// Close it when done.
type Workspace struct {
	root    string // absolute, symbolic links resolved
	fs      *os.Root
	beneath *beneath // the fast path for reads, where the kernel has one
}

// NewWorkspace confines tools to dir, which must exist.
func NewWorkspace(dir string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	info, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("workspace: %s is not a directory", dir)
	}
	fsRoot, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return &Workspace{root: real, fs: fsRoot, beneath: openBeneath(real)}, nil
}

// Close releases the workspace's directory handle.
func (w *Workspace) Close() error {
	w.beneath.close()
	return w.fs.Close()
}

// rel turns p into a path relative to the root, refusing one that leaves
// it on its face; os.Root refuses the rest when the path is used.
func (w *Workspace) rel(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	r, ok := w.inside(w.Abs(p))
	if !ok {
		return "", fmt.Errorf("%w: %s is not under %s", ErrOutsideWorkspace, p, w.root)
	}
	return r, nil
}

// inside returns abs, a clean absolute path, relative to the root, and
// whether it is under the root at all.
func (w *Workspace) inside(abs string) (string, bool) {
	switch {
	case abs == w.root:
		return ".", true
	case w.contains(abs):
		return abs[len(w.root)+1:], true
	}
	return "", false
}

// confined names an os.Root refusal as leaving the workspace.
func (w *Workspace) confined(p string, err error) error {
	if err != nil && (errors.Is(err, errEscapes) || strings.Contains(err.Error(), "path escapes from parent")) {
		return fmt.Errorf("%w: %s leads out of %s", ErrOutsideWorkspace, p, w.root)
	}
	return err
}

// ReadFile reads the file p names, inside the workspace.
func (w *Workspace) ReadFile(p string) ([]byte, error) {
	r, err := w.rel(p)
	if err != nil {
		return nil, err
	}
	if data, ok, err := w.beneath.readFile(r, MaxReadBytes); ok {
		return data, w.confined(p, err)
	}
	f, err := w.fs.Open(r)
	if err != nil {
		return nil, w.confined(p, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
	if err == nil && len(data) > MaxReadBytes {
		err = ErrTooLarge
	}
	return data, err
}

// WriteFile writes the file p names, creating its directories.
func (w *Workspace) WriteFile(p string, data []byte) error {
	r, err := w.rel(p)
	if err != nil {
		return err
	}
	if dir := filepath.Dir(r); dir != "." {
		if err := w.fs.MkdirAll(dir, 0o755); err != nil {
			return w.confined(p, err)
		}
	}
	return w.confined(p, w.fs.WriteFile(r, data, 0o644))
}

// Stat describes the file p names.
func (w *Workspace) Stat(p string) (fs.FileInfo, error) {
	r, err := w.rel(p)
	if err != nil {
		return nil, err
	}
	info, err := w.fs.Stat(r)
	return info, w.confined(p, err)
}

// ReadDir lists the directory p names.
func (w *Workspace) ReadDir(p string) ([]fs.DirEntry, error) {
	r, err := w.rel(p)
	if err != nil {
		return nil, err
	}
	f, err := w.fs.Open(r)
	if err != nil {
		return nil, w.confined(p, err)
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// Open opens the file p names for reading.
func (w *Workspace) Open(p string) (*os.File, error) {
	r, err := w.rel(p)
	if err != nil {
		return nil, err
	}
	f, err := w.fs.Open(r)
	return f, w.confined(p, err)
}

// Root is the workspace's absolute path.
func (w *Workspace) Root() string { return w.root }

// Abs turns p (relative to the root, or absolute) into a clean absolute
// path without checking confinement: what the policy is shown.
func (w *Workspace) Abs(p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(w.root, p)
	}
	return filepath.Clean(p)
}

// Resolve returns the real path p names, refusing one outside the root.
// Symbolic links are followed for the part of the path that exists, so a
// link pointing out of the workspace is refused too; a path that does not
// exist yet (a file to create) is checked through its nearest existing
// ancestor.
func (w *Workspace) Resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("path contains a NUL byte")
	}
	abs := w.Abs(p)
	if !w.contains(abs) {
		return "", fmt.Errorf("%w: %s is not under %s", ErrOutsideWorkspace, p, w.root)
	}
	// Find the deepest existing ancestor and resolve its links.
	existing, rest := abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(existing)
		rest = filepath.Join(filepath.Base(existing), rest)
		if parent == existing {
			break
		}
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", err
	}
	real = filepath.Join(real, rest)
	if !w.contains(real) {
		return "", fmt.Errorf("%w: %s leads to %s through a symbolic link", ErrOutsideWorkspace, p, real)
	}
	return real, nil
}

// RealPath is Resolve, made cheap for the common case: a path inside the
// workspace without a symbolic link in it is its own real path, which the
// kernel tells in one lookup.
func (w *Workspace) RealPath(p string) (string, error) {
	abs := w.Abs(p)
	if r, ok := w.inside(abs); ok && w.beneath.noLinks(r) {
		return abs, nil
	}
	return w.Resolve(p)
}

func (w *Workspace) contains(p string) bool {
	return p == w.root || strings.HasPrefix(p, w.root+string(filepath.Separator))
}

// Rel is p relative to the root, for display.
func (w *Workspace) Rel(p string) string {
	if r, err := filepath.Rel(w.root, p); err == nil {
		return r
	}
	return p
}
