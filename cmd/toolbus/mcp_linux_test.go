package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// connectWait bounds how long a server has to connect or reconnect: a
// bound on a wait (server-everything starts node), not a measurement.
const connectWait = 90 * time.Second

// upWith starts `toolbus up` on a fresh data directory and workspace with
// extra flags, and returns it with its bus URL once it is up.
func upWith(t *testing.T, extra ...string) (*daemon, string) {
	t.Helper()
	args := append([]string{"up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", t.TempDir()}, extra...)
	up := startDaemon(t, "toolbus", args...)
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	return up, url
}

// writeFile writes a configuration file into a temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// everythingSettings is a Gemini CLI settings.json naming server-everything
// over stdio as server name, with env added to its environment.
func everythingSettings(t *testing.T, name string, env map[string]string) string {
	t.Helper()
	command, args := npmpeer.EverythingStdio(t)
	entry := map[string]any{"command": command, "args": args, "trust": true}
	if env != nil {
		entry["env"] = env
	}
	data, err := json.Marshal(map[string]any{"mcpServers": map[string]any{name: entry}})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "settings.json", string(data))
}

// everythingMCPJSON is a Claude Code .mcp.json naming server-everything
// over streamable HTTP at url as server name.
func everythingMCPJSON(t *testing.T, name, url string) string {
	t.Helper()
	return writeFile(t, ".mcp.json", fmt.Sprintf(`{"mcpServers": {%q: {"type": "http", "url": %q, "trust": true}}}`, name, url))
}

// mcpStatus is `toolbus mcp status --json`.
func mcpStatus(t *testing.T, url string) []events.MCPServerStatus {
	t.Helper()
	out, errOut, code := toolbus(t, "mcp", "status", "--json", "--nats", url)
	if code != 0 {
		t.Fatalf("mcp status --json: exit %d, %s", code, errOut)
	}
	var states []events.MCPServerStatus
	if err := json.Unmarshal([]byte(out), &states); err != nil {
		t.Fatalf("mcp status --json printed no JSON array: %v\n%s", err, out)
	}
	return states
}

// waitStatus polls `toolbus mcp status --json` until server's state
// satisfies ok, and returns that state.
func waitStatus(t *testing.T, url, server, want string, ok func(events.MCPServerStatus) bool) events.MCPServerStatus {
	t.Helper()
	var last []events.MCPServerStatus
	var found events.MCPServerStatus
	if !testkit.Poll(connectWait, func() bool {
		last = mcpStatus(t, url)
		for _, st := range last {
			if st.Server == server && ok(st) {
				found = st
				return true
			}
		}
		return false
	}) {
		t.Fatalf("MCP server %s never became %s; last status: %+v", server, want, last)
	}
	return found
}

func connected(st events.MCPServerStatus) bool { return st.State == events.MCPConnected }

// getTool is `toolbus tools get NAME --json`.
func getTool(t *testing.T, url, name string) events.Tool {
	t.Helper()
	out, errOut, code := toolbus(t, "tools", "get", name, "--json", "--nats", url)
	var tool events.Tool
	if code != 0 || json.Unmarshal([]byte(out), &tool) != nil {
		t.Fatalf("tools get %s --json: exit %d, %s %s", name, code, out, errOut)
	}
	return tool
}

// call is `toolbus call NAME --args ARGS`, which must succeed.
func call(t *testing.T, url, name, args string) string {
	t.Helper()
	out, errOut, code := toolbus(t, "call", name, "--args", args, "--nats", url)
	if code != 0 {
		t.Fatalf("call %s %s: exit %d, stdout %q, stderr %q", name, args, code, out, errOut)
	}
	return out
}

// serverTools lists the catalogue's tools of one MCP server.
func serverTools(t *testing.T, url, server string) []map[string]any {
	t.Helper()
	return listJSON(t, url, "--server", server)
}

