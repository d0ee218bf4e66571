package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/testkit/approvetest"
	"github.com/toolbus/toolbus/internal/testkit/fakeanthropic"
	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// claudeRun is how a run of Claude Code ended.
type claudeRun struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runClaude runs claude, the real Claude Code, headless (claude -p), as agents in
// CI do, against the fake model, with the facade as its one MCP server
// "toolbus" over HTTP, allowed to call tool without asking. It has no
// real credentials: a dummy API key, and the fake's address.
func runClaude(t *testing.T, claude string, ff *facadeFleet, model *fakeanthropic.Server, tool string) claudeRun {
	t.Helper()
	home := t.TempDir()
	config, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"toolbus": map[string]any{
		"type": "http", "url": ff.url, "headers": map[string]string{"Authorization": "Bearer " + ff.token},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(home, "mcp.json")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		t.Fatal(err)
	}
	// A bound on the run, not a measurement: a hung run fails.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, claude, "-p", "Write the notes file.",
		"--mcp-config", configPath, "--strict-mcp-config",
		"--allowedTools", "mcp__toolbus__"+tool,
		"--output-format", "json", "--model", "claude-sonnet-4-5")
	cmd.Dir = ff.Workspace.Root()
	cmd.Env = []string{
		"HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"TMPDIR=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + model.URL,
		"ANTHROPIC_API_KEY=sk-ant-fake-key-for-tests",
		// Nothing but the fake: no update checks, telemetry or reports.
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"ENABLE_TOOL_SEARCH=false",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, killed whole when the bound passes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	began := time.Now()
	err = cmd.Run()
	run := claudeRun{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: time.Since(began)}
	t.Logf("claude exit %d after %s\nstdout:\n%s\nstderr:\n%s", run.code, run.took.Round(time.Millisecond), run.stdout, run.stderr)
	if ctx.Err() != nil {
		t.Fatalf("claude did not finish within its bound: %v", err)
	}
	for _, u := range model.Unknown() {
		t.Logf("the fake model did not know %s", u)
	}
	return run
}

// The real Claude Code run headless declares elicitation, then answers
// toolbus's question by itself with "cancel": no person's choice. With an
// approver of the fleet present, the call waits for them, and their yes
// runs it once; with none, it is refused at once, and what the model is
// told names where to approve.
func TestHeadlessClaudeCodeCallIsApprovedByAPerson(t *testing.T) {
	t.Parallel()
	claude := npmpeer.Require(t, npmpeer.Claude)
	const hint = "open the console at http://console.test/ or run `toolbus confirm`"
	ff := startFacade(t, nil, "", func(c *executor.Config) {
		c.ApproveHint = hint
		// Far longer than any run may take: a refusal that came is not
		// the deadline's.
		c.ConfirmTimeout = time.Hour
	})
	steps := stepsOf(t, ff)
	acted := answered(t, ff)
	sent := invocations(t, ff)
	script := func(content string) fakeanthropic.Script {
		return fakeanthropic.Script{Tool: "mcp__toolbus__write_file", Input: map[string]any{"file_path": "notes.md", "content": content}, Final: "Done."}
	}

	t.Run("no approver", func(t *testing.T) {
		model := fakeanthropic.Start(t, script("alone\n"))
		run := runClaude(t, claude, ff, model, "write_file")
		t.Logf("refused after %s (the whole claude run)", run.took.Round(time.Millisecond))
		if model.Calls() != 1 {
			t.Fatalf("the model asked for the tool %d times, want once; tools declared: %v", model.Calls(), model.ToolNames())
		}
		results := model.ToolResults()
		if len(results) != 1 {
			t.Fatalf("%d tool results reached the model, want 1", len(results))
		}
		got := results[0]
		for _, want := range []string{"POLICY_DENIED", "made no decision on it", "no approver is connected to give it", "To approve calls like this one, " + hint} {
			if !got.IsError || !strings.Contains(got.Text, want) {
				t.Errorf("the model was told (error %v) %q; want it to say %q", got.IsError, got.Text, want)
			}
		}
		if strings.Contains(got.Text, "USER_CANCELLED") || strings.Contains(got.Text, "CONFIRMATION_TIMEOUT") {
			t.Errorf("the refusal is the user's or the deadline's: %q", got.Text)
		}
		if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "notes.md")); err == nil {
			t.Error("the refused edit ran")
		}
	})

	t.Run("an approver present", func(t *testing.T) {
		model := fakeanthropic.Start(t, script("approved\n"))
		approvetest.Seat(t, ff.Bus, "approver:ada", func(approve.Request) events.Outcome {
			// Once Claude Code has dismissed the question, so that the
			// call is seen to outlive its client's own "cancel".
			if steps("dismissed") {
				return events.ProceedOnce
			}
			return events.Cancel
		})
		before := len(sent())
		run := runClaude(t, claude, ff, model, "write_file")
		if run.code != 0 {
			t.Errorf("claude exited %d", run.code)
		}
		if model.Calls() != 1 {
			t.Fatalf("the model asked for the tool %d times, want once; tools declared: %v", model.Calls(), model.ToolNames())
		}
		results := model.ToolResults()
		if len(results) != 1 || results[0].IsError {
			t.Fatalf("the model was told %+v; want one result, not an error", results)
		}
		if data, err := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); err != nil || string(data) != "approved\n" {
			t.Errorf("the file holds %q (%v)", data, err)
		}
		if n := len(sent()) - before; n != 1 {
			t.Errorf("the call was sent %d times to the executors, want once", n)
		}
		if got := acted(1); len(got) != 1 || got[0].Sender.ID != "approver:ada" || got[0].Outcome != events.ProceedOnce {
			t.Errorf("answers acted on: %+v; want the approver's yes alone", got)
		}
	})
}
