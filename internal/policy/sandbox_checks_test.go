package policy_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit/sandboxwire"
)

// The sandbox is the differential fuzz target's oracle and its safety: if
// it recorded nothing, the target would pass every line; if it let a line
// out, the fuzzer could run `rm -rf /` for real. These tests hold both.

// sandboxModes are the sandboxes these checks run in: as root, the chroot
// entered as an unprivileged user (what CI runs); as a normal user, the
// one in a user namespace.
func sandboxModes(t *testing.T) map[string]*sandbox {
	// As root, only the root mode: a user namespace made by root maps its
	// user to the host's root, for whom the kernel enforces no process
	// limit (RLIMIT_NPROC spares the initial namespace's root), so a fork
	// bomb would not stop at the sandbox's limit there.
	if os.Geteuid() == 0 {
		return map[string]*sandbox{"root": newTestSandbox(t, false)}
	}
	return map[string]*sandbox{"userns": newTestSandbox(t, true)} // skips without user namespaces, or fails under CI
}

// runs lists records as "program argv...", sorted: programs started in
// the background report in any order.
func runs(recs []sandboxwire.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Program() + " " + strings.Join(r.Argv, " ")
		if r.Wraps != nil {
			out[i] += " => " + strings.Join(r.Wraps, " ")
		}
	}
	slices.Sort(out)
	return out
}

func TestSandboxRecordsWhatRuns(t *testing.T) {
	tests := []struct {
		line string
		want []string
		// real names the host wrapper the row needs.
		real string
	}{
		{"touch P; ls", []string{"/bin/ls ls", "/bin/touch touch P"}, ""},
		// An absolute path runs the stub, not the host's program.
		{"/usr/bin/touch P", []string{"/usr/bin/touch /usr/bin/touch P"}, ""},
		{"exec -a ls touch P", []string{"/bin/touch ls P"}, ""},
		{"./ls", []string{sandboxWorkdir + "/ls ./ls"}, ""},
		{"cd /tmp && .." + sandboxWorkdir + "/git status", []string{sandboxWorkdir + "/git .." + sandboxWorkdir + "/git status"}, ""},
		{"xargs -E ls touch P", []string{"/bin/touch touch P"}, "xargs"},
		{"env -S 'touch P' ls", []string{"/bin/touch touch P ls"}, "env"},
		{"nice -n 5 ls -l", []string{"/bin/ls ls -l"}, "nice"},
		{"timeout -s KILL 5 git status", []string{"/bin/git git status"}, "timeout"},
		{"stdbuf -o0 cat P", []string{"/bin/cat cat P"}, "stdbuf"},
		{"nohup ls", []string{"/bin/ls ls"}, "nohup"},
		{"sudo -u bob -- touch P", []string{"/bin/sudo sudo -u bob -- touch P => touch P", "/bin/touch touch P"}, ""},
		{"sudo -s ls", []string{"/bin/sudo sudo -s ls"}, ""},
		{"busybox touch P", []string{"/bin/busybox busybox touch P => touch P", "/bin/touch touch P"}, ""},
		{"cat <(touch P)", []string{"/bin/cat cat /dev/fd/63", "/bin/touch touch P"}, ""},
		{"ls; x='a[$(touch P)]'; (( x ))", []string{"/bin/ls ls", "/bin/touch touch P"}, ""},
		{"ls # \\\ntouch P", []string{"/bin/ls ls", "/bin/touch touch P"}, ""},
		// The working directory and /tmp are writable; the rest is not.
		{"echo 'touch P' > f; . ./f", []string{"/bin/touch touch P"}, ""},
		{"cd /tmp && echo 'touch P' > g && . ./g", []string{"/bin/touch touch P"}, ""},
		{"echo 'touch P' > /bin/ls; echo x > /.sandbox/bash; /bin/ls", []string{"/bin/ls /bin/ls"}, ""},
		// Nothing but stubs: a name the sandbox lacks runs nothing.
		{"no-such-program; ls", []string{"/bin/ls ls"}, ""},
		// No program takes a NUL in an argument: bash -c cannot start.
		{"touch P\x00; ls", nil, ""},
	}
	for mode, sb := range sandboxModes(t) {
		t.Run(mode, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.line, func(t *testing.T) {
					if tt.real != "" && !sb.real[tt.real] {
						t.Skipf("the host has no %s", tt.real)
					}
					rep, err := sb.run(tt.line)
					if err != nil {
						t.Fatal(err)
					}
					if got := runs(rep.Records); !slices.Equal(got, tt.want) {
						t.Errorf("got runs %q, want %q (bash: %s, stderr %q)", got, tt.want, rep.Exit, rep.Stderr)
					}
					for _, r := range rep.Records {
						if r.UID != sb.uid {
							t.Errorf("%s ran as user %d, want %d", r, r.UID, sb.uid)
						}
					}
					if rep.TimedOut || rep.Garbled+rep.Dropped > 0 {
						t.Errorf("timed out %v, %d reports garbled, %d dropped", rep.TimedOut, rep.Garbled, rep.Dropped)
					}
				})
			}
		})
	}
}

// TestSandboxKeepsTheHostOut: a line cannot reach the host's files or
// network, even by their real names.
func TestSandboxKeepsTheHostOut(t *testing.T) {
	host := t.TempDir()
	if err := os.Chmod(host, 0o777); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	line := fmt.Sprintf("echo x > %[1]s/escaped; /usr/bin/touch %[1]s/touched; cd %[1]s && echo x > here; echo x > /dev/tcp/127.0.0.1/%[2]d; ls %[1]s", host, port)
	for mode, sb := range sandboxModes(t) {
		t.Run(mode, func(t *testing.T) {
			rep, err := sb.run(line)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"/bin/ls ls " + host, "/usr/bin/touch /usr/bin/touch " + host + "/touched"}
			if got := runs(rep.Records); !slices.Equal(got, want) {
				t.Errorf("got runs %q, want %q", got, want)
			}
			if entries, _ := os.ReadDir(host); len(entries) > 0 {
				t.Errorf("the line wrote into the host's %s: %v", host, entries)
			}
		})
	}
	// A connection from the sandbox would be waiting to be accepted.
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Error("the line connected to the host's network")
	}
}