// checkHosted checks what a user sees of a connected server: its tools in
// `tools list` beside the built-ins, and `mcp status`, as JSON and as a
// table, with its tool count and the executor that hosts it.
func checkHosted(t *testing.T, url, server, transport string) {
	t.Helper()
	st := waitStatus(t, url, server, "connected", connected)
	names := map[string]bool{}
	for _, tool := range listJSON(t, url) {
		names[tool["name"].(string)] = true
	}
	if !names["read_file"] || !names["echo"] {
		t.Errorf("tools list has no read_file or echo beside each other: %v", names)
	}
	tools := serverTools(t, url, server)
	if len(tools) == 0 || st.Tools != len(tools) {
		t.Errorf("mcp status counts %d tools of %s, tools list --server lists %d", st.Tools, server, len(tools))
	}
	if st.Transport != transport || st.Executor == "" || !st.Trust || st.Restarts != 0 {
		t.Errorf("mcp status --json of %s: %+v", server, st)
	}
	out, _, code := toolbus(t, "mcp", "status", "--nats", url)
	want := []string{server, "connected", strconv.Itoa(st.Tools), transport, st.Executor}
	var row []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= len(want) && f[0] == server {
			row = f
		}
	}
	if code != 0 || row == nil || !slices.Equal(row[:4], want[:4]) || row[4] != want[4] {
		t.Errorf("mcp status: exit %d, row %q, want it to start %q:\n%s", code, row, want, out)
	}
}

// everythingPid is the one process below pid running server-everything's
// entry script.
func everythingPid(t *testing.T, pid int) int {
	t.Helper()
	entry := npmpeer.Require(t, npmpeer.Everything)
	var found []testkit.Process
	for _, p := range testkit.Descendants(pid) {
		if p.State != "Z" && slices.Contains(p.Args, entry) {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one server-everything below toolbus up (%d), found %v", pid, found)
	}
	return found[0].PID
}

// stopLeavesNothing stops up with SIGINT and checks that every process it
// had started is gone, none left a zombie.
func stopLeavesNothing(t *testing.T, up *daemon) {
	t.Helper()
	below := testkit.Descendants(up.cmd.Process.Pid)
	t.Logf("processes below toolbus up before the stop: %v", below)
	up.stop(t)
	for _, p := range below {
		// Each is reaped by its parent below up, or by init once an
		// orphan: WaitReaped fails on one that stays, zombie or not.
		testkit.WaitReaped(t, p.PID)
	}
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies of the test process: %v", z)
	}
}

