package policy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit/sandboxwire"
)

// The sandbox runs a shell line in a real bash where every program is a
// stub that only reports how it was run (testdata/stub): the differential
// fuzz target learns what a line really runs, and nothing the line does
// reaches the machine, even when the policy wrongly allowed `rm -rf /`.
//
// Each line runs under a fresh PID, mount, network, IPC and UTS namespace
// (and a user namespace when the test is not root), in a chroot of a
// read-only copy of bash, its libraries and the stubs, with a writable
// tmpfs as its working directory, as an unprivileged user with
// no_new_privs, resource limits and a deadline after which everything in
// the namespace is killed. testdata/stub/init.go is its PID 1.

// sandboxWorkdir is the line's working directory, the agent's workspace:
// a path no host has, so that the policy, which looks at the host's files
// to judge globs, sees the same nothing there as bash sees in the sandbox
// (but for the workspace's programs).
const sandboxWorkdir = "/toolbus-fuzz/work"

// sandboxDeadline is how long a line may run: lines are one-liners run by
// stubs that return at once, so only loops and bombs reach it.
const sandboxDeadline = 2 * time.Second

// sandboxLimits bound what a line takes from the machine: a fork bomb
// stops at Processes (counted for the sandbox's own user), a loop at the
// deadline or CPUSeconds, a file at FileBytes, memory at DataBytes per
// process (RLIMIT_DATA: a limit of address space would stop the Go stubs,
// whose runtime reserves much more than it uses).
var sandboxLimits = sandboxwire.Limits{Processes: 64, CPUSeconds: 4, FileBytes: 1 << 20, DataBytes: 128 << 20, OpenFiles: 256}

// systemDirs hold the stubs; PATH is /bin:/usr/bin.
var systemDirs = []string{"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"}

// workspacePrograms are files of the sandbox's working directory: the
// agent's own programs, which `./ls` runs instead of the system's ls.
var workspacePrograms = []string{"ls", "git", "cat", "touch"}

// realWrappers run the host's own binary: they only execute another
// program (a stub), and their real option grammar is what the policy's
// unwrapping must match. Without the host's binary they are stubs.
var realWrappers = []string{"env", "nice", "nohup", "timeout", "stdbuf", "xargs"}

// stubNames are the programs the fuzzer may name, besides every name in the
// host's system directories.
var stubNames = strings.Fields(`
	ls cat touch rm rmdir mv cp ln mkdir chmod chown chgrp dd shred wipefs truncate install mktemp
	echo printf true false test [ yes head tail tee sort uniq cut tr wc nl od xxd base64 sha256sum md5sum
	comm join paste split csplit fold fmt expand unexpand column rev tac shuf seq factor numfmt
	date sleep stat du df pwd basename dirname realpath readlink id whoami groups hostname uname
	uptime who w kill pkill killall pgrep ps top nproc free lsblk mount umount sync
	find xargs locate grep egrep fgrep rg ag ack sed awk gawk mawk perl python python3 ruby node deno
	bun php lua tclsh R julia java javac
	bash sh dash zsh ksh ash fish csh tcsh busybox toybox su sudo doas runuser chroot setsid
	env nice ionice nohup timeout stdbuf unbuffer script watch flock chrt taskset strace ltrace gdb
	time exec command builtin eval source
	git gh hub svn hg make cmake ninja meson bazel npm npx pnpm yarn pip pip3 pipx poetry uv go gofmt
	cargo rustc rustup gcc cc clang ld as docker podman kubectl helm terraform ansible
	curl wget nc ncat netcat socat ssh scp sftp rsync ftp telnet openssl gpg
	tar gzip gunzip zcat bzip2 xz unxz zip unzip 7z
	vi vim nvim nano emacs ed ex less more most man info diff patch cmp vimdiff
	crontab at batch systemctl service journalctl useradd usermod passwd chpasswd visudo
	mkfs mkfs.ext4 mkfs.xfs fdisk parted mkswap swapon swapoff losetup cryptsetup
	apt apt-get dpkg yum dnf rpm apk brew snap flatpak
	jq yq xmllint sqlite3 psql mysql redis-cli mongo
	open xdg-open osascript pbcopy pbpaste xclip notify-send
	x y z f g P ls2 l s`)

// sandbox is a root directory ready to run lines. Lines run one at a time
// or in parallel: each gets its own namespaces and tmpfs.
type sandbox struct {
	root     string
	init     string // the stub binary, outside the root's view
	userNS   bool
	uid, gid int
	// real names the wrappers that are the host's programs, not stubs.
	real map[string]bool
	// deadline is how long a line may run.
	deadline time.Duration
}

