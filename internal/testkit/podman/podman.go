// Package podman runs the container engine the compose fleet's test needs:
// Debian's podman (rootful, with runc), and Debian's docker-compose
// talking to podman's Docker-compatible API socket. scripts/test.sh
// installs them; a test that needs them and finds them missing skips, or
// fails under CI=true.
//
// docker-compose rather than podman-compose: Debian's podman-compose
// (1.0.3) starts a service without waiting for the conditions of its
// depends_on (the identities made before the nodes start) and leaves the
// project's network behind on down; docker-compose does both as Docker's
// compose does.
//
// Only tests import this package.
package podman

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// Engine is podman on this machine, set up for the tests.
type Engine struct {
	// Podman and Compose are the paths of podman and docker-compose.
	Podman, Compose string
	// Env is what every podman and docker-compose command of the test
	// runs with, added to the test's environment: CONTAINERS_CONF naming
	// deploy/containers.conf, and, once Serve has run, DOCKER_HOST.
	Env []string
}

// Require finds podman and docker-compose and returns them with conf (the
// repository's deploy/containers.conf) as podman's settings. When either
// is missing, or the test does not run as root (the fleet runs rootful:
// rootless podman on this kernel was not made to work), the test skips,
// naming what installs them, or fails under CI=true.
func Require(tb testing.TB, conf string) *Engine {
	tb.Helper()
	testkit.Heavy(tb, "podman and docker-compose")
	e := &Engine{}
	for _, p := range []struct {
		path *string
		name string
	}{{&e.Podman, "podman"}, {&e.Compose, "docker-compose"}} {
		path, err := exec.LookPath(p.name)
		if err != nil {
			testkit.Missing(tb, "%s is not installed (%v): run ./scripts/test.sh as root, which installs Debian's podman, runc, docker-compose and debootstrap", p.name, err)
		}
		*p.path = path
	}
	if os.Geteuid() != 0 {
		testkit.Missing(tb, "the compose fleet runs on rootful podman: run the test as root")
	}
	abs, err := filepath.Abs(conf)
	if err != nil {
		tb.Fatal(err)
	}
	e.Env = []string{"CONTAINERS_CONF=" + abs}
	return e
}

// Serve starts podman's Docker-compatible API on a socket of the test's,
// for docker-compose (DOCKER_HOST, added to Env), and stops it when the
// test ends, after the cleanups registered later (the fleet's teardown)
// have run. The containers it started are not its children: they outlive
// it unless the test removes them.
func (e *Engine) Serve(tb testing.TB) {
	tb.Helper()
	sock := filepath.Join(tb.TempDir(), "podman.sock")
	cmd := exec.Command(e.Podman, "system", "service", "--time=0", "unix://"+sock)
	cmd.Env = append(os.Environ(), e.Env...)
	var out testkit.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			tb.Errorf("podman system service did not stop on SIGTERM in 30 s; killed")
		}
	})
	if !testkit.Poll(30*time.Second, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		tb.Fatalf("podman system service: no socket at %s in 30 s: %s", sock, out.String())
	}
	e.Env = append(e.Env, "DOCKER_HOST=unix://"+sock)
}

// Command is podman (name "podman") or docker-compose ("docker-compose")
// with args, in e's environment.
func (e *Engine) Command(name string, args ...string) *exec.Cmd {
	path := e.Podman
	if name == "docker-compose" {
		path = e.Compose
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), e.Env...)
	return cmd
}
