package tool

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tempFile is a file with no name, in no directory listing, that
// disappears with its last descriptor: made with O_TMPFILE in the temp
// dir, so that it is on disk where the temp dir is, and where the temp
// dir's file system cannot (EOPNOTSUPP, or EISDIR from a kernel that
// predates it), a memory file (memfd_create). A named file, even one
// unlinked at once, is seen by a tool process watching the temp dir with
// inotify, which opens it before it is gone.
func tempFile() (*os.File, error) {
	dir := os.TempDir()
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), dir+"/(unnamed)"), nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
	}
	fd, err = unix.MemfdCreate(SpoolFilePrefix, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	return os.NewFile(uintptr(fd), "memfd:"+SpoolFilePrefix), nil
}
