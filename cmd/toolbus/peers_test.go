package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/fakegemini"
	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// peerTimeout bounds one run of an npm client, the MCP server it starts
// included; it is a bound on a wait, not a measurement.
const peerTimeout = 3 * time.Minute

// peerRun is how one run of an npm client ended.
type peerRun struct {
	stdout, stderr string
	code           int
}

// runPeer runs node22 with args in its own process group, with env added
// to a minimal environment, and returns its output once it has exited. A
// run past peerTimeout is killed, its whole group with it (the MCP servers
// it started), and fails the test; so does a run that exits leaving one of
// them running (checkGroupGone).
func runPeer(t *testing.T, env []string, args ...string) peerRun {
	t.Helper()
	node22 := npmpeer.Require(t, npmpeer.Node22)
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node22, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "NO_COLOR=1", "TOOLBUS_NATS="}, env...)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The client's children may hold its output pipes open after it
	// exits; WaitDelay stops Wait from waiting for them forever.
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	checkGroupGone(t, cmd.Process.Pid)
	run := peerRun{stdout: stdout.String(), stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("node22 %s did not finish within %v; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), peerTimeout, run.stdout, run.stderr)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		run.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("node22 %s: %v", strings.Join(args, " "), err)
	}
	return run
}

// checkGroupGone fails the test when the process group pgid, whose leader
// has exited, still has a live member a while later: an MCP server the
// client started and did not stop. Those are killed, by pid; while one
// lives the group's id cannot be reused, so they are the client's.
func checkGroupGone(t *testing.T, pgid int) {
	t.Helper()
	var live []testkit.Process
	if !testkit.Poll(10*time.Second, func() bool {
		live = testkit.Group(pgid)
		return len(live) == 0
	}) {
		for _, m := range live {
			syscall.Kill(m.PID, syscall.SIGKILL)
		}
		t.Errorf("the client left processes running after it exited: %v", live)
	}
}

// geminiServer is an mcpServers entry of Gemini CLI's settings.
type geminiServer struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	// Trust lets the server's tools run without the CLI's confirmation,
	// which headless mode cannot ask for; toolbus's policy still judges
	// every call.
	Trust bool `json:"trust"`
}

// runGemini runs Gemini CLI headless with one MCP server, named name, and
// the fake model, with flags added to its command line, and returns its
// run. HOME is a fresh directory holding
// only the settings written here, so that nothing of the machine's own
// configuration takes part.
func runGemini(t *testing.T, model *fakegemini.Server, name string, server geminiServer, prompt string, flags ...string) peerRun {
	t.Helper()
	gemini := npmpeer.Require(t, npmpeer.Gemini)
	home := t.TempDir()
	settings := map[string]any{
		"mcpServers": map[string]any{name: server},
		"security": map[string]any{
			"auth":        map[string]any{"selectedType": "gemini-api-key"},
			"folderTrust": map[string]any{"enabled": false},
		},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"general": map[string]any{
			"enableAutoUpdate":             false,
			"enableAutoUpdateNotification": false,
		},
	}
	data, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	run := runPeer(t, []string{
		"HOME=" + home,
		// The CLI writes its error reports to the temp directory.
		"TMPDIR=" + t.TempDir(),
		"GOOGLE_GEMINI_BASE_URL=" + model.URL,
		"GEMINI_API_KEY=fake",
		// One process instead of the CLI relaunching itself with a
		// bigger heap: one less layer between the test and the client.
		"GEMINI_CLI_NO_RELAUNCH=true",
	},
		// A model named on the command line skips the CLI's router, which
		// would first ask a classifier model for a JSON verdict the fake
		// does not script (and retry, with backoff, when it is missing).
		append([]string{gemini, "-m", "gemini-2.5-flash", "-p", prompt, "-o", "stream-json"}, flags...)...)
	t.Logf("gemini exit %d\nstdout:\n%s\nstderr:\n%s", run.code, run.stdout, run.stderr)
	for _, u := range model.Unknown() {
		t.Logf("the fake model did not know %s", u)
	}
	return run
}

