//go:build !linux

package proctree

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Tree is a started command and the processes of its process group (without
// Linux's child subreaper, a process that leaves the group is not held).
// Its methods are safe for concurrent use.
type Tree struct {
	cmd      *exec.Cmd
	grace    time.Duration
	stopOnce sync.Once
	done     chan struct{}
	res      result
}

// Start starts c in a process group of its own.
func Start(c Command) (*Tree, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{Path: c.Path, Args: c.Args, Dir: c.Dir, Env: c.Env, Stdout: outW, Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if c.Stdin != nil { // a nil *os.File is not a nil io.Reader
		cmd.Stdin = c.Stdin
	}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	t := &Tree{cmd: cmd, grace: c.grace(), done: make(chan struct{})}
	copied := make(chan struct{}, 2)
	go func() { io.Copy(orDiscard(c.Stdout), outR); copied <- struct{}{} }()
	go func() { io.Copy(orDiscard(c.Stderr), errR); copied <- struct{}{} }()
	go func() {
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			t.res.status = ws
		} else {
			t.res.err = err
		}
		if !c.Keep {
			t.Stop()
		}
		drain := time.NewTimer(t.grace + drainDelay)
		for range 2 {
			select {
			case <-copied:
			case <-drain.C:
				outR.Close()
				errR.Close()
				<-copied
			}
		}
		drain.Stop()
		outR.Close()
		errR.Close()
		close(t.done)
	}()
	return t, nil
}

// Pid is the root's process id, which is also its process group's.
func (t *Tree) Pid() int { return t.cmd.Process.Pid }

// Stop sends SIGTERM to the root's process group, and SIGKILL after the
// grace. It does not wait.
func (t *Tree) Stop() {
	t.stopOnce.Do(func() {
		pgid := t.cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM)
		time.AfterFunc(t.grace, func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	})
}

// Done is closed when the root has ended and its output was read.
func (t *Tree) Done() <-chan struct{} { return t.done }

// Wait waits for the tree to end and returns the root's wait status.
func (t *Tree) Wait() (syscall.WaitStatus, error) {
	<-t.done
	return t.res.status, t.res.err
}
