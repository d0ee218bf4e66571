package npmpeer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a peer may take to answer. It is a bound on
// a wait, not a measurement: a slow start passes, a hung one fails.
const startTimeout = 60 * time.Second

// process is a peer running in a process group of its own, so that
// stopping it stops whatever it started too.
type process struct {
	cmd  *exec.Cmd
	log  string        // the file holding its stdout and stderr
	done chan struct{} // closed once it has exited and been reaped
	once sync.Once     // stop kills once: a reaped group's id may be reused
}

// startGroup starts cmd as the leader of a new process group, its output
// in a file of the test's temporary directory, and stops it at cleanup.
// One goroutine waits for it, so that it is reaped whenever it exits.
func startGroup(t testing.TB, cmd *exec.Cmd) *process {
	t.Helper()
	log, err := os.CreateTemp(t.TempDir(), filepath.Base(cmd.Path)+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close() // the child holds its own copy
	// A file, not a pipe: the child never blocks on a full pipe, and no
	// copying goroutine outlives it.
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd, err)
	}
	p := &process{cmd: cmd, log: log.Name(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // killed at cleanup: its exit status says nothing
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop kills the whole process group and waits until the leader is
// reaped. The others of the group, if any, are no children of the test:
// they get the same SIGKILL, and init reaps them.
func (p *process) stop() {
	p.once.Do(func() {
		// The group id is the leader's pid (Setpgid). A leader that
		// exited by itself is reaped already, and its group id could in
		// principle be reused once its group is empty; the kill is sent
		// all the same, for the members it may have left behind.
		// ESRCH: all gone already.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// output is what the process has written so far, for error messages.
func (p *process) output() string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// EverythingHTTP starts server-everything with its streamable HTTP
// transport on a free loopback port, waits until it answers, and returns
// its MCP endpoint. The server is stopped at the test's cleanup, with its
// whole process group, and reaped.
func EverythingHTTP(t testing.TB) (url string) {
	t.Helper()
	url, _ = everythingHTTP(t)
	return url
}

// everythingHTTP is EverythingHTTP, also returning the server's pid (its
// process group's id) for the tests that check that it is gone.
func everythingHTTP(t testing.TB) (url string, pid int) {
	t.Helper()
	node, entry := Node(t), Require(t, Everything)
	// The server takes its port from PORT and cannot be asked for port 0
	// (it would print 0 as its port), so a free port is picked here and
	// may be taken by someone else before the server binds it: then the
	// server exits saying so, and another port is tried.
	const tries = 5
	for range tries {
		port := freePort(t)
		cmd := exec.Command(node, entry, "streamableHttp")
		cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
		p := startGroup(t, cmd)
		url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
		err := waitAnswer(p, url)
		if err == nil {
			return url, cmd.Process.Pid
		}
		p.stop()
		if !strings.Contains(p.output(), "already in use") {
			t.Fatalf("server-everything over HTTP: %v; its output:\n%s", err, p.output())
		}
	}
	t.Fatalf("server-everything over HTTP: %d free ports were taken before it could bind them", tries)
	return "", 0
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// errExited is waitAnswer's error for a server that exited before it
// answered.
var errExited = errors.New("exited before it answered")

// waitAnswer waits until url answers an HTTP GET with any status (the
// server answers 400 to a GET without a session), or the process exits.
func waitAnswer(p *process, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		if p.exited() {
			return errExited
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer from %s within %v", url, startTimeout)
		case <-p.done:
			return errExited
		case <-time.After(20 * time.Millisecond):
		}
	}
}