// TestUpWithStdioServer is the MCP "done when" over stdio, as a user runs
// it: a Gemini CLI settings.json naming server-everything.
func TestUpWithStdioServer(t *testing.T) {
	settings := everythingSettings(t, "everything", nil)
	up, url := upWith(t, "--settings", settings)
	checkHosted(t, url, "everything", "stdio")
	if out := call(t, url, "echo", `{"message":"hi"}`); out != "Echo: hi\n" {
		t.Errorf("call echo: %q, want %q", out, "Echo: hi\n")
	}
	if tool := getTool(t, url, "echo"); tool.Source != events.SourceMCP || tool.Server != "everything" || tool.ServerToolName != "echo" {
		t.Errorf("tools get echo: source %s, server %q, server tool %q", tool.Source, tool.Server, tool.ServerToolName)
	}

	// Discovery from the command line.
	st := waitStatus(t, url, "everything", "connected", connected)
	out, errOut, code := toolbus(t, "tools", "discover", "--server", "everything", "--nats", url)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%s: everything: %d tools: ", st.Executor, st.Tools)) || !strings.Contains(out, "echo") {
		t.Errorf("tools discover --server everything: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, errOut, code = toolbus(t, "tools", "discover", "--server", "nope", "--nats", url)
	if code != 1 || !strings.Contains(errOut, `no executor hosts an MCP server "nope"`) {
		t.Errorf("tools discover --server nope: exit %d, stderr %q", code, errOut)
	}

	// The server dies: toolbus sees it and starts it again.
	pid := everythingPid(t, up.cmd.Process.Pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	down := waitStatus(t, url, "everything", "disconnected or connecting", func(st events.MCPServerStatus) bool {
		return st.State == events.MCPDisconnected || st.State == events.MCPConnecting
	})
	if down.State == events.MCPDisconnected && !strings.Contains(down.Error, "killed by SIGKILL") {
		t.Errorf("disconnected, saying %q; want it to say the process was killed by SIGKILL", down.Error)
	}
	again := waitStatus(t, url, "everything", "connected again", func(st events.MCPServerStatus) bool {
		return st.State == events.MCPConnected && st.Restarts > 0
	})
	if again.Restarts != 1 || again.Tools != st.Tools {
		t.Errorf("after the restart: %d restarts, %d tools; want 1 restart, %d tools", again.Restarts, again.Tools, st.Tools)
	}
	testkit.WaitReaped(t, pid)
	if newPid := everythingPid(t, up.cmd.Process.Pid); newPid == pid {
		t.Errorf("the server's pid %d did not change", pid)
	}
	if out := call(t, url, "echo", `{"message":"again"}`); out != "Echo: again\n" {
		t.Errorf("call echo after the restart: %q", out)
	}
	stopLeavesNothing(t, up)
}

// TestUpWithHTTPServer is the same over streamable HTTP, from a Claude
// Code .mcp.json.
func TestUpWithHTTPServer(t *testing.T) {
	mcpJSON := everythingMCPJSON(t, "everything", npmpeer.EverythingHTTP(t))
	up, url := upWith(t, "--mcp-config", mcpJSON)
	checkHosted(t, url, "everything", "http")
	if out := call(t, url, "echo", `{"message":"hi"}`); out != "Echo: hi\n" {
		t.Errorf("call echo: %q, want %q", out, "Echo: hi\n")
	}
	out, errOut, code := toolbus(t, "tools", "discover", "--server", "everything", "--nats", url)
	if code != 0 || !strings.Contains(out, "everything: ") || !strings.Contains(out, "echo") {
		t.Errorf("tools discover --server everything: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	stopLeavesNothing(t, up)
}

// TestUpWithCollidingServers runs server-everything twice, over stdio as
// "one" and over HTTP as "two": the tools both have get one name each,
// and a call by either name reaches its own server.
func TestUpWithCollidingServers(t *testing.T) {
	// Only the stdio server has this variable in its environment, which
	// server-everything's get-env shows: how a call tells the two apart.
	const mark = "TOOLBUS_E2E_SERVER_ONE"
	settings := everythingSettings(t, "one", map[string]string{mark: "yes"})
	mcpJSON := everythingMCPJSON(t, "two", npmpeer.EverythingHTTP(t))
	up, url := upWith(t, "--settings", settings, "--mcp-config", mcpJSON)
	one := waitStatus(t, url, "one", "connected", connected)
	two := waitStatus(t, url, "two", "connected", connected)
	if one.Tools == 0 || one.Tools != two.Tools {
		t.Errorf("one hosts %d tools, two %d", one.Tools, two.Tools)
	}

	// Whichever registered first has echo; the other's is server__echo.
	echo := getTool(t, url, "echo")
	other := map[string]string{"one": "two", "two": "one"}[echo.Server]
	if other == "" || echo.ServerToolName != "echo" {
		t.Fatalf("tools get echo: server %q, server tool %q", echo.Server, echo.ServerToolName)
	}
	t.Logf("echo is %s's; %s's is %s__echo", echo.Server, other, other)
	qualified := getTool(t, url, other+"__echo")
	if qualified.Server != other || qualified.ServerToolName != "echo" || qualified.Source != events.SourceMCP {
		t.Errorf("tools get %s__echo: server %q, server tool %q, source %s", other, qualified.Server, qualified.ServerToolName, qualified.Source)
	}
	if out := call(t, url, "echo", `{"message":"plain"}`); out != "Echo: plain\n" {
		t.Errorf("call echo: %q", out)
	}
	if out := call(t, url, other+"__echo", `{"message":"qualified"}`); out != "Echo: qualified\n" {
		t.Errorf("call %s__echo: %q", other, out)
	}

	// Each server's get-env, by whatever name it got, reaches that server.
	for _, server := range []string{"one", "two"} {
		name := ""
		for _, tool := range serverTools(t, url, server) {
			if tool["serverToolName"] == "get-env" {
				name = tool["name"].(string)
			}
		}
		if name == "" {
			t.Errorf("tools list --server %s has no get-env", server)
			continue
		}
		out := call(t, url, name, `{}`)
		if has := strings.Contains(out, mark); has != (server == "one") {
			t.Errorf("call %s (server %s): the output has %s: %v", name, server, mark, has)
		}
	}
	stopLeavesNothing(t, up)
}
