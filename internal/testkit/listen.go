package testkit

import (
	"net"
	"testing"
)

// Listen is a loopback TCP listener that accepts and drops connections
// until the test ends: a port a confined process may or may not reach. It
// returns its port.
func Listen(tb testing.TB) uint16 {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	AcceptAndDrop(tb, ln)
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// AcceptAndDrop accepts and closes ln's connections until the test ends,
// then closes ln.
func AcceptAndDrop(tb testing.TB, ln net.Listener) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tb.Cleanup(func() { ln.Close(); <-done })
}

// UnusedAddr is a loopback address nothing listens on now: for a part a
// test starts later, or one that must find nothing there.
func UnusedAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
