package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// commandPaths are the words that name every command a user can run,
// the root's (none) first.
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	var paths [][]string
	root := newRootCommand()
	walk(root, func(c *cobra.Command) {
		if c != root && !c.IsAvailableCommand() && c.Name() != "help" {
			return
		}
		paths = append(paths, strings.Fields(c.CommandPath())[1:])
	})
	if len(paths) < 30 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	return paths
}

// Every command has a short description, usage and an example, and its
// help, asked for with -h or --help, goes to stdout with exit 0.
func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	walk(newRootCommand(), func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.HasParent() && c.Name() != "help" {
			return
		}
		if c.Short == "" || c.Example == "" {
			t.Errorf("%s: short description %q, example %q; want both", c.CommandPath(), c.Short, c.Example)
		}
		// A back-quoted word in a flag's usage is the name help shows for
		// its value: a placeholder, never a phrase.
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " ./") {
				t.Errorf("%s --%s: help names its value %q", c.CommandPath(), f.Name, name)
			}
		})
	})
	for _, path := range commandPaths(t) {
		for _, help := range []string{"--help", "-h"} {
			args := append(append([]string(nil), path...), help)
			out, errOut, code := toolbus(t, args...)
			if code != 0 || errOut != "" || !strings.Contains(out, "Usage:") || !strings.Contains(out, "Examples:") {
				t.Errorf("toolbus %s: exit %d, stderr %q, stdout %.300q; want exit 0 with usage and examples on stdout",
					strings.Join(args, " "), code, errOut, out)
			}
		}
	}
	// The flags of a command are named as they are typed.
	out, _, _ := toolbus(t, "cancel", "--help")
	if strings.Contains(out, "-id toolbus") {
		t.Errorf("cancel --help mangles a flag's name:\n%s", out)
	}
	out, _, _ = toolbus(t, "init", "--help")
	if !strings.Contains(out, "--add ROLE:NAME") || !strings.Contains(out, "--remove NAME") || strings.Contains(out, "Usage of init") {
		t.Errorf("init --help:\n%s", out)
	}
	out, _, _ = toolbus(t, "up", "--help")
	if !strings.Contains(out, "--identities string") || !strings.Contains(out, "--max-output bytes") {
		t.Errorf("up --help:\n%s", out)
	}
	// A command that holds others alone prints its help; an unknown one
	// under it is a mistake.
	if out, _, code := toolbus(t, "audit"); code != 0 || !strings.Contains(out, "whatif") {
		t.Errorf("toolbus audit: exit %d, %s", code, out)
	}
	if _, errOut, code := toolbus(t, "audit", "lsit"); code != 2 || !strings.Contains(errOut, `unknown command "lsit" for "toolbus audit"`) || !strings.Contains(errOut, "did you mean") || !strings.Contains(errOut, "list") {
		t.Errorf("toolbus audit lsit: exit %d, %s", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	flagOut, errOut, code := toolbus(t, "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("--version: exit %d, %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(flagOut), "\n")
	if !strings.HasPrefix(lines[0], "toolbus ") || len(lines[0]) <= len("toolbus ") || !strings.HasPrefix(lines[1], "revision: ") || !strings.HasPrefix(lines[len(lines)-1], "go: go1.") {
		t.Errorf("--version printed:\n%s", flagOut)
	}
	if out, _, code := toolbus(t, "version"); code != 0 || out != flagOut {
		t.Errorf("version: exit %d, %q; want what --version prints, %q", code, out, flagOut)
	}
	out, _, code := toolbus(t, "version", "--json")
	var b build
	if code != 0 || json.Unmarshal([]byte(out), &b) != nil || b.Version == "" || !strings.HasPrefix(b.Go, "go1.") {
		t.Errorf("version --json: exit %d, %s", code, out)
	}
}

// What the build recorded is reported; a version set at link time
// (-ldflags "-X main.version=V") comes first.
func TestVersionOfABuild(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/toolbus/toolbus", Version: "v0.0.0-20261126101500-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-11-26T10:15:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	text := versionText(buildOf(info, true))
	for _, want := range []string{"toolbus v0.0.0-20261126101500-0123456789ab+dirty\n", "revision: 0123456789abcdef, with uncommitted changes\n", "committed: 2026-11-26T10:15:00Z\n", "go: go1."} {
		if !strings.Contains(text, want) {
			t.Errorf("version of a build from a modified checkout lacks %q:\n%s", want, text)
		}
	}
	if text := versionText(buildOf(nil, false)); !strings.HasPrefix(text, "toolbus devel\nrevision: unknown") {
		t.Errorf("version of a binary with no build info:\n%s", text)
	}
	defer func(v string) { version = v }(version)
	version = "v1.2.3-test"
	if b := buildOf(info, true); b.Version != "v1.2.3-test" || b.Revision != "0123456789abcdef" {
		t.Errorf("with main.version set: %+v", b)
	}
}

// A flag every command that talks to a bus shares goes anywhere on the
// line; --nats beats $TOOLBUS_NATS, which beats the default.
func TestGlobalFlags(t *testing.T) {
	t.Parallel()
	flagBus, envBus := "nats://"+testkit.UnusedAddr(t), "nats://"+testkit.UnusedAddr(t)
	for _, tt := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--nats", flagBus, "tools", "list"}, flagBus},
		{nil, []string{"tools", "--nats", flagBus, "list"}, flagBus},
		{nil, []string{"tools", "list", "--nats", flagBus}, flagBus},
		{nil, []string{"--nats=" + flagBus, "audit", "list", "--since", "1h"}, flagBus},
		{[]string{"TOOLBUS_NATS=" + envBus}, []string{"--nats", flagBus, "mcp", "status"}, flagBus},
		{[]string{"TOOLBUS_NATS=" + envBus}, []string{"mcp", "status"}, envBus},
	} {
		_, errOut, code := toolbusWith(t, tt.env, tt.args...)
		if code != 1 || !strings.Contains(errOut, "cannot reach the bus at "+tt.want) {
			t.Errorf("%v toolbus %v: exit %d, %q; want it to try %s", tt.env, tt.args, code, errOut, tt.want)
		}
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command(bash, "-c", "source <("+bin("toolbus")+" completion bash) && complete -p toolbus").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "toolbus") {
		t.Errorf("the bash completion does not load: %v\n%s", err, out)
	}
	for _, shell := range []string{"zsh", "fish"} {
		if out, errOut, code := toolbus(t, "completion", shell); code != 0 || !strings.Contains(out, "toolbus") {
			t.Errorf("completion %s: exit %d, %s", shell, code, errOut)
		}
	}
	// What the shells ask the command: the commands under a word.
	out2, _, code := toolbus(t, "__complete", "audit", "w")
	if code != 0 || !strings.Contains(out2, "whatif") {
		t.Errorf("completion of audit w: exit %d, %s", code, out2)
	}
}