// TestGeminiEverything proves the Gemini CLI harness against
// server-everything: the model calls echo, the CLI runs it over MCP, and
// the echo's text comes back to the model, then out as the final answer.
func TestGeminiEverything(t *testing.T) {
	t.Parallel()
	node, args := npmpeer.EverythingStdio(t)
	model := fakegemini.Start(t, fakegemini.Script{
		Tool:  "mcp_everything_echo",
		Args:  map[string]any{"message": "hello through gemini"},
		Final: "the tool said hello",
	})
	run := runGemini(t, model, "everything", geminiServer{Command: node, Args: args, Trust: true}, "call echo")
	if run.code != 0 {
		t.Fatalf("gemini exited %d", run.code)
	}
	t.Logf("tools declared to the model: %v", model.ToolNames())
	responses := model.FunctionResponses()
	if len(responses) == 0 {
		t.Fatalf("no functionResponse reached the model")
	}
	if got := string(responses[0].Response); !strings.Contains(got, "Echo: hello through gemini") {
		t.Errorf("the model was told %s, want the echo", got)
	}
	if !strings.Contains(run.stdout, "the tool said hello") {
		t.Errorf("the final answer is not in gemini's output")
	}
}

// inspectorExitToolError is the Inspector CLI's exit code for a tool that
// failed: an isError result, or a tool the server does not list.
const inspectorExitToolError = 5

// inspect runs the MCP Inspector's command-line client once against
// target (a command and its arguments, or an MCP URL) with the flags
// given, asking for JSON output.
func inspect(t *testing.T, target []string, flags ...string) peerRun {
	t.Helper()
	inspector := npmpeer.Require(t, npmpeer.Inspector)
	args := append([]string{inspector, "--cli", "--format", "json", "--quiet"}, flags...)
	// The target goes last, after "--", so that a flag of the server's
	// command is not taken for the Inspector's.
	args = append(append(args, "--"), target...)
	// HOME holds the Inspector's catalogue and client config; a fresh one
	// keeps the machine's out.
	return runPeer(t, []string{"HOME=" + t.TempDir()}, args...)
}

// toolResult is a tools/call result as the Inspector prints it.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

// text joins the result's text parts.
func (r toolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// inspectorError is the envelope the Inspector prints on stderr when a
// method fails.
type inspectorError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// decode parses out as JSON into v, failing the test with the run's output.
func decode(t *testing.T, what, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s is not the JSON expected (%v):\n%s", what, err, out)
	}
}

// listedNames is the tool names of the Inspector's tools/list run, which
// must have succeeded.
func listedNames(t *testing.T, run peerRun) []string {
	t.Helper()
	if run.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", run.code, run.stderr)
	}
	var out struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	decode(t, "tools/list", run.stdout, &out)
	var names []string
	for _, tool := range out.Result.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// checkInspectorEverything drives server-everything at target through the
// Inspector: the tools listed, echo called, an unknown tool refused.
func checkInspectorEverything(t *testing.T, target []string) {
	t.Run("tools/list", func(t *testing.T) {
		names := listedNames(t, inspect(t, target, "--method", "tools/list"))
		if !slices.Contains(names, "echo") {
			t.Errorf("tools/list has no echo: %v", names)
		}
	})
	t.Run("tools/call", func(t *testing.T) {
		run := inspect(t, target, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=hi there")
		if run.code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", run.code, run.stderr)
		}
		var out struct {
			Result toolResult `json:"result"`
		}
		decode(t, "tools/call", run.stdout, &out)
		if out.Result.IsError || out.Result.text() != "Echo: hi there" {
			t.Errorf("echo gave %+v, want the text %q", out.Result, "Echo: hi there")
		}
	})
	t.Run("unknown tool", func(t *testing.T) {
		run := inspect(t, target, "--method", "tools/call", "--tool-name", "no-such-tool")
		if run.code != inspectorExitToolError {
			t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", run.code, inspectorExitToolError, run.stdout, run.stderr)
		}
		var out inspectorError
		decode(t, "the error", run.stderr, &out)
		if out.Error.Code != "tool_not_found" {
			t.Errorf("error %+v, want code tool_not_found", out.Error)
		}
	})
}

