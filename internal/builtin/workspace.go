package builtin

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/toolbus/toolbus/internal/tool"
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

// ErrChanged is returned for a file that is not the one the policy judged:
// its name became a link to another file, another file was renamed onto
// it, or it was hard-linked, between the check and the open.
var ErrChanged = errors.New("the file changed after the policy judged the call")

// Check is shown a file a tool opened, or is about to create, before a
// byte of it is read or written (tool.Call.Opened): an error refuses it.
// A nil Check accepts every file.
type Check = func(tool.File) error

// checked runs check, naming the file in its refusal.
func checked(check Check, p string, f tool.File) error {
	if check == nil {
		return nil
	}
	if err := check(f); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrChanged, p, err)
	}
	return nil
}

// ReadFile reads the file p names, inside the workspace, once check
// accepted it.
func (w *Workspace) ReadFile(p string, check Check) ([]byte, error) {
	r, err := w.rel(p)
	if err != nil {
		return nil, err
	}
	if data, ok, err := w.beneath.readFile(r, MaxReadBytes, func(f tool.File) error { return checked(check, p, f) }); ok {
		return data, w.confined(p, err)
	}
	f, err := w.Open(p, check)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
	if err == nil && len(data) > MaxReadBytes {
		err = ErrTooLarge
	}
	return data, err
}

// WriteFile writes the file p names, creating it and its directories. An
// existing file is opened without truncating it and shown to check first,
// so a name that became a link, or a hard link to a file elsewhere, is
// refused before anything is written; a new file is created in a
// directory held open and shown to check, never through a link. created
// says whether the file is new.
func (w *Workspace) WriteFile(p string, data []byte, check Check) (created bool, err error) {
	r, err := w.rel(p)
	if err != nil {
		return false, err
	}
	if dir := filepath.Dir(r); dir != "." {
		if err := w.fs.MkdirAll(dir, 0o755); err != nil {
			return false, w.confined(p, err)
		}
	}
	f, created, err := w.openWrite(p, r, check)
	if err != nil {
		return false, w.confined(p, err)
	}
	if !created {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return created, err
}

// openWrite opens r for writing once check accepted it: the existing file,
// or a new one.
func (w *Workspace) openWrite(p, r string, check Check) (*os.File, bool, error) {
	// Twice at most: a file created by someone else between the two
	// opens is judged as an existing one.
	for range 2 {
		// O_NONBLOCK: a FIFO without a reader fails instead of hanging.
		f, err := w.fs.OpenFile(r, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			if err := w.accept(f, p, check); err != nil {
				f.Close()
				return nil, false, err
			}
			return f, false, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		f, err = createIn(w.fs, r, func(f tool.File) error { return checked(check, p, f) })
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err == nil, err
	}
	return nil, false, fmt.Errorf("%w: %s is a symbolic link that leads nowhere, or keeps changing", ErrChanged, p)
}

// accept checks an opened file for writing: a regular file, and one check
// accepts.
func (w *Workspace) accept(f *os.File, p string, check Check) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	return checked(check, p, fileOf(info))
}

// fileOf is what Check is shown of an opened file.
func fileOf(info fs.FileInfo) tool.File {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return tool.File{}
	}
	f := tool.File{ID: tool.FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}}
	if info.Mode().IsRegular() {
		f.Links = uint64(st.Nlink)
	}
	return f
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

// Open opens the file p names for reading, once check accepted it.
func (w *Workspace) Open(p string, check Check) (*os.File, error) {
	r, err := w.rel(p)
	if err != nil {
		return nil, err
	}
	f, err := w.fs.Open(r)
	if err != nil {
		return nil, w.confined(p, err)
	}
	if check != nil {
		info, err := f.Stat()
		if err == nil {
			err = checked(check, p, fileOf(info))
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
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

// Look implements what tool.LinkResolver asks of a workspace: the real
// path p leads to (Resolve), and what is there, looked at without
// following a link, so that what it reports is what a later open of p
// must find. Made cheap for the common case: a path inside the workspace
// without a symbolic link in it is its own real path, which the kernel
// tells, with the file, in one lookup.
func (w *Workspace) Look(p string) (tool.File, error) {
	abs := w.Abs(p)
	if r, ok := w.inside(abs); ok {
		if f, ok := w.beneath.look(r); ok {
			f.Real = abs
			return f, nil
		}
	}
	real, err := w.Resolve(p)
	if err != nil {
		return tool.File{}, err
	}
	r, _ := w.inside(real)
	f, ok := w.beneath.look(r)
	if !ok && !w.beneath.works() {
		// Without openat2, os.Root looks; it follows links on the way.
		if info, err := w.fs.Lstat(r); err == nil && info.Mode()&fs.ModeSymlink == 0 {
			f = fileOf(info)
		}
	}
	// Otherwise nothing is there, or a link appeared since Resolve: no
	// file is known, and an open of p finds none the policy judged.
	f.Real = real
	return f, nil
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
