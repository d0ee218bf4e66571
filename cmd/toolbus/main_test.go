package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

var binDir string

// TestMain builds the commands once; the tests run them as a user would.
func TestMain(m *testing.M) {
	testkit.OverlapWaits()
	dir, err := os.MkdirTemp("", "toolbus-bin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	// The commands keep notes and contexts under the host's state dir:
	// the tests' own, so that a test's `toolbus up` never selects its bus
	// for the person who runs the tests, nor reads theirs.
	state, err := os.MkdirTemp("", "toolbus-state")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	// One build of the four, which links them side by side; into a
	// directory, each binary is named after its package's directory.
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), ".", "../bus", "../registry", "../executor")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.RemoveAll(state)
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

// daemon is a long-running command; its output is collected until it ends.
type daemon struct {
	cmd    *exec.Cmd
	lines  chan string // stdout, a line at a time
	output logOutput   // stderr, the log
	done   chan error
}

// logOutput is a daemon's stderr as it comes, which a test may read, or
// wait on for a line, while the daemon writes it.
type logOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed and replaced at each write
}

func (o *logOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.written != nil {
		close(o.written)
		o.written = nil
	}
	return o.buf.Write(p)
}

func (o *logOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// next is what was written so far and a channel closed at the next write.
func (o *logOutput) next() (string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.written == nil {
		o.written = make(chan struct{})
	}
	return o.buf.String(), o.written
}

// logWait bounds waitLog's and waitLine's waits, a guard against a test
// hanging, not a measurement: on a loaded machine a daemon may take
// longer than half a minute to start, and one that ends before it says
// what was waited for fails the wait at once.
const logWait = 2 * time.Minute

// waitLog waits until the daemon has logged a line containing s, and
// returns that line.
func (d *daemon) waitLog(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(logWait)
	for {
		out, written := d.output.next()
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, s) {
				return line
			}
		}
		select {
		case <-written:
		case err := <-d.done:
			d.done <- err // for stop and the cleanup
			t.Fatalf("%s ended (%v) before logging %q; stderr:\n%s", d.cmd.Path, err, s, d.output.String())
		case <-timeout:
			t.Fatalf("%s did not log %q within %s; stderr:\n%s", d.cmd.Path, s, logWait, d.output.String())
		}
	}
}

func startDaemon(t *testing.T, name string, args ...string) *daemon {
	t.Helper()
	return startDaemonWith(t, nil, name, args...)
}

// startDaemonWith is startDaemon with env added to the environment.
func startDaemonWith(t *testing.T, env []string, name string, args ...string) *daemon {
	t.Helper()
	return startDaemonIn(t, "", env, name, args...)
}

// startDaemonIn is startDaemonWith in the working directory dir ("" for
// the test's).
func startDaemonIn(t *testing.T, dir string, env []string, name string, args ...string) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(bin(name), args...), lines: make(chan string, 100), done: make(chan error, 1)}
	d.cmd.Dir = dir
	d.cmd.Env = append(append(os.Environ(), "TOOLBUS_NATS="), env...)
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = &d.output
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
		d.done <- d.cmd.Wait()
	}()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// waitLine returns the first output line containing s. A daemon that
// ends first fails it at once; logWait bounds the rest.
func (d *daemon) waitLine(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(logWait)
	for {
		select {
		case line, ok := <-d.lines:
			if !ok {
				t.Fatalf("%s ended before printing %q; stderr:\n%s", d.cmd.Path, s, d.output.String())
			}
			if strings.Contains(line, s) {
				return line
			}
		case <-timeout:
			t.Fatalf("%s did not print %q within %s; stderr:\n%s", d.cmd.Path, s, logWait, d.output.String())
		}
	}
}

// stop sends SIGINT and waits for a clean exit.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range d.lines {
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("%s exited with %v; stderr:\n%s", d.cmd.Path, err, d.output.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop on SIGINT", d.cmd.Path)
	}
}

// toolbus runs one short command and returns stdout, stderr and exit code.
func toolbus(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return toolbusWith(t, nil, args...)
}

