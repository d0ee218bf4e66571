// Package datadir makes a data directory one process's own. Two
// nats-servers writing one JetStream store corrupt it (their file stores
// drift apart, and the next start finds its state files damaged), and
// nats-server itself takes no lock: every process that keeps a store in
// a directory takes this one first, before it reads or writes anything
// there, and holds it until it exits.
//
// The lock is flock(2) on LockFile in the directory. The kernel releases
// it when the process ends, however it ends, so a lock file left by a
// process that crashed never blocks the next start; the pid written in
// the file only names the holder in the error a second process gets. The
// descriptor is close-on-exec (as every file Go opens): a tool process
// started by the holder does not inherit the lock and cannot keep it
// past the holder's exit.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// LockFile is the name of the lock file in a data directory.
const LockFile = "toolbus.lock"

// ErrInUse means another process holds the directory's lock.
var ErrInUse = errors.New("data directory in use")

// InUseError is ErrInUse with the directory and its holder.
type InUseError struct {
	Dir string
	// PID is the holder's process id, as it wrote it in the lock file;
	// 0 when it had not written it yet.
	PID int
}

func (e *InUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = fmt.Sprintf("another process (pid %d)", e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by %s: stop it, or give this one another --data", e.Dir, holder)
}

// Unwrap makes errors.Is(err, ErrInUse) hold.
func (e *InUseError) Unwrap() error { return ErrInUse }

// Lock is a held lock on a data directory. Its methods are safe for
// concurrent use.
type Lock struct {
	dir  string
	mu   sync.Mutex
	file *os.File // nil once released
}

// Acquire makes dir (mode 0700) if it is missing and takes its lock, or
// fails at once with an *InUseError when another process, or another
// Lock of this process, holds it. Nothing else in dir is read or written.
func Acquire(dir string) (*Lock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(abs, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: lock: %w", abs, err)
	}
	if err := flock(f); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &InUseError{Dir: abs, PID: readPID(f)}
		}
		return nil, fmt.Errorf("data directory %s: lock: %w", abs, err)
	}
	// The pid of a holder before this one, which crashed, is replaced.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close() // and with it the lock
		return nil, fmt.Errorf("data directory %s: lock: %w", abs, err)
	}
	return &Lock{dir: abs, file: f}, nil
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

// readPID is the pid the holder wrote in f, 0 when there is none (yet).
func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Dir is the locked directory, absolute.
func (l *Lock) Dir() string { return l.dir }

// Holds reports whether l is the lock of dir and is still held.
func (l *Lock) Holds(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil || abs != l.dir {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.file != nil
}

// Close gives the lock up. The lock file stays: removing it would let a
// process that opened it just before lock a file no one else sees. Close
// is safe to call more than once.
func (l *Lock) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return nil
	}
	err := l.file.Close()
	l.file = nil
	return err
}
