package datadir_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/datadir"
)

// A second lock on a held directory is refused at once, naming the
// directory and the holder's pid, and leaves the directory as it was;
// once the holder lets go, the next one takes it.
func TestASecondLockIsRefusedWithTheHoldersPid(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Holds(dir) {
		t.Errorf("Holds(%s) = false for its own lock", dir)
	}
	second, err := datadir.Acquire(dir)
	var inUse *datadir.InUseError
	if second != nil || !errors.As(err, &inUse) || !errors.Is(err, datadir.ErrInUse) {
		t.Fatalf("second Acquire: %v, %v; want an InUseError", second, err)
	}
	if inUse.PID != os.Getpid() || inUse.Dir != dir {
		t.Errorf("InUseError names pid %d in %s, want %d in %s", inUse.PID, inUse.Dir, os.Getpid(), dir)
	}
	for _, want := range []string{dir, "pid " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != datadir.LockFile {
		t.Errorf("the directory holds %v, want only %s", entries, datadir.LockFile)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if first.Holds(dir) {
		t.Error("Holds after Close")
	}
	if err := first.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	third, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder let go: %v", err)
	}
	third.Close()
}

// A lock file left by a process that was killed does not block: the
// kernel released its lock, and the pid it wrote is replaced.
func TestALockOfAKilledProcessDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	holder := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsTheLock$")
	holder.Env = append(os.Environ(), "DATADIR_HOLD="+dir)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held" {
		holder.Process.Kill()
		t.Fatalf("the holder said %q, %v", line, err)
	}
	_, err = datadir.Acquire(dir)
	var inUse *datadir.InUseError
	if !errors.As(err, &inUse) || inUse.PID != holder.Process.Pid {
		holder.Process.Kill()
		t.Fatalf("Acquire while another process holds it: %v; want its pid %d", err, holder.Process.Pid)
	}
	holder.Process.Kill()
	holder.Wait()
	l, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	defer l.Close()
	pid, _ := os.ReadFile(filepath.Join(dir, datadir.LockFile))
	if strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("the lock file says %q, want this process's pid %d", pid, os.Getpid())
	}
}

// TestHelperHoldsTheLock is the process TestALockOfAKilledProcessDoesNotBlock
// kills: it takes the lock of $DATADIR_HOLD, says so, and waits.
func TestHelperHoldsTheLock(t *testing.T) {
	dir := os.Getenv("DATADIR_HOLD")
	if dir == "" {
		t.Skip("a helper process")
	}
	if _, err := datadir.Acquire(dir); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	time.Sleep(time.Hour) // until killed
}
