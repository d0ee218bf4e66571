// Command stub stands in for every program of the sandbox in which the
// differential fuzz target of internal/policy runs shell lines
// (differential_test.go, sandbox_test.go). It is one static binary, hard
// linked under every command name, and has two jobs:
//
//   - As a program (any name), it runs nothing: it reports how it was run
//     (argv, the file the kernel executed, the working directory) to the
//     sandbox's recorder and exits 0. sudo and busybox, which run another
//     program, are modelled: they report and then execute what they would
//     run (wrap.go).
//   - As PID 1 of a fresh PID namespace, called "init", it builds the
//     sandbox's mounts, chroots, runs bash on the line under resource
//     limits and a deadline, collects the reports and prints them as JSON
//     (init.go).
//
// Reports travel over a Unix socket, not through a file: bash has no way
// to connect to a socket, so a line cannot forge, truncate or delete the
// records of what it ran.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/internal/testkit/sandboxwire"
)

// recorderSocket is where init listens, as seen inside the sandbox.
const recorderSocket = "/.sandbox/run/rec.sock"

func main() {
	if len(os.Args) > 2 && os.Args[1] == "init" && os.Getpid() == 1 {
		os.Exit(initMain(os.Args[2]))
	}
	os.Exit(stub())
}

func stub() int {
	cwd, _ := os.Getwd()
	rec := sandboxwire.Record{Argv: os.Args, Exe: execFn(), Cwd: cwd, UID: os.Getuid()}
	path, argv, wraps := wrapped(rec)
	if wraps {
		rec.Wraps = argv
	}
	if err := report(rec); err != nil {
		fmt.Fprintln(os.Stderr, "stub:", err)
		return 126
	}
	if !wraps {
		return 0
	}
	if path == "" {
		fmt.Fprintf(os.Stderr, "%s: %s: command not found\n", os.Args[0], argv[0])
		return 127
	}
	err := syscall.Exec(path, argv, os.Environ())
	fmt.Fprintln(os.Stderr, "stub:", err)
	return 126
}

// report sends rec to init and waits for its acknowledgement, so that
// once the stub has exited its run is on record.
func report(rec sandboxwire.Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("unix", recorderSocket, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(data); err != nil {
		return err
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		return err
	}
	ack := make([]byte, 1)
	if _, err := c.Read(ack); err != nil {
		return fmt.Errorf("no acknowledgement from the recorder: %w", err)
	}
	return nil
}

// atExecFn is AT_EXECFN of <linux/auxvec.h>, which x/sys does not name.
const atExecFn = 31

// execFn is the file name the kernel executed, from the auxiliary vector
// (AT_EXECFN): unlike argv[0] the caller cannot choose it, and it needs no
// /proc.
func execFn() string {
	vec, err := unix.Auxv()
	if err != nil {
		return ""
	}
	for _, kv := range vec {
		if kv[0] != atExecFn || kv[1] == 0 {
			continue
		}
		// The kernel put a NUL-terminated string at this address of our
		// stack; converting through a variable keeps go vet's unsafeptr
		// check quiet, which cannot know the address is not Go memory.
		addr := kv[1]
		p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
		var b strings.Builder
		for i := 0; i < 4096; i++ {
			c := *(*byte)(unsafe.Add(p, i))
			if c == 0 {
				break
			}
			b.WriteByte(c)
		}
		return b.String()
	}
	return ""
}
