package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// config is what is confined, down to what the kernel has: every file
// system right go-landlock knows, TCP connect (bind stays free, so that a
// test server of the workspace may listen; UDP stays free, for DNS), and
// both IPC scopes, so that a confined process can neither signal a
// process outside its domain (the executor, the supervisor, another
// call's commands, each call being a domain of its own) nor connect to an
// abstract Unix socket made outside it.
var config = landlock.Config{
	HandledAccessFS:  landlock.V11.HandledAccessFS,
	HandledAccessNet: ll.AccessNetConnectTCP,
	Scoped:           ll.ScopeSignal | ll.ScopeAbstractUnixSocket,
}.BestEffort()

// anyPortConfig is config with TCP connect left free (Policy.AnyPort).
var anyPortConfig = landlock.Config{
	HandledAccessFS: landlock.V11.HandledAccessFS,
	Scoped:          ll.ScopeSignal | ll.ScopeAbstractUnixSocket,
}.BestEffort()

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

// Ruleset is s's policy as a Landlock ruleset, as the file system is
// now (the directories on the way to a hidden one are listed), for the
// caller to close. It returns an error wrapping ErrUnavailable when the
// kernel cannot confine anything. Creating a ruleset confines nobody.
func (s *Sandbox) Ruleset() (*Ruleset, error) {
	v, err := ABI()
	if err != nil {
		return nil, err
	}
	hidden, err := realPaths(s.policy.Hidden)
	if err != nil {
		return nil, err
	}
	writable, err := realPaths(slices.Concat(s.policy.Writable, TempDirs()))
	if err != nil {
		return nil, err
	}
	key := strings.Join(hidden, "\x00") + "\x01" + strings.Join(writable, "\x00")
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if s.cache.rs == nil || s.cache.key != key || !s.cache.fresh() {
		b := &builder{hidden: hidden}
		if err := b.build(v, writable); err != nil {
			return nil, err
		}
		cfg := anyPortConfig
		if !s.policy.AnyPort {
			cfg = config
			for _, port := range s.policy.Ports() {
				b.rules = append(b.rules, landlock.ConnectTCP(port))
			}
		}
		fd, flags, err := cfg.NewRulesetFD(b.rules...)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		if fd < 0 {
			return nil, fmt.Errorf("%w: nothing this kernel's Landlock can enforce", ErrUnavailable)
		}
		s.cache.close()
		s.cache.rs, s.cache.key, s.cache.listed = &Ruleset{fd: fd, flags: flags}, key, b.listed
	}
	fd, err := unix.FcntlInt(uintptr(s.cache.rs.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return &Ruleset{fd: fd, flags: s.cache.rs.flags}, nil
}

// Close closes the ruleset s keeps; processes it confined stay confined.
func (s *Sandbox) Close() error {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	s.cache.close()
	return nil
}

// cache is the last ruleset a Sandbox built, for the same resolved paths
// and as long as none of the directories listed for it changed.
type cache struct {
	mu     sync.Mutex
	rs     *Ruleset
	key    string
	listed []listing
}

// listing is a directory whose entries became rules, as it was then: an
// entry made, removed or renamed changes its modification time. A
// directory granted whole is held by its inode only (sameInode): what
// changes inside it is covered by its rule, but a new directory made
// where it was is not.
type listing struct {
	dir       string
	stamp     stamp
	sameInode bool
}

type stamp struct {
	ino, dev uint64
	mtime    syscall.Timespec
}

func stampOf(dir string) (stamp, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return stamp{}, err
	}
	return stamp{ino: st.Ino, dev: st.Dev, mtime: st.Mtim}, nil
}

func (c *cache) fresh() bool {
	for _, l := range c.listed {
		st, err := stampOf(l.dir)
		if l.sameInode {
			st.mtime = l.stamp.mtime
		}
		if err != nil || st != l.stamp {
			return false
		}
	}
	return true
}

func (c *cache) close() {
	if c.rs != nil {
		c.rs.Close()
		c.rs = nil
	}
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

// build makes the rules under ABI version v: read everything, write the
// writable hierarchies and the devices, all but what is hidden.
func (b *builder) build(v int, writable []string) error {
	write := landlock.AccessFSSet(writeRights)
	if v >= 2 {
		// Moving a file between directories of the workspace; without it
		// the kernel answers EXDEV, which mv gets round but git does not.
		write |= ll.AccessFSRefer
	}
	if err := b.grant("/", readRights); err != nil {
		return err
	}
	for _, w := range writable {
		if st, err := stampOf(w); err == nil {
			b.listed = append(b.listed, listing{dir: w, stamp: st, sameInode: true})
		}
		if err := b.grant(w, write); err != nil {
			return err
		}
	}
	for _, d := range devices {
		if err := b.grant(d, deviceRights); err != nil {
			return err
		}
	}
	return nil
}

// builder collects the rules that grant hierarchies with what is hidden
// in them taken out.
type builder struct {
	hidden []string // real, clean
	rules  []landlock.Rule
	listed []listing
}

// grant grants access to path's hierarchy but not to what is hidden in
// it: a directory with something hidden beneath is not granted itself,
// its entries are, each in the same way.
func (b *builder) grant(path string, access landlock.AccessFSSet) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	return b.grantEntry(path, fi.Mode().Type(), access)
}

// grantEntry is grant for path, whose type (as a directory entry gives
// it, without a stat) is typ.
func (b *builder) grantEntry(path string, typ fs.FileMode, access landlock.AccessFSSet) error {
	if slices.ContainsFunc(b.hidden, func(h string) bool { return within(path, h) }) {
		return nil
	}
	switch {
	case typ&fs.ModeSymlink != 0:
		// A rule on it would hold its target, which may be hidden; the
		// target is granted, or not, where it lies.
		return nil
	case !typ.IsDir():
		b.add(path, access&fileRights)
		return nil
	case !slices.ContainsFunc(b.hidden, func(h string) bool { return within(h, path) }):
		b.add(path, access)
		return nil
	}
	st, err := stampOf(path)
	if err != nil {
		return nil // gone: nothing to grant
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		// Its entries stay out of reach: hiding fails closed.
		return nil
	}
	b.listed = append(b.listed, listing{dir: path, stamp: st})
	for _, e := range entries {
		if err := b.grantEntry(filepath.Join(path, e.Name()), e.Type(), access); err != nil {
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