// sandboxHost says whether the sandbox can be built here.
func sandboxHost(userNS bool) error {
	if runtime.GOOS != "linux" {
		return errors.New("the sandbox needs Linux namespaces")
	}
	if !userNS && os.Geteuid() != 0 {
		return errors.New("not root (and the user-namespace sandbox was not asked for)")
	}
	if userNS {
		// One cheap probe: can this process make a user namespace at all?
		probe, err := exec.LookPath("true")
		if err != nil {
			return err
		}
		cmd := exec.Command(probe)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("no user namespaces: %v", err)
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return err
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		return err
	}
	return nil
}

// newTestSandbox builds a sandbox in tb's temporary directory: as root, a
// chroot entered as an unprivileged user; otherwise, with userNS, inside a
// user namespace. When it cannot be built the test is skipped, except
// under CI=true, where the sandbox must work: there, it fails.
func newTestSandbox(tb testing.TB, userNS bool) *sandbox {
	tb.Helper()
	sb, err := newSandbox(tb, userNS)
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("the shell sandbox cannot be built, and CI must run it: %v", err)
		}
		tb.Skipf("the shell sandbox cannot be built here: %v", err)
	}
	return sb
}

// defaultSandbox is root's sandbox as root, the user-namespace one
// otherwise.
func defaultSandbox(tb testing.TB) *sandbox {
	return newTestSandbox(tb, os.Geteuid() != 0)
}

func newSandbox(tb testing.TB, userNS bool) (*sandbox, error) {
	if err := sandboxHost(userNS); err != nil {
		return nil, err
	}
	dir := tb.TempDir()
	sb := &sandbox{root: filepath.Join(dir, "root"), userNS: userNS, deadline: sandboxDeadline}
	if !userNS {
		// A user of its own per test process, so that RLIMIT_NPROC counts
		// only this sandbox's processes, not another fuzz worker's.
		sb.uid = 200000 + os.Getpid()%100000
		sb.gid = sb.uid
	}
	for _, d := range append([]string{"", ".sandbox", ".sandbox/run", sandboxWorkdir, "tmp", "proc", "dev", "lib", "lib64"}, systemDirs...) {
		if err := os.MkdirAll(filepath.Join(sb.root, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(sb.root, 0o755); err != nil {
		return nil, err
	}
	stub := filepath.Join(sb.root, ".sandbox", "stub")
	if err := buildStub(stub); err != nil {
		return nil, err
	}
	sb.init = stub
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, err
	}
	if err := sb.installELF(bash, "/.sandbox/bash"); err != nil {
		return nil, err
	}
	sb.real = map[string]bool{}
	for _, name := range realWrappers {
		if ok, err := sb.installRealWrapper(name); err != nil {
			return nil, err
		} else if ok {
			sb.real[name] = true
		}
	}
	names := append(slices.Clone(stubNames), hostProgramNames()...)
	slices.Sort(names)
	names = slices.Compact(names)
	for _, name := range names {
		if sb.real[name] {
			continue
		}
		for _, d := range systemDirs {
			if err := os.Link(stub, filepath.Join(sb.root, d, name)); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, err
			}
		}
	}
	// /dev/null is bound over this file; /dev/fd needs /proc.
	if err := os.WriteFile(filepath.Join(sb.root, "dev/null"), nil, 0o666); err != nil {
		return nil, err
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(sb.root, "dev", name)); err != nil {
			return nil, err
		}
	}
	return sb, nil
}

// stubBuild finds or builds the stub program once per test process.
var stubBuild struct {
	once sync.Once
	path string
	err  error
}

// buildStub puts the stub program at dst. It is built static (so that it
// runs in the chroot without libraries) into the user's cache directory,
// under a name that is the hash of its source, the module's requirements
// and the Go version: test processes and fuzz workers share one build,
// and nothing is left behind per process.
func buildStub(dst string) error {
	stubBuild.once.Do(func() { stubBuild.path, stubBuild.err = cachedStub() })
	if stubBuild.err != nil {
		return stubBuild.err
	}
	return copyFile(stubBuild.path, dst, 0o755)
}