// TestInspectorEverything proves the Inspector harness against
// server-everything, over stdio and over streamable HTTP.
func TestInspectorEverything(t *testing.T) {
	t.Parallel()
	t.Run("stdio", func(t *testing.T) {
		node, args := npmpeer.EverythingStdio(t)
		checkInspectorEverything(t, append([]string{node}, args...))
	})
	t.Run("http", func(t *testing.T) {
		checkInspectorEverything(t, []string{npmpeer.EverythingHTTP(t)})
	})
}

// peerFleet is a `toolbus up` for the npm clients: a workspace with a
// README, the bus, and the MCP endpoint behind a bearer token.
type peerFleet struct {
	up       *daemon
	natsURL  string
	endpoint string
	token    string
	// developer is the seed of up's admin, who reads the audit stream.
	developer string
}

// peerReadme is the workspace README's text, which read_file must return.
const peerReadme = "# the workspace of the npm clients' fleet\n"

// startPeerFleet starts `toolbus up` with its MCP endpoint on a loopback
// port, which admits a client by its token only: the token the
// environment gives it is the default client's, which the clients send.
func startPeerFleet(t *testing.T) *peerFleet {
	t.Helper()
	testkit.Heavy(t, "npm peers (the MCP Inspector, Gemini CLI)")
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte(peerReadme), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &peerFleet{token: "peer-token-" + strings.ReplaceAll(t.Name(), "/", "-")}
	data := t.TempDir()
	f.developer = filepath.Join(data, "identities", "developer.nk")
	f.up = startDaemonWith(t, []string{mcpTokenEnv + "=" + f.token}, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws,
		"--console", "off", "--mcp-listen", "127.0.0.1:0")
	f.natsURL = busURL(t, f.up.waitLine(t, "bus:"))
	line := f.up.waitLine(t, "mcp serve:")
	f.up.waitLine(t, "Press Ctrl-C to stop.")
	// "  mcp serve: http://127.0.0.1:PORT/mcp (Authorization: Bearer TOKEN)"
	fields := strings.Fields(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "mcp serve:")))
	if len(fields) != 4 || fields[3] != f.token+")" {
		t.Fatalf("the mcp serve line is %q, want the URL and the token %q", line, f.token)
	}
	f.endpoint = fields[0]
	return f
}

// stdio is the command that serves the fleet's tools over stdio.
func (f *peerFleet) stdio() []string {
	return []string{bin("toolbus"), "mcp", "serve", "--nats", f.natsURL}
}

// invocations returns every tool.invoke in the fleet's audit stream, up to
// the last one there when it is called.
func (f *peerFleet) invocations(t *testing.T) []*events.Invocation {
	t.Helper()
	js := jetStreamAs(t, f.developer, f.natsURL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, events.SubjectInvoke+".>")
	if err != nil {
		t.Fatalf("no tool.invoke in the audit stream: %v", err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectInvoke + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.Invocation
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("reading the audit stream: %v", err)
		}
		inv, err := events.Decode[events.Invocation](m.Data())
		if err != nil {
			t.Fatalf("a tool.invoke in the audit stream does not decode: %v", err)
		}
		out = append(out, inv)
		if meta, err := m.Metadata(); err != nil || meta.Sequence.Stream >= last.Sequence {
			return out
		}
	}
}

