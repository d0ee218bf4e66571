package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/testkit"
)

// repoRoot is the repository's root, the workspace the example's settings
// are written for.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// scriptApprover is `toolbus confirm --json`, answering every request for
// the tools it is told about with proceed_once.
func scriptApprover(t *testing.T, url string, tools ...string) {
	t.Helper()
	cmd := exec.Command(bin("toolbus"), "confirm", "--json", "--as", "approver:script", "--nats", url)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Event    string `json:"event"`
				AnswerTo string `json:"answerTo"`
				Request  struct {
					Tool string `json:"tool"`
				} `json:"request"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch {
			case line.Event == "ready":
				close(ready)
			case line.Event == "request" && strings.Contains(" "+strings.Join(tools, " ")+" ", " "+line.Request.Tool+" "):
				io.WriteString(stdin, `{"answerTo":"`+line.AnswerTo+`","outcome":"proceed_once"}`+"\n")
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close() // it ends at the end of its input
		cmd.Wait()
	})
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("toolbus confirm --json did not get ready")
	}
}

// TestDiscoveryExample is the README's walkthrough of examples/discovery:
// toolbus up with its settings lists calc and word_count after the
// built-ins, a call runs once a person approves it, a failing one returns
// the failure block, and toolbus tools discover runs the command again.
func TestDiscoveryExample(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", root,
		"--settings", filepath.Join(root, "examples", "discovery", "settings.json"), "--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	if line := up.waitLine(t, "discovery:"); !strings.Contains(line, "2 tools discovered by `sh examples/discovery/discover.sh`") {
		t.Errorf("up says %q", line)
	}
	up.waitLine(t, "Press Ctrl-C to stop.")
	t.Cleanup(func() { up.stop(t) })

	tools := listJSON(t, url)
	n := len(builtin.Specs())
	if len(tools) != n+2 {
		t.Fatalf("listed %d tools, want the %d built-ins and 2 discovered", len(tools), n)
	}
	for i, tool := range tools {
		want := "builtin"
		if i >= n {
			want = "discovered"
		}
		if tool["source"] != want {
			t.Errorf("tool %d, %v, is %v, want %s", i, tool["name"], tool["source"], want)
		}
	}
	if tools[n]["name"] != "calc" || tools[n+1]["name"] != "word_count" || tools[n]["kind"] != "other" {
		t.Errorf("discovered: %v, %v", tools[n], tools[n+1])
	}

	// Without an approver, the policy's question cannot be put: denied.
	_, errOut, code := toolbus(t, "call", "calc", "--args", `{"expression":"2*(3+4)"}`, "--nats", url)
	if code != 4 || !strings.Contains(errOut, "POLICY_DENIED") || !strings.Contains(errOut, "discovered tools ask the user") {
		t.Errorf("unapproved: exit %d, %s", code, errOut)
	}
	scriptApprover(t, url, "calc", "word_count")
	out, errOut, code := toolbus(t, "call", "calc", "--args", `{"expression":"2*(3+4)"}`, "--nats", url)
	if code != 0 || out != "{\"result\": 14}\n" {
		t.Errorf("calc: exit %d, %q, %s", code, out, errOut)
	}
	out, errOut, code = toolbus(t, "call", "word_count", "--args", `{"text":"one two\nthree"}`, "--nats", url)
	if code != 0 || out != "{\"lines\": 1, \"words\": 3, \"characters\": 13}\n" {
		t.Errorf("word_count: exit %d, %q, %s", code, out, errOut)
	}
	out, errOut, code = toolbus(t, "call", "calc", "--args", `{"expression":"rm -rf /"}`, "--json", "--nats", url)
	var res struct {
		LLMContent string `json:"llmContent"`
		Error      struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("calc --json: %v: %s %s", err, out, errOut)
	}
	block := "Stdout: (empty)\nStderr: not an arithmetic expression: rm -rf /\n\nError: (none)\nExit Code: 1\nSignal: (none)"
	if code != 1 || res.LLMContent != block || res.Error.Type != "DISCOVERED_TOOL_EXECUTION_ERROR" || res.Error.Message != block {
		t.Errorf("failing calc: exit %d, %+v", code, res)
	}

	out, errOut, code = toolbus(t, "tools", "discover", "--nats", url)
	if code != 0 || !strings.HasSuffix(out, ": 2 tools: calc, word_count\n") {
		t.Errorf("tools discover: exit %d, %q, %s", code, out, errOut)
	}
	out, _, code = toolbus(t, "tools", "discover", "--json", "--nats", url)
	var replies []struct {
		Sender struct{ ID string }
		Tools  []string
		Error  string
	}
	if code != 0 || json.Unmarshal([]byte(out), &replies) != nil || len(replies) != 1 || len(replies[0].Tools) != 2 || replies[0].Sender.ID == "" {
		t.Errorf("tools discover --json: exit %d, %s", code, out)
	}
}

// TestDiscoveredCallKilledLeavesNothing: an executor daemon with its own
// settings hosts its discovered tools; a call of one that starts
// processes in and out of its group, interrupted from the command line,
// leaves no process behind. A broken discovery command is an error at
// the start, and the daemon does not run.
func TestDiscoveredCallKilledLeavesNothing(t *testing.T) {
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", t.TempDir(),
		"--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	t.Cleanup(func() { up.stop(t) })

	ws := t.TempDir()
	testdata, _ := filepath.Abs(filepath.Join("..", "..", "internal", "discovery", "testdata"))
	os.WriteFile(filepath.Join(ws, "decls.json"), []byte(`[{"name": "hang"}]`), 0o644)
	settings := filepath.Join(t.TempDir(), "settings.json")
	write := func(discoveryCommand string) {
		data, _ := json.Marshal(map[string]any{"tools": map[string]string{
			"discoveryCommand": discoveryCommand, "callCommand": "sh " + filepath.Join(testdata, "call.sh")}})
		os.WriteFile(settings, data, 0o644)
	}

	write("sh 'unterminated")
	cmd := exec.Command(bin("executor"), "--nats", url, "--workspace", ws, "--settings", settings, "--id", "executor@broken")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "tools.discoveryCommand") {
		t.Errorf("a broken discovery command: %v, %s", err, stderr.String())
	}

	write("sh " + filepath.Join(testdata, "discover.sh") + " decls.json runs")
	startDaemon(t, "executor", "--nats", url, "--workspace", ws, "--settings", settings, "--policy", allowAll(t), "--id", "executor@discovery")
	var out string
	if !testkit.Poll(30*time.Second, func() bool {
		out, _, _ = toolbus(t, "tools", "discover", "--nats", url)
		return strings.Contains(out, "executor@discovery: 1 tools: hang")
	}) {
		t.Fatalf("the executor did not discover hang: %s", out)
	}

	call := exec.Command(bin("toolbus"), "call", "hang", "--nats", url)
	var callErr bytes.Buffer
	call.Stderr = &callErr
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range []string{"child.pid", "setsid.pid", "orphan.pid"} {
		pids = append(pids, testkit.WaitPID(t, filepath.Join(ws, f)))
	}
	for {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	call.Process.Signal(syscall.SIGINT)
	err := call.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 || !strings.Contains(callErr.String(), "cancelled by you") {
		t.Errorf("the interrupted call: %v, %s", err, callErr.String())
	}
	for _, pid := range pids {
		testkit.WaitReaped(t, pid)
	}

	// The settings file is followed: another discovery command, saved,
	// replaces the tools.
	os.WriteFile(filepath.Join(ws, "other.json"), []byte(`[{"name": "lines"}]`), 0o644)
	write("cat other.json")
	var names []string
	if !testkit.Poll(30*time.Second, func() bool {
		names = nil
		for _, tool := range listJSON(t, url) {
			if tool["source"] == "discovered" {
				names = append(names, tool["name"].(string))
			}
		}
		return strings.Join(names, ",") == "lines"
	}) {
		t.Fatalf("the new discovery command was not applied: %v", names)
	}
}