// toolbusWith is toolbus with env added to the environment.
func toolbusWith(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runBin(t, "toolbus", env, args...)
}

// runBin runs the built command name with args, env added to the
// environment, to its end, and returns stdout, stderr and exit code.
func runBin(t *testing.T, name string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin(name), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func busURL(t *testing.T, line string) string {
	t.Helper()
	i := strings.Index(line, "nats://")
	if i < 0 {
		t.Fatalf("no URL in %q", line)
	}
	return strings.TrimSpace(line[i:])
}

func listJSON(t *testing.T, url string, extra ...string) []map[string]any {
	t.Helper()
	out, errOut, code := toolbus(t, append([]string{"tools", "list", "--json", "--nats", url}, extra...)...)
	if code != 0 {
		t.Fatalf("tools list exited %d: %s", code, errOut)
	}
	var tools []map[string]any
	if err := json.Unmarshal([]byte(out), &tools); err != nil {
		t.Fatalf("tools list --json printed no JSON array: %v\n%s", err, out)
	}
	return tools
}

func TestUpThenToolsList(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", t.TempDir())
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")

	tools := listJSON(t, url)
	if len(tools) != len(builtin.Specs()) {
		t.Fatalf("listed %d tools, want the %d built-ins", len(tools), len(builtin.Specs()))
	}
	for _, tool := range tools {
		for _, field := range []string{"name", "displayName", "description", "kind", "source", "active", "parameters"} {
			if _, ok := tool[field]; !ok {
				t.Errorf("tool %v has no %q", tool["name"], field)
			}
		}
	}
	if tools[0]["name"] != "list_directory" || tools[0]["source"] != "builtin" {
		t.Errorf("first tool: %v", tools[0])
	}

	out, _, code := toolbus(t, "tools", "get", "str_replace", "--json", "--nats", url)
	var tool events.Tool
	if code != 0 || json.Unmarshal([]byte(out), &tool) != nil || tool.Name != "replace" {
		t.Errorf("tools get str_replace: exit %d, %s", code, out)
	}
	out, _, code = toolbus(t, "tools", "list", "--format", "anthropic", "--nats", url)
	var decls []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &decls) != nil || len(decls) != len(builtin.Specs()) || len(decls[0].InputSchema) == 0 {
		t.Errorf("tools list --format anthropic: exit %d, %s", code, out)
	}
	if out, errOut, code := toolbus(t, "tools", "disable", "--category", "execution", "--nats", url); code != 0 || !strings.Contains(out, "deactivated run_shell_command") {
		t.Errorf("tools disable: exit %d, %s %s", code, out, errOut)
	}
	if n := len(listJSON(t, url, "--active")); n != len(builtin.Specs())-executionTools() {
		t.Errorf("%d active after disabling the execution category, want %d", n, len(builtin.Specs())-executionTools())
	}
	if _, errOut, code := toolbus(t, "tools", "get", "nope", "--nats", url); code != 1 || !strings.Contains(errOut, `no tool named "nope"`) {
		t.Errorf("tools get nope: exit %d, stderr %q", code, errOut)
	}
	up.stop(t)

	// A second run finds the catalogue and the toggle where it left them.
	up = startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", t.TempDir())
	url = busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	if n := len(listJSON(t, url, "--active")); n != len(builtin.Specs())-executionTools() {
		t.Errorf("after restart %d active, want %d", n, len(builtin.Specs())-executionTools())
	}
	up.stop(t)
}

func executionTools() int {
	n := 0
	for _, s := range builtin.Specs() {
		if s.Category == builtin.CategoryExecution {
			n++
		}
	}
	return n
}

