package proctree

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// forceDelay is how long after the grace a stopped tree's supervisor has
// to finish before it is killed itself, so that no owner waits forever on
// a supervisor that was stopped (SIGSTOP) or is otherwise stuck. Killing it
// leaves what remains of the tree to init: a last resort.
const forceDelay = 10 * time.Second

// maxIdle is how many supervisors a Starter keeps for the next trees.
const maxIdle = 2

// Starter starts trees, each under a supervisor. A supervisor whose tree
// ended cleanly (no process of it left) is kept for the next tree, so a
// tree starts about as fast as its command alone: a supervisor's own start
// (a Go binary's runtime and package initialisation, in a large binary
// several times the cost of starting bash) is paid once, not per tree. At
// most one tree runs under a supervisor at a time; a Starter keeps up to
// two idle. Build it with NewStarter (confined) or Unconfined; its zero
// value starts only Commands that name a Sandbox. Close ends the idle
// supervisors. Safe for concurrent use.
type Starter struct {
	conf confinement

	mu     sync.Mutex
	idle   []*supervised
	closed bool
	lastID uint64
}

// supervised is the owner's side of a supervisor process.
type supervised struct {
	cmd   *exec.Cmd
	conn  *net.UnixConn
	inbuf []byte
}

// Start starts c under a supervisor and returns once c's root runs. The
// tree ends when Stop is called, when the root exits (unless c.Keep), or
// when the calling process exits.
func (s *Starter) Start(c Command) (*Tree, error) {
	sb, err := s.conf.of(&c)
	if err != nil {
		return nil, err
	}
	c.Sandbox = sb
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.lastID++
	id := s.lastID
	var sup *supervised
	if n := len(s.idle); n > 0 {
		sup, s.idle = s.idle[n-1], s.idle[:n-1]
	}
	s.mu.Unlock()
	if sup != nil {
		t, err := s.run(sup, id, c)
		if !errors.Is(err, errSupervisorLost) {
			return t, err
		}
		// It was killed while it waited: start another.
	}
	sup, err = spawn()
	if err != nil {
		return nil, err
	}
	return s.run(sup, id, c)
}

// Close ends the idle supervisors and waits for them to exit. Trees still
// running are not affected; their supervisors exit when they end.
func (s *Starter) Close() {
	s.mu.Lock()
	s.closed = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, sup := range idle {
		sup.discard()
	}
}

// release takes back a supervisor whose tree ended, keeping it if it can
// serve again.
func (s *Starter) release(sup *supervised, clean bool) {
	if clean {
		s.mu.Lock()
		if !s.closed && len(s.idle) < maxIdle {
			s.idle = append(s.idle, sup)
			sup = nil
		}
		s.mu.Unlock()
	}
	if sup != nil {
		sup.discard()
	}
}

// spawn starts a supervisor: this binary again, under the marker name.
func spawn() (*supervised, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot start the process supervisor: %w", err)
	}
	// Room for a request as long as a command line can be.
	syscall.SetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF, 2*maxRequest)
	ours, theirs := os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "owner")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("cannot start the process supervisor: %w", err)
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{marker},
		Stderr:     os.Stderr,          // where a crash of it is told
		ExtraFiles: []*os.File{theirs}, // fdOwner
		// A group of its own: the terminal's signals to the owner's group
		// do not end a tree behind the owner's back.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("cannot start the process supervisor: %w", err)
	}
	return &supervised{cmd: cmd, conn: conn.(*net.UnixConn), inbuf: make([]byte, 4096)}, nil
}

// discard ends a supervisor and reaps it.
func (sup *supervised) discard() {
	sup.conn.Close() // it exits at the end of the socket
	sup.cmd.Wait()
}

var errSupervisorLost = errors.New("the process supervisor ended")

// receive reads the supervisor's next message about tree id.
func (sup *supervised) receive(id uint64) (message, error) {
	for {
		m, err := receive(sup.conn, sup.inbuf, nil)
		if err != nil {
			return m, fmt.Errorf("%w: %v", errSupervisorLost, err)
		}
		if m.id == id {
			return m, nil
		}
	}
}

// run asks sup to start c as tree id.
func (s *Starter) run(sup *supervised, id uint64, c Command) (*Tree, error) {
	outR, outW, err := outputPipe()
	if err != nil {
		s.release(sup, true)
		return nil, err
	}
	errR, errW, err := outputPipe()
	if err != nil {
		outR.Close()
		syscall.Close(outW)
		s.release(sup, true)
		return nil, err
	}
	req := request{Path: c.Path, Args: c.Args, Env: c.Env, Dir: c.Dir, Keep: c.Keep, Grace: c.grace(), Landlock: -1}
	fds := []int{outW, errW}
	if c.Stdin != nil {
		fds = append(fds, int(c.Stdin.Fd()))
	}
	rs, err := ruleset(c.Sandbox)
	if err != nil {
		closeFiles(outR, errR)
		closeFds([]int{outW, errW})
		s.release(sup, true)
		return nil, err
	}
	if rs != nil {
		req.Landlock = int64(rs.Flags())
		fds = append(fds, rs.Fd())
		defer rs.Close() // the supervisor has its own once it is sent
	}
	msg := append(fmt.Appendf(nil, "%s %d ", msgRun, id), req.encode()...)
	_, _, err = sup.conn.WriteMsgUnix(msg, syscall.UnixRights(fds...), nil)
	closeFds([]int{outW, errW}) // the supervisor has its own now
	var m message
	if err == nil {
		m, err = sup.receive(id)
	}
	if err != nil {
		closeFiles(outR, errR)
		sup.discard()
		return nil, fmt.Errorf("%w: %v", errSupervisorLost, err)
	}
	var root int
	if m.kind == msgStarted {
		root, err = strconv.Atoi(string(m.body))
	} else {
		err = fmt.Errorf("%s", m.body)
	}
	if err != nil {
		closeFiles(outR, errR)
		s.release(sup, m.kind == msgFailed)
		return nil, err
	}
	t := &Tree{starter: s, sup: sup, id: id, root: root, grace: c.grace(), done: make(chan struct{})}
	copied := make(chan struct{}, 2)
	for _, f := range []struct {
		w io.Writer
		r *os.File
	}{{c.Stdout, outR}, {c.Stderr, errR}} {
		go func() {
			copyOutput(orDiscard(f.w), f.r)
			copied <- struct{}{}
		}()
	}
	go t.wait(outR, errR, copied)
	return t, nil
}

