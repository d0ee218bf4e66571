package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The owner and its supervisor talk over a SOCK_SEQPACKET socket pair, one
// message a datagram: "KIND ID DETAIL". ID numbers the tree, so that a stop
// sent as its tree ended is not taken for the next one's.
//
// Owner to supervisor: "run ID REQUEST" with the tree's stdout and stderr
// attached (SCM_RIGHTS), its stdin after them when it has one, and last
// the Landlock ruleset that confines it when one does; "stop ID". The end of the socket (the owner closed
// it, or exited) ends the running tree and the supervisor.
//
// Supervisor to owner: "started ID PID" or "failed ID WHY", then once no
// process of the tree is left "ended ID clean WAITSTATUS" (the supervisor is
// ready for the next tree), or "ended ID last WAITSTATUS" when it exits
// after this tree (its owner left, a signal told it to, or processes it
// could not kill are left). WAITSTATUS is the root's, "-" if it was not
// reaped.
const (
	msgRun     = "run"
	msgStop    = "stop"
	msgStarted = "started"
	msgFailed  = "failed"
	msgEnded   = "ended"

	endedClean = "clean"
	endedLast  = "last"
)

// request is the body of a run message: fields separated by NUL, which
// no argument, path or directory can hold; raw bytes otherwise, since a
// command line need not be UTF-8.
//
// The environment comes before the arguments, counted; a count of -1
// means the supervisor's own (which is the owner's).
//
// Landlock is the flags of the Landlock ruleset that confines the tree,
// whose file comes last with the message; -1 when none does.
type request struct {
	Path     string
	Args     []string
	Env      []string
	Dir      string
	Keep     bool
	Grace    time.Duration
	Landlock int64
}

func (r *request) encode() []byte {
	n := len(r.Env)
	if r.Env == nil {
		n = -1
	}
	b := fmt.Appendf(nil, "%t\x00%d\x00%d\x00%s\x00%s\x00%d", r.Keep, r.Grace, r.Landlock, r.Dir, r.Path, n)
	for _, a := range append(r.Env[:len(r.Env):len(r.Env)], r.Args...) {
		b = append(append(b, 0), a...)
	}
	return b
}

func decodeRequest(b []byte) (*request, error) {
	f := strings.Split(string(b), "\x00")
	if len(f) < 6 {
		return nil, fmt.Errorf("malformed request")
	}
	r := &request{Dir: f[3], Path: f[4]}
	var err1, err2, err3, err4 error
	r.Keep, err1 = strconv.ParseBool(f[0])
	grace, err2 := strconv.ParseInt(f[1], 10, 64)
	r.Landlock, err3 = strconv.ParseInt(f[2], 10, 64)
	nenv, err4 := strconv.Atoi(f[5])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("malformed request: %w", err)
	}
	rest := f[6:]
	if nenv > len(rest) {
		return nil, fmt.Errorf("malformed request: %d variables, %d fields", nenv, len(rest))
	}
	if nenv >= 0 {
		r.Env, rest = rest[:nenv:nenv], rest[nenv:]
	}
	r.Args = rest
	r.Grace = time.Duration(grace)
	return r, nil
}

type message struct {
	kind string
	id   uint64
	body []byte
	fds  []int
}

// maxRequest bounds a run message, and so a command line: Linux refuses
// a single argument over 128 KiB anyway (MAX_ARG_STRLEN).
const maxRequest = 256 << 10

// receive reads one message into buf; the message's body is a slice of
// buf. The files attached to it are closed on exec.
func receive(c *net.UnixConn, buf, oob []byte) (message, error) {
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return message{}, err
	}
	var m message
	if oobn > 0 {
		if cmsgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cmsgs {
				fds, _ := syscall.ParseUnixRights(&cm)
				m.fds = append(m.fds, fds...)
			}
		}
	}
	for _, fd := range m.fds {
		syscall.CloseOnExec(fd)
	}
	if n == 0 {
		closeFds(m.fds)
		return message{}, io.EOF // how a SOCK_SEQPACKET socket ends
	}
	fields := bytes.SplitN(buf[:n], []byte(" "), 3)
	if len(fields) >= 2 {
		m.kind = string(fields[0])
		m.id, err = strconv.ParseUint(string(fields[1]), 10, 64)
	}
	if len(fields) < 2 || err != nil || flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
		closeFds(m.fds)
		return message{}, fmt.Errorf("proctree: malformed message %.40q", buf[:n])
	}
	if len(fields) == 3 {
		m.body = fields[2]
	}
	return m, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}
