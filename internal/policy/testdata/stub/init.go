package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/internal/testkit/sandboxwire"
)

const (
	maxRecords     = 10000
	maxRecordBytes = 256 << 10
)

func initMain(configJSON string) int {
	var cfg sandboxwire.Config
	if err := json.Unmarshal([]byte(configJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox init: config:", err)
		return 2
	}
	rep, err := runInit(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox init:", err)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox init:", err)
		return 2
	}
	return 0
}

// runInit is the sandbox's init, one step after another as the kernel
// needs them done (namespaces, mounts, limits, then the command); split,
// its order would be harder to check against the sandbox's.
func runInit(cfg sandboxwire.Config) (*sandboxwire.Report, error) {
	rep := &sandboxwire.Report{Records: []sandboxwire.Record{}}
	root := cfg.Root
	// A fresh mount namespace still shares propagation with the host's
	// mounts: make every mount private first, so nothing below reaches it.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	if err := readOnlyBind(root); err != nil {
		return nil, err
	}
	mounts := []struct{ dir, opts string }{
		{cfg.Workdir, fmt.Sprintf("size=16m,nr_inodes=4096,mode=0755,uid=%d,gid=%d", cfg.UID, cfg.GID)},
		{"tmp", "size=8m,nr_inodes=1024,mode=1777"},
		{".sandbox/run", "size=1m,nr_inodes=64,mode=0755"},
	}
	for _, m := range mounts {
		if err := unix.Mount("tmpfs", filepath.Join(root, m.dir), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, m.opts); err != nil {
			return nil, fmt.Errorf("mount tmpfs on /%s: %w", m.dir, err)
		}
	}
	for _, name := range cfg.Workspace {
		f := filepath.Join(root, cfg.Workdir, name)
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			return nil, err
		}
		if err := unix.Mount(filepath.Join(root, ".sandbox/stub"), f, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("bind the workspace's %s: %w", name, err)
		}
	}
	if err := unix.Mount("/dev/null", filepath.Join(root, "dev/null"), "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("bind /dev/null: %w", err)
	}
	// Only the processes of the sandbox's PID namespace, not the host's
	// /proc/sys and friends.
	rep.Proc = unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "subset=pid,hidepid=invisible") == nil

	sock := filepath.Join(root, recorderSocket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the tmpfs goes with the namespace
	if err := os.Chmod(sock, 0o666); err != nil {
		return nil, err
	}
	if err := unix.Chroot(root); err != nil {
		return nil, fmt.Errorf("chroot: %w", err)
	}
	if err := unix.Chdir(cfg.Workdir); err != nil {
		return nil, err
	}
	null, err := unix.Open("/dev/null", unix.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if err := limit(cfg.Limits); err != nil {
		return nil, err
	}
	// Nothing started from here may gain privileges (set-user-ID files).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("no_new_privs: %w", err)
	}

	var mu sync.Mutex
	var handlers sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil { // out of descriptors: the stub waits and retries
				time.Sleep(time.Millisecond)
				continue
			}
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				defer c.Close()
				data, err := io.ReadAll(io.LimitReader(c, maxRecordBytes))
				var rec sandboxwire.Record
				if err == nil {
					err = json.Unmarshal(data, &rec)
				}
				mu.Lock()
				switch {
				case err != nil:
					rep.Garbled++
				case len(rep.Records) >= maxRecords:
					rep.Dropped++
				default:
					rep.Records = append(rep.Records, rec)
				}
				mu.Unlock()
				c.Write([]byte{1})
			}()
		}
	}()

	attr := &syscall.ProcAttr{
		Dir:   cfg.Workdir,
		Env:   []string{"PATH=/bin:/usr/bin"},
		Files: []uintptr{uintptr(null), 2, 2},
		Sys:   &syscall.SysProcAttr{},
	}
	if cfg.UID != 0 {
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}}
	}
	bash, err := syscall.ForkExec("/.sandbox/bash", []string{"bash", "-c", cfg.Line}, attr)
	if err != nil {
		return nil, fmt.Errorf("start bash: %w", err)
	}
	unix.Close(null)

	var timedOut atomic.Bool
	done := make(chan struct{})
	deadline := time.AfterFunc(time.Duration(cfg.DeadlineMS)*time.Millisecond, func() {
		timedOut.Store(true)
		// As PID 1, kill(-1) reaches every other process of the
		// namespace, and nothing else. Repeat: a fork bomb forks while we
		// kill.
		for {
			unix.Kill(-1, unix.SIGKILL)
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	// Orphans are re-parented to us: reap until no process is left.
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			break // ECHILD: the namespace is empty
		}
		if pid == bash {
			if ws.Signaled() {
				rep.Exit = "signal " + ws.Signal().String()
			} else {
				rep.Exit = fmt.Sprintf("exit %d", ws.ExitStatus())
			}
		}
	}
	close(done)
	deadline.Stop()
	ln.Close()
	handlers.Wait()
	rep.TimedOut = timedOut.Load()
	return rep, nil
}

// readOnlyBind makes root a read-only bind mount of itself, so that
// nothing in the sandbox can change its programs, whatever user it runs
// as. Flags the mount already has (noexec, atime) are kept: in a user
// namespace they are locked and a remount without them fails.
func readOnlyBind(root string) error {
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the root: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	if err := unix.Mount("", root, "", flags, ""); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return nil
}

// limit sets the resource limits init passes on to bash.
func limit(l sandboxwire.Limits) error {
	for _, r := range []struct {
		resource int
		value    uint64
	}{
		{unix.RLIMIT_NPROC, l.Processes}, {unix.RLIMIT_CPU, l.CPUSeconds}, {unix.RLIMIT_FSIZE, l.FileBytes},
		{unix.RLIMIT_DATA, l.DataBytes}, {unix.RLIMIT_NOFILE, l.OpenFiles}, {unix.RLIMIT_CORE, 0},
	} {
		if r.value == 0 && r.resource != unix.RLIMIT_CORE {
			continue
		}
		if err := unix.Setrlimit(r.resource, &unix.Rlimit{Cur: r.value, Max: r.value}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", r.resource, err)
		}
	}
	return nil
}
