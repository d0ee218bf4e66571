// Package testkit holds what the tests of several packages share: golden
// files, waiting for a state with a deadline, and waiting on processes
// the code under test starts. Every test-support package lives below it,
// none beside the package it serves, so that one place shows what tests
// may lean on: parts started for a test (bustest, registrytest,
// executortest, approvetest), readers of what a test left behind
// (audittest), and the peers, fakes and measures tests run against.
package testkit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/tools/txtar"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// Golden compares files with the txtar archive at path, after rewriting
// the archive from files when update is set. comment heads the archive.
func Golden(t *testing.T, path, comment string, update bool, files []txtar.File) *txtar.Archive {
	t.Helper()
	if update {
		ar := &txtar.Archive{Comment: []byte(comment), Files: files}
		if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ar, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ar.Files) != len(files) {
		t.Fatalf("golden %s has %d files, the code gives %d (run with -update)", path, len(ar.Files), len(files))
	}
	for i, f := range ar.Files {
		if f.Name != files[i].Name || !bytes.Equal(f.Data, files[i].Data) {
			t.Errorf("%s differs from golden:\ngot:\n%s\nwant:\n%s", files[i].Name, files[i].Data, f.Data)
		}
	}
	return ar
}

// WaitPID waits for a command to write a process id to file.
func WaitPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	EventuallyWithin(t, 10*time.Second, "a process id was written to "+file, func() bool {
		data, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

// WaitGone waits until pid no longer exists, or is a zombie waiting for a
// reaper (it holds no resources), failing the test after ten seconds.
func WaitGone(t *testing.T, pid int) {
	t.Helper()
	gone := func() bool { return syscall.Kill(pid, 0) != nil || zombie(pid) }
	if !Poll(10*time.Second, gone) {
		t.Fatalf("process %d outlived its call", pid)
	}
}

func zombie(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

// NATSLeaks are the goroutines the NATS libraries leave behind on their
// own, which the tests that check for leaks let through, and nothing
// else:
//   - nats.go (v1.55.0), now and then, after an object store Put: Put
//     makes a JetStream context of its own, whose first async publish
//     starts resetPendingAcksOnReconnect; when Put's cleanup clears the
//     status channel before that goroutine has read it, the goroutine
//     waits on a nil channel forever. One per unlucky Put.
//   - nats-server (v2.15.2), when a server shuts down while a stream
//     with a source (the confirmation stream, bus.ConfirmStream) sets up
//     its source consumer: the goroutine waiting for the consumer's
//     answer has no quit channel and ends when its own timer fires.
func NATSLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"),
	}
}

// WaitReaped waits until pid no longer exists at all, not even as a
// zombie: it ended and its parent (or a subreaper) collected it.
func WaitReaped(t *testing.T, pid int) {
	t.Helper()
	if !Poll(10*time.Second, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH }) {
		state := "running"
		if zombie(pid) {
			state = "a zombie nobody reaps"
		}
		t.Fatalf("process %d outlived its call: %s", pid, state)
	}
}

// Process is a process as /proc shows it.
type Process struct {
	PID, Parent int
	// Group is its process group.
	Group int
	State string   // R, S, Z...
	Args  []string // its command line
}

// Processes lists every process /proc shows. A process that ends while
// it is read is left out.
func Processes() []Process {
	names, _ := os.ReadDir("/proc")
	var out []Process
	for _, n := range names {
		pid, err := strconv.Atoi(n.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + n.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command's name, which may hold spaces and
		// parentheses: state, the parent's pid, the process group.
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 3 {
			continue
		}
		p := Process{PID: pid, State: f[0]}
		p.Parent, _ = strconv.Atoi(f[1])
		p.Group, _ = strconv.Atoi(f[2])
		if cmdline, err := os.ReadFile("/proc/" + n.Name() + "/cmdline"); err == nil && len(cmdline) > 0 {
			p.Args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		}
		out = append(out, p)
	}
	return out
}

// Group lists the live members of process group pgid: zombies, which
// only wait to be reaped, are left out.
func Group(pgid int) []Process {
	var out []Process
	for _, p := range Processes() {
		if p.Group == pgid && p.State != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// Descendants lists the processes below pid, zombies included.
func Descendants(pid int) []Process {
	all := Processes()
	children := map[int][]Process{}
	for _, p := range all {
		children[p.Parent] = append(children[p.Parent], p)
	}
	var out []Process
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// Zombies lists the children of this process that ended and were not
// reaped.
func Zombies() []int {
	self := os.Getpid()
	var out []int
	for _, p := range Processes() {
		if p.State == "Z" && p.Parent == self {
			out = append(out, p.PID)
		}
	}
	return out
}

// OpenFiles counts this process's descriptors open on files whose name
// holds part: the temporary files of a kind that must all be closed.
func OpenFiles(t testing.TB, part string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.Contains(target, part) {
			n++
		}
	}
	return n
}

// Heavy skips the test in the fast tier (go test -short): it needs what
// the fast tier leaves out, named by needs (npm peers, a browser, a
// 3-node cluster, a soak or a flood). The full suite (scripts/test.sh)
// runs it.
func Heavy(tb testing.TB, needs string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("needs %s: not in the -short tier", needs)
	}
}

// Testdata is the absolute path of file name in the package's testdata/:
// a command that runs in another directory still finds it.
func Testdata(tb testing.TB, name string) string {
	tb.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// NeedsLandlock skips the test, or the subtest that asserts a Landlock
// confinement holds, on a kernel without Landlock (internal/sandbox),
// saying so: the code path runs everywhere, its enforcement only where
// the kernel has it. Under CI=true it fails instead: CI's kernel is
// expected to confine, and a skipped security test there is a hole
// nobody sees.
func NeedsLandlock(tb testing.TB) {
	tb.Helper()
	NeedsLandlockABI(tb, 1)
}

// Missing stops a test whose peer (an npm package, a browser, a
// container engine, a server binary) is not there: a skip on a
// developer's machine, a failure under CI=true, where a skip would hide
// the test that needs it.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf(format, args...)
	}
	tb.Skipf(format, args...)
}

// NeedsLandlockABI is NeedsLandlock for a confinement that needs Landlock
// ABI v or later: 4 for TCP connect, 6 for the signal and abstract socket
// scopes.
func NeedsLandlockABI(tb testing.TB, v int) {
	tb.Helper()
	abi, err := sandbox.ABI()
	if err == nil && abi < v {
		err = fmt.Errorf("this kernel has Landlock ABI %d, the confinement needs %d", abi, v)
	}
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("the confinement cannot be asserted, and CI=true: %v", err)
	}
	tb.Skipf("the confinement is not asserted: %v", err)
}
