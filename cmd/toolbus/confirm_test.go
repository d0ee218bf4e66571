package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/vt"
	"github.com/creack/pty"
)

// screenTimeout bounds every wait for the screen; it is generous, since
// the machine may be busy, and never part of what is asserted.
const screenTimeout = 30 * time.Second

// approverTerm is `toolbus confirm` running in an 80×24 pseudo-terminal,
// its output read back through a terminal emulator, as a person sees it.
type approverTerm struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	emu  *vt.Emulator
	done chan error
	// exited is closed when the program has ended and its output is read.
	exited chan struct{}
}

func startApprover(t *testing.T, url string, env []string, args ...string) *approverTerm {
	t.Helper()
	cmd := exec.Command(bin("toolbus"), append([]string{"confirm", "--nats", url}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"TERM=xterm-256color", "TOOLBUS_NATS="}, env...)...)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	a := &approverTerm{t: t, cmd: cmd, pty: f, emu: vt.NewEmulator(80, 24), done: make(chan error, 1),
		exited: make(chan struct{})}
	copied := make(chan struct{})
	go func() { // the program's output, into the emulator
		defer close(copied)
		buf := make([]byte, 32*1024)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				a.mu.Lock()
				a.emu.Write(buf[:n])
				a.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // the emulator's replies to the program's queries, back
		io.Copy(f, a.emu)
	}()
	go func() {
		err := cmd.Wait()
		<-copied
		close(a.exited)
		a.done <- err
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-a.done
		}
		a.emu.Close()
		f.Close()
	})
	return a
}

// screen is the emulator's screen as text.
func (a *approverTerm) screen() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.emu.String()
}

// waitScreen waits until the screen holds every one of want.
func (a *approverTerm) waitScreen(want ...string) string {
	a.t.Helper()
	deadline := time.Now().Add(screenTimeout)
	for {
		s := a.screen()
		missing := ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return s
		}
		select {
		case <-a.exited:
			a.t.Fatalf("toolbus confirm ended; the screen does not show %q; it shows:\n%s", missing, a.screen())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("the screen does not show %q; it shows:\n%s", missing, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitGone waits until the screen no longer holds s.
func (a *approverTerm) waitGone(s string) {
	a.t.Helper()
	deadline := time.Now().Add(screenTimeout)
	for strings.Contains(a.screen(), s) {
		if time.Now().After(deadline) {
			a.t.Fatalf("the screen still shows %q:\n%s", s, a.screen())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// press types keys as a person would.
func (a *approverTerm) press(keys string) {
	a.t.Helper()
	if _, err := a.pty.WriteString(keys); err != nil {
		a.t.Fatal(err)
	}
}

// quit presses q and waits for a clean exit.
func (a *approverTerm) quit() {
	a.t.Helper()
	a.press("q")
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Fatalf("toolbus confirm exited with %v; screen:\n%s", err, a.screen())
		}
	case <-time.After(screenTimeout):
		a.t.Fatalf("toolbus confirm did not quit on q; screen:\n%s", a.screen())
	}
}

// pendingCall is `toolbus call` running in the background, as an agent
// waiting for its approval.
type pendingCall struct {
	stdout, stderr bytes.Buffer
	done           chan int
}

func startCall(t *testing.T, url, tool, args string, extra ...string) *pendingCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, bin("toolbus"), append([]string{"call", tool, "--args", args, "--nats", url}, extra...)...)
	c := &pendingCall{done: make(chan int, 1)}
	cmd.Stdout, cmd.Stderr = &c.stdout, &c.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer cancel()
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			c.done <- 0
		case errors.As(err, &ee):
			c.done <- ee.ExitCode()
		default:
			c.done <- -1
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		cancel()
	})
	return c
}

// wait returns the call's exit code.
func (c *pendingCall) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-c.done:
		return code
	case <-time.After(screenTimeout):
		t.Fatal("the call did not return")
	}
	return -1
}

// upForConfirm runs `toolbus up` on a free port and returns its URL and
// workspace.
func upForConfirm(t *testing.T) (string, string) {
	t.Helper()
	ws := t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws)
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	t.Cleanup(func() { up.stop(t) })
	return url, ws
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestConfirmShowsRequest: a write waiting for approval is on the screen,
// its diff coloured as text, and escape sequences the agent put in the
// content show as text instead of acting on the terminal.
func TestConfirmShowsRequest(t *testing.T) {
	url, ws := upForConfirm(t)
	a := startApprover(t, url, nil, "--as", "approver:ada")
	a.waitScreen("toolbus confirm", "as approver:ada", "0 pending")

	content := "hello\n\x1b[2Jcleared?\n\x1b]0;pwned\x07title\n"
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/notes.txt")+`,"content":`+jsonString(content)+`}`)
	screen := a.waitScreen("1 pending", "write_file", "Diff:", "+hello", `+\x1b[2Jcleared?`, `+\x1b]0;pwned\x07title`)
	if !strings.Contains(screen, "Arguments:") && !strings.Contains(screen, "more lines") {
		t.Errorf("neither the arguments nor a note that they are cut:\n%s", screen)
	}
	t.Logf("screen:\n%s", screen)
	a.quit()
	select {
	case code := <-call.done:
		t.Errorf("the call returned (exit %d) with nobody answering: %s", code, call.stderr.String())
	default:
	}
}