// With --json an error is a JSON object on stderr; without, a line.
func TestJSONErrors(t *testing.T) {
	t.Parallel()
	closed := "nats://" + testkit.UnusedAddr(t)
	for _, tt := range []struct {
		args     []string
		code     int
		typ      string
		contains string
	}{
		{[]string{"tools", "list", "--json", "--nats", closed}, 1, "ERROR", "cannot reach the bus"},
		{[]string{"call", "--json"}, 2, "USAGE", "call takes one tool name"},
		{[]string{"audit", "list", "--json", "--since", "yesterday"}, 2, "USAGE", "--since"},
		{[]string{"mcp", "status", "--frobnicate", "--json"}, 2, "USAGE", "unknown flag: --frobnicate"},
	} {
		out, errOut, code := toolbus(t, tt.args...)
		var e struct {
			Error    string `json:"error"`
			Type     string `json:"type"`
			ExitCode int    `json:"exitCode"`
		}
		if err := json.Unmarshal([]byte(errOut), &e); err != nil || code != tt.code || e.ExitCode != tt.code || e.Type != tt.typ || !strings.Contains(e.Error, tt.contains) || out != "" {
			t.Errorf("toolbus %v: exit %d, stderr %q (%v); want a JSON error of type %s, exit %d", tt.args, code, errOut, err, tt.typ, tt.code)
		}
	}
	_, errOut, code := toolbus(t, "tools", "list", "--nats", closed)
	if code != 1 || !strings.HasPrefix(errOut, "toolbus: cannot reach the bus") {
		t.Errorf("without --json: exit %d, %q", code, errOut)
	}
	_, errOut, code = toolbus(t, "call")
	if code != 2 || errOut != "toolbus: call takes one tool name\nRun 'toolbus call --help' for usage.\n" {
		t.Errorf("a usage error without --json: exit %d, %q", code, errOut)
	}
}