// TestCallThroughUp is the invoke path from the command line: read,
// a chained dangerous command, and an edit with no approver connected.
func TestCallThroughUp(t *testing.T) {
	// A toolbus up of its own, on free ports and its own data.
	t.Parallel()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# readme of the workspace\n"), 0o644)
	// Without the console no approver is connected.
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--console", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")

	out, errOut, code := toolbus(t, "call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", url)
	if code != 0 || out != "# readme of the workspace\n" {
		t.Errorf("read_file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The bus named before the command, as a global flag.
	_, errOut, code = toolbus(t, "--nats", url, "call", "run_shell_command", "--args", `{"command":"ls && rm -rf /"}`)
	if code != 4 || !strings.Contains(errOut, "POLICY_DENIED") || !strings.Contains(errOut, "rm -rf /") {
		t.Errorf("chained rm: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = toolbus(t, "call", "write_file", "--args", `{"file_path":"x.txt","content":"hi"}`, "--nats", url)
	if code != 4 || !strings.Contains(errOut, "POLICY_DENIED") || !strings.Contains(errOut, "no approver is connected") {
		t.Errorf("write_file: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(ws, "x.txt")); err == nil {
		t.Error("the denied write happened")
	}
	// A deadline from the command line: reading a named pipe that no one
	// writes blocks, and the call ends with TIMEOUT all the same.
	fifo := filepath.Join(ws, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = toolbus(t, "call", "read_file", "--timeout", "300ms", "--args", `{"file_path":"pipe"}`, "--nats", url)
	if code != 124 || !strings.Contains(errOut, "TIMEOUT") {
		t.Errorf("blocked read with --timeout: exit %d, stderr %q", code, errOut)
	}
	// Release the abandoned read.
	if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		w.Close()
	}
	// Cancel by id from another command: the blocked read ends CANCELLED.
	blocked := exec.Command(bin("toolbus"), "call", "read_file", "--id", "cancel-me-1", "--args", `{"file_path":"pipe"}`, "--nats", url)
	var blockedErr bytes.Buffer
	blocked.Stderr = &blockedErr
	if err := blocked.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "toolbus cancel found the running call", func() bool {
		out, _, code := toolbus(t, "cancel", "cancel-me-1", "--nats", url)
		return code == 0 && strings.Contains(out, "cancelled cancel-me-1")
	})
	if err := blocked.Wait(); blocked.ProcessState.ExitCode() != 130 || !strings.Contains(blockedErr.String(), "CANCELLED") {
		t.Errorf("cancelled call: %v, stderr %q", err, blockedErr.String())
	}
	if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		w.Close()
	}
	out, _, code = toolbus(t, "call", "read_fiel", "--json", "--args", `{}`, "--nats", url)
	var res events.Result
	if code == 0 || json.Unmarshal([]byte(out), &res) != nil || res.Error == nil || res.Error.Type != events.ErrToolNotFound || res.InvocationID == "" {
		t.Errorf("unknown tool --json: exit %d, %s", code, out)
	}

	// Policy from the command line: a broken set is refused, nothing is pushed.
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "p.rego"), []byte("package toolbus\ndecision := {"), 0o644)
	if _, errOut, code := toolbus(t, "policy", "push", broken, "--nats", url); code == 0 || !strings.Contains(errOut, "nothing pushed") {
		t.Errorf("broken push: exit %d, %s", code, errOut)
	}
	if out, _, code := toolbus(t, "policy", "show", "--nats", url); code != 0 || !strings.Contains(out, "no policy pushed") {
		t.Errorf("policy show: exit %d, %s", code, out)
	}
	if out, errOut, code := toolbus(t, "policy", "push", "../../policy", "--nats", url); code != 0 || !strings.Contains(out, "pushed sha256:") {
		t.Errorf("push of the default policy: exit %d, %s %s", code, out, errOut)
	}
	if out, _, code := toolbus(t, "allowlist", "list", "--json", "--nats", url); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("allowlist list: exit %d, %s", code, out)
	}
	if _, errOut, code := toolbus(t, "allowlist", "revoke", "nope", "--nats", url); code != 1 || !strings.Contains(errOut, `no allowlist entry "nope"`) {
		t.Errorf("allowlist revoke of nothing: exit %d, %s", code, errOut)
	}
	if _, errOut, code := toolbus(t, "cancel", "no-such-call", "--nats", url); code != 1 || !strings.Contains(errOut, "no executor is running invocation no-such-call") {
		t.Errorf("cancel of nothing: exit %d, %s", code, errOut)
	}
	up.stop(t)
}