// copyBuffers are the buffers through which a tree's output is copied,
// kept from tree to tree: io.Copy made a 32 KiB buffer for each stream of
// each tree, the largest allocation of a call on the owner's side.
var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// copyOutput copies r to w until r ends, through a kept buffer. r is
// wrapped so that its WriteTo, which would make a buffer of its own for
// any w but a file, is not used; a w that reads for itself (ReadFrom)
// still does, and a file is copied to by the kernel (splice) as before.
func copyOutput(w io.Writer, r *os.File) {
	if _, ok := w.(*os.File); ok {
		io.Copy(w, r)
		return
	}
	buf := copyBuffers.Get().(*[32 << 10]byte)
	defer copyBuffers.Put(buf)
	io.CopyBuffer(w, struct{ io.Reader }{r}, buf[:])
}

// Tree is a started command and every process it starts. Its methods are
// safe for concurrent use.
type Tree struct {
	starter *Starter
	sup     *supervised
	id      uint64
	root    int
	grace   time.Duration

	mu      sync.Mutex
	stopped bool
	ended   bool        // the supervisor said so: it is no longer this tree's
	force   *time.Timer // set by Stop

	done chan struct{}
	res  result // set before done closes
}

// wait follows the tree to its end, lets the output drain, gives the
// supervisor back and closes done.
func (t *Tree) wait(outR, errR *os.File, copied chan struct{}) {
	t.res.err = errors.New("the process supervisor ended without the command's status")
	clean := false
	for {
		m, err := t.sup.receive(t.id)
		if err != nil {
			break
		}
		if m.kind == msgEnded {
			how, status, _ := strings.Cut(string(m.body), " ")
			clean = how == endedClean
			if n, err := strconv.ParseUint(status, 10, 32); err == nil {
				t.res = result{status: syscall.WaitStatus(n)}
			}
			break
		}
	}
	t.mu.Lock()
	t.ended = true
	if t.force != nil {
		t.force.Stop()
	}
	t.mu.Unlock()
	if !clean {
		t.sup.discard() // reaps it, so that its fate is known
		if t.res.err != nil {
			t.res.err = fmt.Errorf("%w: %v", t.res.err, t.sup.cmd.ProcessState)
		}
	}
	drain := time.NewTimer(drainDelay)
	for range 2 {
		select {
		case <-copied:
		case <-drain.C:
			outR.Close() // a process the supervisor could not end holds it
			errR.Close()
			<-copied
		}
	}
	drain.Stop()
	closeFiles(outR, errR)
	if clean {
		t.starter.release(t.sup, true)
	}
	close(t.done)
}

// Pid is the root's process id, which is also its process group's.
func (t *Tree) Pid() int { return t.root }

// Stop ends the tree: SIGTERM to each of its processes, SIGKILL after the
// grace. It does not wait; Done closes when the tree has ended.
func (t *Tree) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.ended {
		return
	}
	t.stopped = true
	t.sup.conn.Write(fmt.Appendf(nil, "%s %d", msgStop, t.id))
	// A supervisor stopped by a signal could not act on it.
	t.sup.cmd.Process.Signal(syscall.SIGCONT)
	t.force = time.AfterFunc(t.grace+forceDelay, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.ended { // once ended, the supervisor may serve another tree
			t.sup.cmd.Process.Kill()
		}
	})
}

// Done is closed when every process of the tree has ended and its output
// was read.
func (t *Tree) Done() <-chan struct{} { return t.done }

// Wait waits for the tree to end and returns the root's wait status, or an
// error when it is unknown (the supervisor was killed).
func (t *Tree) Wait() (syscall.WaitStatus, error) {
	<-t.done
	return t.res.status, t.res.err
}

// outputPipe is a pipe for a tree's stdout or stderr: the read end the
// owner's, non-blocking, read through the runtime's poller; the write end
// a bare descriptor, blocking, as the tree's processes expect it, handed
// to the supervisor and closed. (os.Pipe would make both ends
// non-blocking and register both with the poller, and the write end
// would have to be made blocking again before it is sent.)
func outputPipe() (r *os.File, w int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, -1, os.NewSyscallError("pipe2", err)
	}
	if err := syscall.SetNonblock(p[0], true); err != nil {
		closeFds(p[:])
		return nil, -1, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), p[1], nil
}

// ruleset is sb's Landlock ruleset; nil when sb is, or when the kernel
// cannot enforce it.
func ruleset(sb *sandbox.Sandbox) (*sandbox.Ruleset, error) {
	if sb == nil {
		return nil, nil
	}
	rs, err := sb.Ruleset()
	if errors.Is(err, sandbox.ErrUnavailable) {
		return nil, nil
	}
	return rs, err
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