// TestSandboxStopsBombs: fork bombs, endless loops, orphans and memory
// bombs end at the sandbox's limits and deadline, and nothing of them
// survives the run.
func TestSandboxStopsBombs(t *testing.T) {
	tests := []struct {
		line string
		// stop is how bash ends: "timeout" when the deadline kills it.
		stop string
		// deadline, when set, replaces the sandbox's.
		deadline time.Duration
	}{
		{":(){ :|:& };:", "timeout", 0},
		{"while :; do :; done", "timeout", 0},
		{"(trap '' HUP TERM; while :; do :; done) & disown; ls", "timeout", 0},
		// Unlimited, this allocates 300 MB and runs ls; here bash cannot
		// allocate it and stops. Formatting 300 MB takes a while on a busy
		// machine: the deadline must not be what stops it.
		{"printf -v x '%*s' 300000000 ''; ls", "exit 2", time.Minute},
		{"while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx >> f; done", "signal file size limit exceeded", time.Minute},
	}
	for mode, sb := range sandboxModes(t) {
		t.Run(mode, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.line, func(t *testing.T) {
					sb := *sb
					if tt.deadline != 0 {
						sb.deadline = tt.deadline
					}
					rep, err := sb.run(tt.line)
					if err != nil {
						t.Fatal(err)
					}
					stop := rep.Exit
					if rep.TimedOut {
						stop = "timeout"
					}
					if stop != tt.stop {
						t.Errorf("bash stopped by %s, want %s (stderr %q)", stop, tt.stop, rep.Stderr)
					}
					if tt.stop != "timeout" && len(rep.Records) > 0 {
						t.Errorf("the line ran on past the limit: %q", runs(rep.Records))
					}
					if !sb.userNS {
						if pids := processesOf(sb.uid); len(pids) > 0 {
							t.Errorf("processes of the sandbox's user %d survive the run: %v", sb.uid, pids)
						}
					}
				})
			}
		})
	}
}

// TestSandboxLimitsProcesses: however many processes a line starts, no more
// than the limit run at once.
func TestSandboxLimitsProcesses(t *testing.T) {
	for mode, sb := range sandboxModes(t) {
		t.Run(mode, func(t *testing.T) {
			rep, err := sb.run("for i in {1..200}; do (ls; while :; do :; done) & done; wait")
			if err != nil {
				t.Fatal(err)
			}
			if n := len(rep.Records); n == 0 || n >= int(sandboxLimits.Processes) {
				t.Errorf("%d subshells ran ls, want between 1 and %d (the process limit)", n, sandboxLimits.Processes-1)
			}
		})
	}
}

// processesOf lists the host's processes run by uid.
func processesOf(uid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestUncovered checks the oracle itself on records of known runs.
func TestUncovered(t *testing.T) {
	rec := func(exe, cwd string, argv ...string) sandboxwire.Record {
		return sandboxwire.Record{Argv: argv, Exe: exe, Cwd: cwd}
	}
	tests := []struct {
		name       string
		run        sandboxwire.Record
		remembered []string
		covered    bool
	}{
		{"ls", rec("/bin/ls", sandboxWorkdir, "ls", "-la"), []string{"ls"}, true},
		{"/usr/bin/ls", rec("/usr/bin/ls", sandboxWorkdir, "/usr/bin/ls"), []string{"ls"}, true},
		{"touch", rec("/bin/touch", sandboxWorkdir, "touch", "P"), []string{"ls"}, false},
		{"exec -a ls touch", rec("/bin/touch", sandboxWorkdir, "ls", "P"), []string{"ls"}, false},
		{"exec -a touch ls", rec("/bin/ls", sandboxWorkdir, "touch"), []string{"ls"}, false},
		{"./ls", rec("./ls", sandboxWorkdir, "./ls"), []string{"ls"}, false},
		{"workspace ls", rec(sandboxWorkdir+"/ls", "/tmp", sandboxWorkdir+"/ls"), []string{"ls"}, false},
		{"git status", rec("/bin/git", sandboxWorkdir, "git", "status", "-s"), []string{"git status", "cat"}, true},
		{"git log", rec("/bin/git", sandboxWorkdir, "git", "log"), []string{"git status", "cat"}, false},
		{"git -c", rec("/bin/git", sandboxWorkdir, "git", "-c", "alias.status=!touch P", "status"), []string{"git status", "cat"}, false},
		{"git", rec("/bin/git", sandboxWorkdir, "git"), []string{"git status", "cat"}, false},
		{"cat", rec("/bin/cat", sandboxWorkdir, "cat", "/etc/passwd"), []string{"git status", "cat"}, true},
		{"ls under git status", rec("/bin/ls", sandboxWorkdir, "ls"), []string{"git status", "cat"}, false},
		{"sudo executing", sandboxwire.Record{Argv: []string{"sudo", "touch"}, Exe: "/bin/sudo", Wraps: []string{"touch"}}, []string{"ls"}, true},
		{"sudo -s", rec("/bin/sudo", sandboxWorkdir, "sudo", "-s"), []string{"ls"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := len(uncovered([]sandboxwire.Record{tt.run}, tt.remembered)) == 0
			if got != tt.covered {
				t.Errorf("%s under %q: covered %v, want %v", tt.run, tt.remembered, got, tt.covered)
			}
		})
	}
}
