package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/buscontext"
)

// `toolbus up` writes its context and selects it: the commands after it
// talk to its bus, wherever it listens, as its developer, with no --nats.
// --nats and $TOOLBUS_NATS win over a context, --context picks another,
// and once up has stopped a command says so.
func TestContexts(t *testing.T) {
	env := []string{"XDG_STATE_HOME=" + t.TempDir(), "TOOLBUS_NATS=", "TOOLBUS_CONTEXT="}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return toolbusWith(t, env, args...)
	}
	up := startDaemonWith(t, env, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", t.TempDir(),
		"--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	if line := up.waitLine(t, "context:"); !strings.Contains(line, "local, selected") {
		t.Errorf("up says of its context: %q", line)
	}
	up.waitLine(t, "Press Ctrl-C to stop.")

	// Policy show needs the developer (an admin): the context names its
	// identity as well as the bus.
	if out, errOut, code := run("policy", "show"); code != 0 || !strings.Contains(out, "no policy pushed") {
		t.Errorf("policy show through the context: exit %d %q %s", code, out, errOut)
	}
	out, errOut, code := run("context", "show", "--json")
	var c buscontext.Context
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || c.Name != "local" || c.URL != url || c.PID != up.cmd.Process.Pid || !filepath.IsAbs(c.Identity) {
		t.Fatalf("context show: exit %d %s %s", code, out, errOut)
	}
	if _, err := os.Stat(c.Identity); err != nil {
		t.Errorf("the context's identity: %v", err)
	}
	// audit verify finds the key in the data dir the context names.
	if out, errOut, code := run("audit", "verify"); code != 0 || !strings.Contains(out, "ok: no sequence is missing") {
		t.Errorf("audit verify through the context: exit %d %s %s", code, out, errOut)
	}
	if out, _, code := run("context", "list"); code != 0 || !strings.Contains(out, "*  local") || !strings.Contains(out, "running") {
		t.Errorf("context list: exit %d\n%s", code, out)
	}

	// Another context, not selected; --context and the environment pick it.
	if out, errOut, code := run("context", "add", "nowhere", "--nats", "nats://127.0.0.1:1", "--select=false"); code != 0 || !strings.Contains(out, "context nowhere made") {
		t.Fatalf("context add: exit %d %s %s", code, out, errOut)
	}
	for _, args := range [][]string{{"--context", "nowhere", "tools", "list"}, {"tools", "list", "--context", "nowhere"}} {
		if _, errOut, code := run(args...); code != 1 || !strings.Contains(errOut, "cannot reach the bus at nats://127.0.0.1:1") {
			t.Errorf("%q: exit %d %s", args, code, errOut)
		}
	}
	if _, errOut, code := toolbusWith(t, append(env, "TOOLBUS_CONTEXT=nowhere"), "tools", "list"); code != 1 || !strings.Contains(errOut, "nats://127.0.0.1:1") {
		t.Errorf("TOOLBUS_CONTEXT=nowhere: exit %d %s", code, errOut)
	}
	if _, errOut, code := run("--context", "nosuch", "tools", "list"); code != 2 || !strings.Contains(errOut, `no context "nosuch"`) {
		t.Errorf("--context nosuch: exit %d %s", code, errOut)
	}
	if _, errOut, code := toolbusWith(t, append(env, "TOOLBUS_NATS=nats://127.0.0.1:1"), "tools", "list"); code != 1 || !strings.Contains(errOut, "nats://127.0.0.1:1") {
		t.Errorf("$TOOLBUS_NATS over the context: exit %d %s", code, errOut)
	}
	if out, errOut, code := run("tools", "list", "--nats", url); code != 0 || !strings.Contains(out, "read_file") {
		t.Errorf("--nats: exit %d %s", code, errOut)
	}

	up.stop(t)
	if _, errOut, code := run("tools", "list"); code != 1 || !strings.Contains(errOut, fmt.Sprintf("the context local names it, written by a `toolbus up`, pid %d, that has stopped", c.PID)) {
		t.Errorf("after up stopped: exit %d %s", code, errOut)
	}
	if _, _, code := run("context", "use", "nowhere"); code != 0 {
		t.Errorf("context use: exit %d", code)
	}
	if out, _, _ := run("context", "show"); !strings.Contains(out, "nats://127.0.0.1:1") {
		t.Errorf("the selected context after use: %s", out)
	}
	if _, _, code := run("context", "rm", "nowhere"); code != 0 {
		t.Errorf("context rm: exit %d", code)
	}
	if _, errOut, code := run("context", "show"); code != 1 || !strings.Contains(errOut, "no context is selected") {
		t.Errorf("context show with none selected: exit %d %s", code, errOut)
	}
}

