package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The rights a Policy grants. ResolveUnix (connecting to a Unix socket
// file, ABI 9) goes with reading, so that a tool reaches the sockets it
// reached before (an ssh agent); what the kernel does not know is dropped
// by go-landlock's best effort.
const (
	readRights = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir | ll.AccessFSResolveUnix
	// writeRights are RWDirs' rights: everything but reparenting
	// (Refer, added where the kernel has it) and device ioctls.
	writeRights = readRights | ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
		ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSTruncate
	// fileRights are those a rule on a file (not a directory) may hold.
	fileRights   = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	deviceRights = ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

// config is what is confined: every file system right go-landlock knows,
// down to what the kernel has. Network and IPC scopes are not: a tool
// may fetch, and may signal the background commands of earlier calls
// (each call is a Landlock domain of its own).
var config = landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS}.BestEffort()

var abi = sync.OnceValues(func() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	switch {
	case errors.Is(err, syscall.ENOSYS):
		return 0, fmt.Errorf("%w: the kernel has no Landlock", ErrUnavailable)
	case errors.Is(err, syscall.EOPNOTSUPP):
		return 0, fmt.Errorf("%w: Landlock is not enabled at boot (lsm=)", ErrUnavailable)
	case err != nil:
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return v, nil
})

// ABI is the kernel's Landlock ABI version, or an error wrapping
// ErrUnavailable.
func ABI() (int, error) { return abi() }

// Ruleset is a Policy made into a Landlock ruleset, ready to be enforced
// by RestrictThread, in this process or in another one it is passed to.
type Ruleset struct {
	fd    int
	flags uint32
}

// Fd is the ruleset's file descriptor (close on exec).
func (r *Ruleset) Fd() int { return r.fd }

// Flags are what RestrictThread is to be given with Fd.
func (r *Ruleset) Flags() uint32 { return r.flags }

// Close closes the ruleset; processes it confines stay confined.
func (r *Ruleset) Close() error { return syscall.Close(r.fd) }

// Ruleset makes p into a Landlock ruleset, as the file system is now: it
// lists the directories on the way to a hidden one. It returns an error
// wrapping ErrUnavailable when the kernel cannot confine anything.
// Creating a ruleset confines nobody.
func (p *Policy) Ruleset() (*Ruleset, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	v, err := ABI()
	if err != nil {
		return nil, err
	}
	rules, err := p.rules(v)
	if err != nil {
		return nil, err
	}
	fd, flags, err := config.NewRulesetFD(rules...)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if fd < 0 {
		return nil, fmt.Errorf("%w: nothing this kernel's Landlock can enforce", ErrUnavailable)
	}
	return &Ruleset{fd: fd, flags: flags}, nil
}

// RestrictThread confines the calling OS thread, and what it starts from
// then on, by the ruleset fd with flags (Ruleset.Fd and Flags). The
// caller must have locked its goroutine to the thread
// (runtime.LockOSThread) and must never unlock it, so that the thread
// ends with the goroutine instead of serving others confined. It also
// sets the thread's no_new_privs: a confined process gains no privilege
// from a set-user-ID program (sudo).
func RestrictThread(fd int, flags uint32) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("sandbox: landlock_restrict_self: %w", err)
	}
	return nil
}

// rules are p's Landlock rules under ABI version v.
func (p *Policy) rules(v int) ([]landlock.Rule, error) {
	hidden, err := realPaths(p.Hidden)
	if err != nil {
		return nil, err
	}
	writable, err := realPaths(slices.Concat(p.Writable, TempDirs()))
	if err != nil {
		return nil, err
	}
	b := &builder{hidden: hidden}
	write := landlock.AccessFSSet(writeRights)
	if v >= 2 {
		// Moving a file between directories of the workspace; without it
		// the kernel answers EXDEV, which mv gets round but git does not.
		write |= ll.AccessFSRefer
	}
	if err := b.grant("/", readRights); err != nil {
		return nil, err
	}
	for _, w := range writable {
		if err := b.grant(w, write); err != nil {
			return nil, err
		}
	}
	for _, d := range devices {
		if err := b.grant(d, deviceRights); err != nil {
			return nil, err
		}
	}
	return b.rules, nil
}

// builder collects the rules that grant hierarchies with what is hidden
// in them taken out.
type builder struct {
	hidden []string // real, clean
	rules  []landlock.Rule
}

// grant grants access to path's hierarchy but not to what is hidden in
// it: a directory with something hidden beneath is not granted itself,
// its entries are, each in the same way.
func (b *builder) grant(path string, access landlock.AccessFSSet) error {
	if slices.ContainsFunc(b.hidden, func(h string) bool { return within(path, h) }) {
		return nil
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		// A rule on it would hold its target, which may be hidden; the
		// target is granted, or not, where it lies.
		return nil
	case !fi.IsDir():
		b.add(path, access&fileRights)
		return nil
	case !slices.ContainsFunc(b.hidden, func(h string) bool { return within(h, path) }):
		b.add(path, access)
		return nil
	}
	names, err := readDirNames(path)
	if err != nil {
		// Its entries stay out of reach: hiding fails closed.
		return nil
	}
	for _, n := range names {
		if err := b.grant(filepath.Join(path, n), access); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) add(path string, access landlock.AccessFSSet) {
	if access != 0 {
		// A path that goes between Lstat and the rule is no error.
		b.rules = append(b.rules, landlock.PathAccess(access, path).IgnoreIfMissing())
	}
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// realPaths are paths absolute, clean and with symbolic links resolved,
// the missing ones left out.
func realPaths(paths []string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		if !slices.Contains(out, real) {
			out = append(out, real)
		}
	}
	return out, nil
}
