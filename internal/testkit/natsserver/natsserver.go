// Package natsserver runs a nats-server binary of another version than
// the one toolbus embeds, with JetStream, for the tests that hold toolbus
// to the servers an organization already runs: 2.10, the oldest it
// supports, and Debian's 2.9, which it refuses. scripts/test.sh puts
// them under $TOOLBUS_NATS_SERVERS (default ~/.cache/toolbus/nats-server):
// 2.10 built from the Go module proxy, Debian's taken from its package.
// A test that finds one missing skips, or fails under CI=true.
package natsserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// The servers scripts/test.sh provides, by the directory each is in.
const (
	V210   = "2.10.29" // the oldest toolbus supports
	Debian = "debian"  // Debian 12's nats-server package: 2.9.10
)

// Binary is the path of the nats-server of version (V210, Debian).
func Binary(t testing.TB, version string) string {
	t.Helper()
	dir := os.Getenv("TOOLBUS_NATS_SERVERS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "toolbus", "nats-server")
	}
	path := filepath.Join(dir, version, "nats-server")
	if _, err := os.Stat(path); err != nil {
		testkit.Missing(t, "nats-server %s is not at %s: ./scripts/test.sh puts it there", version, path)
	}
	return path
}

// Server is a nats-server process the test started.
type Server struct {
	URL     string
	Version string // as the server says at its start
}

// Start runs the nats-server of version with JetStream, on a free
// loopback port and a store of its own, until the test ends.
func Start(t testing.TB, version string) *Server {
	t.Helper()
	bin := Binary(t, version)
	addr := testkit.UnusedAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start nats-server %s: %v", version, err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	// It logs to stderr: its version first, then that it is ready.
	s := &Server{URL: "nats://" + addr}
	ready := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			line := lines.Text()
			if _, v, ok := strings.Cut(line, "Version:"); ok && s.Version == "" {
				s.Version = strings.TrimSpace(v)
			}
			if strings.Contains(line, "Server is ready") {
				ready <- nil
				_, _ = io.Copy(io.Discard, stderr)
				return
			}
		}
		ready <- fmt.Errorf("nats-server %s ended before it was ready", version)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("nats-server %s was not ready in 30 s", version)
	}
	return s
}