func TestCommandLineMistakes(t *testing.T) {
	closed := testkit.UnusedAddr(t)
	tests := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"tools", "list", "--format", "cobol", "--nats", "nats://" + closed}, 2, `unknown declaration format "cobol"`},
		{[]string{"tools", "list", "--nats", "nats://" + closed}, 1, "cannot reach the bus at nats://" + closed},
		{[]string{"tools", "get", "--nats", "nats://" + closed}, 2, "tools get takes one tool name"},
		{[]string{"up", "--settings", filepath.Join(t.TempDir(), "missing.json")}, 1, "settings:"},
	}
	for _, tt := range tests {
		_, errOut, code := toolbus(t, tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.says) {
			t.Errorf("toolbus %v: exit %d, stderr %q; want exit %d saying %q", tt.args, code, errOut, tt.code, tt.says)
		}
	}
}

// TestFleetDaemons runs the bus and the registry as separate processes, a
// provider registering from this process, and the CLI reading. The
// registry starts before the bus, and waits for it however long it takes;
// an executor told to stop while it waits for a bus stops cleanly.
func TestFleetDaemons(t *testing.T) {
	t.Parallel()
	addr := testkit.UnusedAddr(t)
	url := "nats://" + addr
	settings := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(settings, []byte(`{
		// Gemini CLI settings, comments and all
		"tools": {"exclude": ["run_shell_command"]},
		"theme": "Default"
	}`), 0o644)
	regd := startDaemon(t, "registry", "--nats", url, "--settings", settings)
	regd.waitLog(t, "waiting for the bus")
	busd := startDaemon(t, "bus", "--listen", addr, "--data", t.TempDir())
	busd.waitLog(t, "bus listening")
	regd.waitLog(t, "registry running")

	idle := startDaemon(t, "executor", "--nats", "nats://"+testkit.UnusedAddr(t), "--workspace", t.TempDir())
	idle.waitLog(t, "waiting for the bus")
	idle.stop(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	provider, err := bus.Connect(ctx, bus.Config{URL: url, Name: "provider", Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer provider.Close(ctx)
	c := registry.NewClient(provider.Conn(), events.Identity{ID: "exec@test", Role: "provider"})
	if _, err := c.Register(ctx, &events.RegisterRequest{Provider: "exec@test", Source: events.SourceBuiltin, Tools: builtin.Specs()}); err != nil {
		t.Fatal(err)
	}
	tools := listJSON(t, url)
	inactive := 0
	for _, tool := range tools {
		if tool["active"] == false {
			inactive++
			if tool["name"] != "run_shell_command" || tool["inactiveReason"] != "excluded by tools.exclude in settings.json (take it out, or toolbus tools enable run_shell_command)" {
				t.Errorf("inactive: %v (%v)", tool["name"], tool["inactiveReason"])
			}
		}
	}
	if len(tools) != len(builtin.Specs()) || inactive != 1 {
		t.Errorf("listed %d tools with %d inactive", len(tools), inactive)
	}
	// An executor daemon joins; a call from the command line reaches it.
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello from the fleet\n"), 0o644)
	execd := startDaemon(t, "executor", "--nats", url, "--workspace", ws, "--workspace-name", "fleet", "--id", "executor@fleet-test")
	execd.waitLog(t, "executor running") // it has registered its tools
	var out, errOut string
	var code int
	if !testkit.Poll(30*time.Second, func() bool {
		// The provider registered the built-ins for no workspace: the
		// call names the executor's.
		out, errOut, code = toolbus(t, "call", "read_file", "--workspace", "fleet", "--args", `{"file_path":"hello.txt"}`, "--nats", url)
		return code == 0 && out == "hello from the fleet\n"
	}) {
		t.Fatalf("call through the executor daemon: exit %d, %q %q\n%s", code, out, errOut, execd.output.String())
	}
	execd.stop(t)
	regd.stop(t)
	busd.stop(t)
}
