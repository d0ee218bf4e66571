package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpRunsHooks: `toolbus up` runs the hooks of a Claude Code
// settings.json (--claude-settings) and of a Gemini CLI one (--settings)
// around the calls of its executor; a hook that cannot run stops it from
// starting.
func TestUpRunsHooks(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	claude := filepath.Join(ws, "claude-settings.json")
	os.WriteFile(claude, []byte(`{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
		"command": "grep -q curl && { echo 'no curl, says the Claude Code hook' >&2; exit 2; }; exit 0"}]}]}}`), 0o644)
	gemini := filepath.Join(ws, "gemini-settings.json")
	os.WriteFile(gemini, []byte(`{"hooks": {"BeforeTool": [{"matcher": "read_file", "hooks": [{"type": "command", "name": "no-secrets",
		"command": "grep -q secret && echo '{\"decision\":\"deny\",\"reason\":\"no secrets, says the Gemini CLI hook\"}'; exit 0"}]}]}}`), 0o644)
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--console", "off",
		"--mcp-listen", "off", "--claude-settings", claude, "--settings", gemini)
	url := busURL(t, up.waitLine(t, "bus:"))
	if line := up.waitLine(t, "hooks:"); !strings.Contains(line, "2 pre") || !strings.Contains(line, claude) || !strings.Contains(line, gemini) {
		t.Errorf("up says %q", line)
	}
	up.waitLine(t, "Press Ctrl-C to stop.")
	_, errOut, code := toolbus(t, "call", "run_shell_command", "--args", `{"command":"curl -s http://127.0.0.1:9/"}`, "--nats", url)
	if code == 0 || !strings.Contains(errOut, "POLICY_DENIED") || !strings.Contains(errOut, "no curl, says the Claude Code hook") {
		t.Errorf("curl: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = toolbus(t, "call", "read_file", "--args", `{"file_path":"secret.txt"}`, "--nats", url)
	if code == 0 || !strings.Contains(errOut, `blocked by hook "no-secrets" (BeforeTool): no secrets, says the Gemini CLI hook`) {
		t.Errorf("secret: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := toolbus(t, "call", "read_file", "--args", `{"file_path":"claude-settings.json"}`, "--nats", url)
	if code != 0 || !strings.Contains(out, "PreToolUse") {
		t.Errorf("a read no hook blocks: exit %d, %s %s", code, out, errOut)
	}
	up.stop(t)

	broken := filepath.Join(ws, "broken.json")
	os.WriteFile(broken, []byte(`{"hooks": {"PreToolUse": [{"matcher": "Bash(", "hooks": [{"type": "command", "command": "true"}]}]}}`), 0o644)
	_, errOut, code = toolbus(t, "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--console", "off", "--mcp-listen", "off", "--claude-settings", broken)
	if code != 1 || !strings.Contains(errOut, broken) || !strings.Contains(errOut, `matcher "Bash(" is not a regular expression`) {
		t.Errorf("broken hooks: exit %d, stderr %q", code, errOut)
	}
}
