package proctree

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// marker is the argv[0] under which the binary runs as a supervisor.
const marker = "toolbus-proctree-supervisor"

// fdOwner is the supervisor's end of its socket to the owner.
const fdOwner = 3

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from linux/prctl.h.
const prSetChildSubreaper = 36

// killPoll is how often the last phase of an end looks for processes left.
const killPoll = 5 * time.Millisecond

func init() {
	if len(os.Args) == 1 && os.Args[0] == marker {
		// Not on the goroutine that runs init: the runtime locks it to the
		// main thread until init ends, so that each time it waited and
		// woke (every message and every tree) its thread and another
		// handed the one P to each other, two thread wake-ups a turn.
		go func() { os.Exit(supervise()) }()
		select {}
	}
}

// supervisor is the supervising process: it runs one tree at a time, and
// the next only once no child of the last is left.
type supervisor struct {
	self  int
	owner *net.UnixConn
	msgs  chan message // from the owner; closed when the owner is gone
	sigs  chan os.Signal
	// subreaper says why the supervisor could not become a subreaper.
	subreaper error
}

// supervise is the supervisor's main: it returns its exit code.
func supervise() int {
	// Its goroutines hand work to each other and never need two CPUs; with
	// one P a hand-off does not wake another thread (a shell call measured
	// 1.2 times the cost of bash alone with the default, 1.05 with one).
	runtime.GOMAXPROCS(1)
	f := os.NewFile(fdOwner, "owner")
	c, err := net.FileConn(f) // a duplicate, closed on exec
	f.Close()
	if err != nil {
		return 2
	}
	s := &supervisor{self: os.Getpid(), owner: c.(*net.UnixConn), msgs: make(chan message), sigs: make(chan os.Signal, 1)}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		s.subreaper = fmt.Errorf("cannot become a child subreaper: %w", e)
	}
	// Caught, not ignored: an ignored signal would stay ignored in the
	// root across exec, a caught one is reset to its default there.
	signal.Notify(s.sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT)
	go s.read()
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return 0 // the owner closed the socket or exited
			}
			if m.kind != msgRun {
				closeFds(m.fds) // a stop that came after its tree ended
			} else if !s.run(m) {
				return 0
			}
		case <-s.sigs:
			return 0
		}
	}
}

// read passes the owner's messages on to msgs, and closes it at the end
// of the socket.
func (s *supervisor) read() {
	defer close(s.msgs)
	oob := make([]byte, syscall.CmsgSpace(4*4)) // stdout, stderr, stdin, ruleset
	// One buffer for every message, room for the longest request; the
	// body, a slice of it, is copied out at its own size. A fresh buffer
	// a message cost 256 KiB allocated and cleared for a request of a few
	// hundred bytes, and a collection every few trees.
	buf := make([]byte, maxRequest)
	for {
		m, err := receive(s.owner, buf, oob)
		if err != nil {
			return
		}
		m.body = bytes.Clone(m.body)
		s.msgs <- m
	}
}

func (s *supervisor) say(kind string, id uint64, detail any) {
	s.owner.Write(fmt.Appendf(nil, "%s %d %v", kind, id, detail))
}

// run runs one tree to its end. It says whether the supervisor can go on
// to the next: not when the owner is gone, a signal asked it to exit, or
// processes it could not kill are left; the ended message says so too.
func (s *supervisor) run(m message) bool {
	req, err := decodeRequest(m.body)
	files, ruleset := m.fds, -1
	if err == nil && req.Landlock >= 0 && len(files) > 0 {
		files, ruleset = files[:len(files)-1], files[len(files)-1]
	}
	switch {
	case err != nil:
	case s.subreaper != nil:
		err = s.subreaper
	case req.Landlock >= 0 && ruleset < 0:
		err = errors.New("no Landlock ruleset came with a confined command")
	case len(files) != 2 && len(files) != 3:
		err = fmt.Errorf("got %d files for the output and input, want 2 or 3", len(files))
	}
	if err != nil {
		closeFds(m.fds)
		s.say(msgFailed, m.id, err)
		return true
	}
	env, stdin := req.Env, uintptr(0)
	if env == nil {
		env = os.Environ()
	}
	if len(files) == 3 {
		stdin = uintptr(files[2])
	}
	attr := &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   env,
		Files: []uintptr{stdin, uintptr(files[0]), uintptr(files[1])},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	var root int
	if ruleset >= 0 {
		root, err = forkExecConfined(req.Path, req.Args, attr, ruleset, uint32(req.Landlock))
	} else {
		root, err = syscall.ForkExec(req.Path, req.Args, attr)
	}
	closeFds(m.fds) // the tree's processes hold them now: the owner reads to their end
	if err != nil {
		s.say(msgFailed, m.id, err)
		return true
	}
	s.say(msgStarted, m.id, root)
	t := &reaper{root: root, rootExited: make(chan struct{}), allGone: make(chan struct{})}
	go t.reap()
	goOn := s.follow(t, req, m.id)
	how := endedClean
	if !goOn {
		how = endedLast
	}
	s.say(msgEnded, m.id, t.ended(how))
	return goOn
}

