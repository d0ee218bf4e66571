package proctree

import (
	"bytes"
	"os"
	"strconv"
)

// descendants returns the live (not zombie) processes below pid, found by
// the parent links in /proc. It is a snapshot: a process may fork after it
// was taken, which is why ending a tree repeats it.
func descendants(pid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := make(map[int][]int)
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if ppid, live := parent(p); live {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for next := children[pid]; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p]...)
		out = append(out, p)
	}
	return out
}

// parent reads a process's parent from /proc/PID/stat and says whether
// the process still runs (is not a zombie).
func parent(pid int) (ppid int, live bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// "pid (comm) state ppid ...": comm may hold anything, ")" included.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 2 || string(f[0]) == "Z" || string(f[0]) == "X" {
		return 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	return ppid, err == nil
}
