// Package portholder names the process that listens on a TCP port, so
// that a command refused its port can say who has it rather than print a
// bare bind error. It reads Linux's /proc: elsewhere, or for a process of
// another user whose descriptors this one may not read, it finds nothing.
package portholder

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Holder is a process that listens on a port.
type Holder struct {
	PID     int
	Command string // its command line, arguments joined by spaces
}

func (h Holder) String() string {
	if h.Command == "" {
		return fmt.Sprintf("pid %d", h.PID)
	}
	return fmt.Sprintf("pid %d (%s)", h.PID, h.Command)
}

// Find returns the process that listens on port, over IPv4 or IPv6, if it
// can be seen.
func Find(port int) (Holder, bool) {
	return find("/proc", port)
}

// find is Find over the proc file system mounted at proc.
func find(proc string, port int) (Holder, bool) {
	inodes := map[string]bool{}
	for _, table := range []string{"net/tcp", "net/tcp6"} {
		listening(filepath.Join(proc, table), port, inodes)
	}
	if len(inodes) == 0 {
		return Holder{}, false
	}
	pids, err := os.ReadDir(proc)
	if err != nil {
		return Holder{}, false
	}
	for _, p := range pids {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds := filepath.Join(proc, p.Name(), "fd")
		entries, err := os.ReadDir(fds)
		if err != nil {
			continue // gone, or another user's
		}
		for _, fd := range entries {
			link, err := os.Readlink(filepath.Join(fds, fd.Name()))
			if err != nil {
				continue
			}
			inode, ok := strings.CutPrefix(link, "socket:[")
			if ok && inodes[strings.TrimSuffix(inode, "]")] {
				return Holder{PID: pid, Command: commandLine(filepath.Join(proc, p.Name(), "cmdline"))}, true
			}
		}
	}
	return Holder{}, false
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// listening adds to inodes the inodes of the sockets of table (a
// /proc/net/tcp file) that listen on port.
func listening(table string, port int, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
			inodes[fields[9]] = true
		}
	}
}

// maxCommand bounds the command line shown.
const maxCommand = 200

// commandLine is the command line in a /proc/PID/cmdline file, its
// arguments joined by spaces, cut to maxCommand bytes.
func commandLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
	if len(s) > maxCommand {
		s = strings.ToValidUTF8(s[:maxCommand], "") + "…"
	}
	return s
}