// TestInspectorToolbus drives toolbus's MCP facade with the MCP
// Inspector's command-line client: `toolbus mcp serve` over stdio, and the
// streamable HTTP endpoint of `toolbus up` with its token.
func TestInspectorToolbus(t *testing.T) {
	t.Parallel()
	f := startPeerFleet(t)
	auth := []string{"--header", "Authorization: Bearer " + f.token}
	for _, transport := range []struct {
		name   string
		target []string
		flags  []string
	}{
		{"stdio", f.stdio(), nil},
		{"http", []string{f.endpoint}, auth},
	} {
		t.Run(transport.name, func(t *testing.T) {
			call := func(t *testing.T, flags ...string) peerRun {
				t.Helper()
				return inspect(t, transport.target, append(slices.Clone(transport.flags), flags...)...)
			}
			t.Run("tools/list", func(t *testing.T) {
				names := listedNames(t, call(t, "--method", "tools/list"))
				for _, want := range []string{"read_file", "run_shell_command"} {
					if !slices.Contains(names, want) {
						t.Errorf("tools/list has no %s: %v", want, names)
					}
				}
			})
			t.Run("read_file", func(t *testing.T) {
				run := call(t, "--method", "tools/call", "--tool-name", "read_file", "--tool-arg", "file_path=README.md")
				if run.code != 0 {
					t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", run.code, run.stdout, run.stderr)
				}
				var out struct {
					Result toolResult `json:"result"`
				}
				decode(t, "tools/call", run.stdout, &out)
				if out.Result.IsError || !strings.Contains(out.Result.text(), peerReadme) {
					t.Errorf("read_file gave %+v, want the README", out.Result)
				}
			})
			t.Run("chained rm -rf /", func(t *testing.T) {
				run := call(t, "--method", "tools/call", "--tool-name", "run_shell_command", "--tool-arg", "command=ls && rm -rf /")
				if run.code != inspectorExitToolError {
					t.Fatalf("exit %d, want %d (a tool error); stdout:\n%s\nstderr:\n%s", run.code, inspectorExitToolError, run.stdout, run.stderr)
				}
				var out struct {
					Result toolResult `json:"result"`
				}
				decode(t, "tools/call", run.stdout, &out)
				text := out.Result.text()
				if !out.Result.IsError || !strings.Contains(text, "POLICY_DENIED") || !strings.Contains(text, "rm -rf /") {
					t.Errorf("the chained rm gave %+v, want an error result with the policy's reason", out.Result)
				}
				t.Logf("the policy's answer: %s", text)
			})
			t.Run("unknown tool", func(t *testing.T) {
				run := call(t, "--method", "tools/call", "--tool-name", "no_such_tool")
				if run.code != inspectorExitToolError {
					t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", run.code, inspectorExitToolError, run.stdout, run.stderr)
				}
				var out inspectorError
				decode(t, "the error", run.stderr, &out)
				if out.Error.Code != "tool_not_found" {
					t.Errorf("error %+v, want code tool_not_found", out.Error)
				}
			})
		})
	}
	t.Run("http without the token", func(t *testing.T) {
		// --stored-auth-only: a 401 is reported instead of starting an
		// interactive OAuth login.
		run := inspect(t, []string{f.endpoint}, "--stored-auth-only", "--method", "tools/list")
		if run.code == 0 {
			t.Fatalf("tools/list without the token succeeded:\n%s", run.stdout)
		}
		var out inspectorError
		decode(t, "the error", run.stderr, &out)
		if out.Error.Code != "auth_required" {
			t.Errorf("error %+v, want code auth_required", out.Error)
		}
	})
	// Every call that reached toolbus went through the bus in the
	// Inspector's name; the unknown tool never left the Inspector, which
	// checks a name against tools/list.
	var got []string
	for _, inv := range f.invocations(t) {
		got = append(got, inv.Tool+" by "+inv.Sender.Client)
	}
	// The Inspector names itself so in initialize, at the version pinned
	// in scripts/test.sh.
	call := func(tool string) string { return tool + " by inspector-cli/2.12.0" }
	want := []string{call("read_file"), call("run_shell_command"), call("read_file"), call("run_shell_command")}
	if !slices.Equal(got, want) {
		t.Errorf("tool.invoke in the audit stream:\n%q\nwant\n%q", got, want)
	}
	f.up.stop(t)
}

