package portholder

import (
	"net"
	"os"
	"strings"
	"testing"
)

// The process that listens on a port is found by the port alone: this
// test's own, on a port the kernel chose.
func TestFindsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc here")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	h, ok := Find(port)
	if !ok || h.PID != os.Getpid() || !strings.Contains(h.Command, "portholder") {
		t.Errorf("Find(%d) = %+v, %v; want this process (pid %d)", port, h, ok, os.Getpid())
	}
	ln.Close()
	if h, ok := Find(port); ok {
		t.Errorf("a closed port is held by %v", h)
	}
}

// A command line is shown on one line, however its arguments were made.
func TestCommandLineIsOneLine(t *testing.T) {
	path := t.TempDir() + "/cmdline"
	os.WriteFile(path, []byte("toolbus\x00up\x00--data\x00a\nb\x1b[2J\x00"), 0o600)
	if got := commandLine(path); got != "toolbus up --data a?b?[2J" {
		t.Errorf("commandLine = %q", got)
	}
}