// When its port is taken, up says by whom and how to choose another.
func TestUpSaysWhoHoldsItsPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, errOut, code := toolbusWith(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "up", "--listen", ln.Addr().String(), "--data", t.TempDir(),
		"--workspace", t.TempDir(), "--console", "off", "--mcp-listen", "off")
	want := fmt.Sprintf("pid %d (", os.Getpid())
	if code != 1 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "holds the port") ||
		!strings.Contains(errOut, "--listen 127.0.0.1:"+strconv.Itoa(port+1)) {
		t.Errorf("up on a taken port: exit %d %s; want it to name %s", code, errOut, want)
	}
}

// A project's .mcp.json in the working directory is read as its
// .gemini/settings.json is; `mcp status --fail` fails while one of its
// servers is down, for a script to see.
func TestUpReadsTheProjectsMCPJSON(t *testing.T) {
	project := t.TempDir()
	var cfg struct {
		MCPServers map[string]any `json:"mcpServers"`
	}
	data, err := os.ReadFile(everythingSettings(t, "everything", nil))
	if err != nil || json.Unmarshal(data, &cfg) != nil {
		t.Fatal(err)
	}
	cfg.MCPServers["down"] = map[string]any{"type": "http", "url": "http://127.0.0.1:1/mcp"}
	data, _ = json.Marshal(cfg)
	os.WriteFile(filepath.Join(project, ".mcp.json"), data, 0o644)
	up := startDaemonIn(t, project, nil, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(),
		"--workspace", project, "--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	if line := up.waitLine(t, "mcp:"); !strings.Contains(line, ".mcp.json") {
		t.Errorf("up names its MCP config: %q", line)
	}
	checkHosted(t, url, "everything", "stdio")
	if out, errOut, code := toolbus(t, "mcp", "status", "--nats", url); code != 0 || !strings.Contains(out, "down") {
		t.Errorf("mcp status: exit %d %s %s", code, out, errOut)
	}
	if _, errOut, code := toolbus(t, "mcp", "status", "--fail", "--nats", url); code != 1 || !strings.Contains(errOut, "MCP servers not connected: down on ") {
		t.Errorf("mcp status --fail with a server down: exit %d %s", code, errOut)
	}
}

// A policy set that would be refused on load, or has nothing to test,
// is said so by `policy test`, with the mistake's place.
func TestPolicyTestSaysWhatIsWrong(t *testing.T) {
	dir := func(files map[string]string) string {
		d := t.TempDir()
		for name, src := range files {
			os.WriteFile(filepath.Join(d, name), []byte(src), 0o644)
		}
		return d
	}
	for _, tt := range []struct {
		name  string
		files map[string]string
		says  string
	}{
		{"no tests", map[string]string{"p.rego": "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"x\"}\n"}, "has no Rego tests"},
		{"a misspelt decision", map[string]string{"p.rego": "package toolbus\ndesicion := {\"verdict\": \"ALLOW\"}\n",
			"p_test.rego": "package toolbus_test\ntest_x if true\n"}, `it defines "desicion": a misspelling?`},
		{"a misspelt verdict", map[string]string{"p.rego": "package toolbus\ndecision := {\"verdict\": \"ALOW\"}\n",
			"p_test.rego": "package toolbus_test\ntest_x if true\n"}, `p.rego:2: verdict "ALOW"`},
	} {
		_, errOut, code := toolbus(t, "policy", "test", dir(tt.files))
		if code != 1 || !strings.Contains(errOut, tt.says) {
			t.Errorf("%s: exit %d %s, want it to say %q", tt.name, code, errOut, tt.says)
		}
	}
}

// What a person reads shows JSON as a person writes it, and times with
// their date and zone: `audit show` of a shell line with && and <, and
// `audit list`'s time column. A mistake in --args is shown where it is.
func TestPeopleReadWhatTheyWrote(t *testing.T) {
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", t.TempDir(), "--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	// Asked about, and nobody to ask: denied at once, and recorded.
	toolbus(t, "call", "run_shell_command", "--id", "as-written", "--args", `{"command":"ls && echo '<b>'"}`, "--nats", url)
	out, errOut, code := toolbus(t, "audit", "show", "as-written", "--nats", url)
	if code != 0 || !strings.Contains(out, `arguments: {"command":"ls && echo '<b>'"}`) {
		t.Errorf("audit show: exit %d %s\n%s", code, errOut, out)
	}
	out, _, _ = toolbus(t, "audit", "list", "--nats", url)
	if !regexp.MustCompile(`\n\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+ +as-written `).MatchString(out) {
		t.Errorf("audit list's time has no date or zone:\n%s", out)
	}
	_, errOut, code = toolbus(t, "call", "read_file", "--args", `{"file_path": x}`, "--nats", url)
	if code != 2 || !strings.Contains(errOut, "line 1, column 15: invalid character 'x'") || !strings.Contains(errOut, "\n                ^") {
		t.Errorf("--args with a mistake: exit %d %s", code, errOut)
	}
}