// geminiEvent is one line of Gemini CLI's stream-json output, the fields
// of its tool events.
type geminiEvent struct {
	Type     string `json:"type"`
	ToolName string `json:"tool_name"`
	Status   string `json:"status"`
	Output   string `json:"output"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// geminiEvents parses stream-json output, failing the test on a line that
// is not JSON.
func geminiEvents(t *testing.T, stdout string) []geminiEvent {
	t.Helper()
	var out []geminiEvent
	for line := range strings.Lines(stdout) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var e geminiEvent
		decode(t, "a stream-json line", line, &e)
		out = append(out, e)
	}
	return out
}

// TestGeminiToolbus has Gemini CLI, headless, with toolbus as its MCP
// server and the fake model scripting the tool call: the call runs
// through the bus and the policy, its result reaches the model, and the
// audit stream names Gemini CLI as the client.
func TestGeminiToolbus(t *testing.T) {
	t.Parallel()
	f := startPeerFleet(t)
	server := geminiServer{Command: bin("toolbus"), Args: f.stdio()[1:], Trust: true}
	for _, tc := range []struct {
		name string
		args map[string]any
		tool string
		// flags are added to Gemini CLI's command line.
		flags []string
		// status is the CLI's tool_result status; reply is what the
		// functionResponse sent to the model must hold.
		status string
		reply  []string
	}{
		{"read_file", map[string]any{"file_path": "README.md"}, "read_file", nil,
			"success", []string{strings.TrimSpace(peerReadme)}},
		// Headless, Gemini CLI denies its own run_shell_command (and
		// replace, write_file, web_fetch) and hides every tool whose name
		// without the mcp_<server>_ prefix is one it denies: toolbus's
		// run_shell_command is not declared to the model unless the
		// approval mode is yolo, trusted server or not.
		{"chained rm -rf /", map[string]any{"command": "ls && rm -rf /"}, "run_shell_command", []string{"--approval-mode", "yolo"},
			"error", []string{"POLICY_DENIED", "rm -rf /"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := fakegemini.Start(t, fakegemini.Script{
				// Gemini CLI names an MCP tool mcp_<server>_<tool>.
				Tool:  "mcp_toolbus_" + tc.tool,
				Args:  tc.args,
				Final: "done with " + tc.tool,
			})
			run := runGemini(t, model, "toolbus", server, "use "+tc.tool, tc.flags...)
			if run.code != 0 {
				t.Fatalf("gemini exited %d", run.code)
			}
			var results []geminiEvent
			for _, e := range geminiEvents(t, run.stdout) {
				if e.Type == "tool_result" {
					results = append(results, e)
				}
			}
			if len(results) != 1 || results[0].Status != tc.status {
				t.Fatalf("tool results %+v, want one with status %s", results, tc.status)
			}
			responses := model.FunctionResponses()
			if len(responses) != 1 || responses[0].Name != "mcp_toolbus_"+tc.tool {
				t.Fatalf("function responses sent to the model: %+v, want one of mcp_toolbus_%s", responses, tc.tool)
			}
			// The response is JSON: the text is in it with JSON's escapes.
			var reply any
			if err := json.Unmarshal(responses[0].Response, &reply); err != nil {
				t.Fatalf("the function response is not JSON: %v", err)
			}
			text := fmt.Sprint(reply)
			for _, want := range tc.reply {
				if !strings.Contains(text, want) {
					t.Errorf("the model was told %s, want it to hold %q", responses[0].Response, want)
				}
			}
			if !strings.Contains(run.stdout, "done with "+tc.tool) {
				t.Errorf("the model's final text is not in gemini's output")
			}
		})
	}
	// Both calls went through the bus in Gemini CLI's name, the denied one
	// included: the policy judged it there.
	var got []string
	for _, inv := range f.invocations(t) {
		got = append(got, inv.Tool+" by "+inv.Sender.Client)
	}
	// Gemini CLI names itself so in initialize, at the version pinned in
	// scripts/test.sh.
	call := func(tool string) string { return tool + " by gemini-cli-mcp-client/0.61.0" }
	if want := []string{call("read_file"), call("run_shell_command")}; !slices.Equal(got, want) {
		t.Errorf("tool.invoke in the audit stream:\n%q\nwant\n%q", got, want)
	}
	f.up.stop(t)
}

// TestGroupMembers checks what checkGroupGone relies on: a background
// child outlives its shell in the shell's group and is found there.
func TestGroupMembers(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the shell printed %q, not a pid", out)
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	live := testkit.Group(cmd.Process.Pid)
	if len(live) != 1 || live[0].PID != child || strings.Join(live[0].Args, " ") != "sleep 600" {
		t.Errorf("group %d has %v, want only the sleep, %d", cmd.Process.Pid, live, child)
	}
}