// A call whose command ran and exited non-zero exits 1, its status in
// the message and the result.
func TestCallOfAFailingCommand(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	// The built-in policy, its tests left out (they expect it to ask
	// about shell lines), with shell lines allowed.
	allowShell := t.TempDir()
	rules, _ := filepath.Glob("../../policy/*.rego")
	for _, f := range rules {
		if data, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		} else if !strings.HasSuffix(f, "_test.rego") {
			os.WriteFile(filepath.Join(allowShell, filepath.Base(f)), data, 0o644)
		}
	}
	os.WriteFile(filepath.Join(allowShell, "shell_allowed.rego"), []byte(`package toolbus

allow contains "this test runs shell lines" if input.tool.name == "run_shell_command"
`), 0o644)
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws,
		"--console", "off", "--mcp-listen", "off", "--policy", allowShell)
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")

	out, errOut, code := toolbus(t, "call", "run_shell_command", "--args", `{"command":"echo partial; exit 3"}`, "--nats", url)
	if code != 1 || !strings.Contains(out, "partial") || errOut != "toolbus: run_shell_command: the command exited with status 3\n" {
		t.Errorf("exit 3: exit %d, stdout %q, stderr %q; want 1, the output, and the status", code, out, errOut)
	}
	out, errOut, code = toolbus(t, "call", "run_shell_command", "--args", `{"command":"exit 128"}`, "--json", "--nats", url)
	var res events.Result
	var e struct {
		Type         string `json:"type"`
		ExitCode     int    `json:"exitCode"`
		InvocationID string `json:"invocationId"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &res) != nil || res.ExitCode == nil || *res.ExitCode != 128 || res.Error != nil ||
		json.Unmarshal([]byte(errOut), &e) != nil || e.Type != "EXIT_STATUS" || e.ExitCode != 1 || e.InvocationID != res.InvocationID {
		t.Errorf("exit 128 --json: exit %d, stdout %s, stderr %s", code, out, errOut)
	}
	// Killed by a signal: 128 + its number, as a shell says.
	out, _, code = toolbus(t, "call", "run_shell_command", "--args", `{"command":"kill -TERM $$"}`, "--json", "--nats", url)
	if code != 1 || json.Unmarshal([]byte(out), &res) != nil || res.ExitCode == nil || *res.ExitCode != 143 {
		t.Errorf("killed by SIGTERM: exit %d, %s", code, out)
	}
	if out, errOut, code := toolbus(t, "call", "run_shell_command", "--args", `{"command":"true"}`, "--nats", url); code != 0 {
		t.Errorf("exit 0: exit %d, %s %s", code, out, errOut)
	}
	// A shell completes a tool's name from the bus the line names.
	if out, _, code := toolbus(t, "__complete", "--nats", url, "call", "run_"); code != 0 || !strings.Contains(out, "run_shell_command\t") {
		t.Errorf("completion of a tool name: exit %d, %s", code, out)
	}
	// The policy still denies what it denies, whatever allows the rest.
	if _, errOut, code := toolbus(t, "call", "run_shell_command", "--args", `{"command":"rm -rf /"}`, "--nats", url); code != 4 || !strings.Contains(errOut, "POLICY_DENIED") {
		t.Errorf("rm -rf /: exit %d, %s", code, errOut)
	}
	// A --timeout that passes while the command runs.
	if _, errOut, code := toolbus(t, "call", "run_shell_command", "--timeout", "500ms", "--args", `{"command":"sleep 30"}`, "--nats", url); code != 124 || !strings.Contains(errOut, "TIMEOUT") {
		t.Errorf("sleep past --timeout: exit %d, %s", code, errOut)
	}
	up.stop(t)
}

// toolbus version --sbom prints the bill of materials of the binary it
// is, or of the one named; a binary named without --sbom is a mistake.
func TestVersionSBOM(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version", "--sbom"}, {"version", "--sbom", bin("executor")}} {
		out, errOut, code := toolbus(t, args...)
		var bill struct {
			SPDXVersion string `json:"spdxVersion"`
			Packages    []struct {
				Name string `json:"name"`
			} `json:"packages"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &bill) != nil || bill.SPDXVersion != "SPDX-2.3" || len(bill.Packages) < 10 || bill.Packages[0].Name != "github.com/toolbus/toolbus" {
			t.Errorf("toolbus %v: exit %d %.200s %s", args, code, out, errOut)
		}
	}
	if _, errOut, code := toolbus(t, "version", bin("executor")); code != 2 || !strings.Contains(errOut, "only with --sbom") {
		t.Errorf("version BINARY: exit %d %s", code, errOut)
	}
}