// forkExecConfined forks and executes the root from a thread of its own,
// confined by the Landlock ruleset first: the child inherits the thread's
// confinement, and the thread, never unlocked, ends with its goroutine, so
// that the supervisor's other threads stay free for the next trees.
func forkExecConfined(path string, args []string, attr *syscall.ProcAttr, ruleset int, flags uint32) (int, error) {
	type forked struct {
		pid int
		err error
	}
	done := make(chan forked, 1)
	go func() {
		runtime.LockOSThread() // for good: see above
		if err := sandbox.RestrictThread(ruleset, flags); err != nil {
			done <- forked{err: err}
			return
		}
		pid, err := syscall.ForkExec(path, args, attr)
		done <- forked{pid, err}
	}()
	f := <-done
	return f.pid, f.err
}

// follow returns when the tree has ended: on its own, or ended by the
// supervisor when its root exits (unless it is kept), when the owner asks
// or leaves, or on a signal. It says whether the supervisor can go on.
func (s *supervisor) follow(t *reaper, req *request, id uint64) bool {
	rootExited := t.rootExited
	for {
		select {
		case <-t.allGone:
			return true
		case <-rootExited:
			rootExited = nil
			if !req.Keep {
				return s.end(t, req.Grace)
			}
		case o, ok := <-s.msgs:
			if !ok {
				s.end(t, req.Grace)
				return false
			}
			if o.kind == msgStop && o.id == id {
				return s.end(t, req.Grace)
			}
			closeFds(o.fds)
		case <-s.sigs:
			s.end(t, req.Grace)
			return false
		}
	}
}

// reaper waits for the children of one tree: its root, and every orphan of
// the tree re-parented to the supervisor.
type reaper struct {
	root       int
	rootExited chan struct{} // closed when the root was reaped and others remain
	allGone    chan struct{} // closed when no child is left
	mu         sync.Mutex
	status     string // the root's wait status once reaped
}

// ended is the detail of the ended message: how the tree ended and the
// root's wait status, "-" if it was not reaped.
func (r *reaper) ended(how string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return how + " " + cmp.Or(r.status, "-")
}

func (r *reaper) reap() {
	defer close(r.allGone)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD
		}
		if pid != r.root {
			continue
		}
		r.mu.Lock()
		r.status = strconv.FormatUint(uint64(ws), 10)
		r.mu.Unlock()
		if onlyZombies() {
			return // the common case: the root started nothing that outlived it
		}
		close(r.rootExited)
	}
}

// onlyZombies reaps the children that have ended and says whether none is
// left.
func onlyZombies() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			return true
		case pid == 0:
			return false
		}
	}
}

// end ends the tree: SIGTERM (and SIGCONT, so that a stopped process sees
// it) to every descendant, then after grace SIGKILL to every descendant,
// again until none is left and all are reaped. It returns false if what is
// left cannot be signalled at all (another user's process).
func (s *supervisor) end(t *reaper, grace time.Duration) bool {
	select {
	case <-t.allGone:
		return true
	default:
	}
	s.signal(syscall.SIGTERM, syscall.SIGCONT)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-t.allGone:
		return true
	case <-timer.C:
	}
	for {
		if n, denied := s.signal(syscall.SIGKILL); n > 0 && n == denied {
			return false
		}
		timer.Reset(killPoll)
		select {
		case <-t.allGone:
			return true
		case <-timer.C:
		}
	}
}

// signal sends sigs to every live descendant and returns how many there
// were and how many refused the signal.
func (s *supervisor) signal(sigs ...syscall.Signal) (n, denied int) {
	for _, pid := range descendants(s.self) {
		n++
		for _, sig := range sigs {
			if err := syscall.Kill(pid, sig); errors.Is(err, syscall.EPERM) {
				denied++
				break
			}
		}
	}
	return n, denied
}