func cachedStub() (string, error) {
	h := sha256.New()
	io.WriteString(h, runtime.Version())
	sources, _ := filepath.Glob("testdata/stub/*.go")
	wire, _ := filepath.Glob("../testkit/sandboxwire/*.go")
	sources = append(sources, wire...)
	for _, f := range append(sources, "../../go.mod", "../../go.sum") {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(data))
		h.Write(data)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "toolbus-test")
	bin := filepath.Join(dir, "sandbox-stub-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// Built beside its final name and renamed: another process may be
	// building the same stub at the same time.
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.Command(gobin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", tmp, "./testdata/stub")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("build testdata/stub: %v\n%s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// installELF copies the host's program src to dst in the root, with the
// shared libraries it loads, at the paths the loader looks for them.
func (sb *sandbox) installELF(src, dst string) error {
	if err := os.MkdirAll(filepath.Join(sb.root, filepath.Dir(dst)), 0o755); err != nil {
		return err
	}
	if err := copyFile(src, filepath.Join(sb.root, dst), 0o755); err != nil {
		return err
	}
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", src, err)
	}
	for _, lib := range lddPaths(out) {
		target := filepath.Join(sb.root, lib)
		if _, err := os.Stat(target); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := copyFile(lib, target, 0o755); err != nil {
			return err
		}
	}
	return nil
}

var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// lddPaths lists the absolute paths of ldd's output: "libc.so.6 =>
// /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the loader's own line.
func lddPaths(out []byte) []string {
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := lddLine.FindStringSubmatch(sc.Text()); m != nil {
			paths = append(paths, m[1])
		}
	}
	return paths
}

// installRealWrapper installs the host's wrapper program under name in
// every system directory; false when the host has none.
func (sb *sandbox) installRealWrapper(name string) (bool, error) {
	src, err := exec.LookPath(name)
	if err != nil {
		return false, nil
	}
	if src, err = filepath.EvalSymlinks(src); err != nil {
		return false, nil
	}
	if name == "stdbuf" {
		// stdbuf preloads its library into the program it runs; without it,
		// it runs nothing, which would hide what the line asked for.
		lib := findStdbufLib()
		if lib == "" {
			return false, nil
		}
		if err := sb.installELF(lib, lib); err != nil {
			return false, err
		}
	}
	first := path.Join(systemDirs[0], name)
	if err := sb.installELF(src, first); err != nil {
		return false, err
	}
	for _, d := range systemDirs[1:] {
		if err := os.Link(filepath.Join(sb.root, first), filepath.Join(sb.root, d, name)); err != nil {
			return false, err
		}
	}
	return true, nil
}

func findStdbufLib() string {
	for _, p := range []string{"/usr/libexec/coreutils/libstdbuf.so", "/usr/lib/coreutils/libstdbuf.so", "/usr/lib/x86_64-linux-gnu/coreutils/libstdbuf.so", "/usr/lib64/coreutils/libstdbuf.so"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

var programName = regexp.MustCompile(`^[A-Za-z0-9_+][A-Za-z0-9._+-]*$`)

// hostProgramNames lists the programs of the host's system directories:
// whatever would run on this machine has a stub in the sandbox.
func hostProgramNames() []string {
	var names []string
	for _, d := range systemDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if programName.MatchString(e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	return names
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// run runs line in the sandbox and returns what ran. Its own deadline is
// a backstop for init's: killing init, PID 1, kills its whole namespace.
func (sb *sandbox) run(line string) (*sandboxwire.Report, error) {
	if strings.ContainsRune(line, 0) {
		// No program can be given a NUL in an argument: the shell tool's
		// exec of bash fails, and nothing runs.
		return &sandboxwire.Report{Exit: "not started: the line holds a NUL byte"}, nil
	}
	cfg, err := json.Marshal(sandboxwire.Config{
		Root: sb.root, Line: line, UID: sb.uid, GID: sb.gid,
		DeadlineMS: int(sb.deadline / time.Millisecond), Workdir: sandboxWorkdir, Workspace: workspacePrograms, Limits: sandboxLimits,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), sb.deadline+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sb.init, "init", string(cfg))
	cmd.Env = []string{}
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		// If this process dies, init and so the namespace die with it.
		Pdeathsig: syscall.SIGKILL,
	}
	if sb.userNS {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	var stdout bytes.Buffer
	stderr := &prefixBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("sandbox init: %v; stderr: %s", err, stderr.buf.String())
	}
	var rep sandboxwire.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("sandbox report: %v: %q", err, stdout.String())
	}
	rep.Stderr = stderr.buf.String()
	return &rep, nil
}

// prefixBuffer keeps the first max bytes written to it and discards the
// rest: a line printing without end costs no memory.
type prefixBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *prefixBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
