package hooks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/settings"
)

func TestParseClaudeCodeSettings(t *testing.T) {
	s, err := Parse([]byte(`{
	  "permissions": {"allow": ["Bash(npm test)"]},
	  "hooks": {
	    "PreToolUse": [
	      {"matcher": "Bash", "hooks": [{"type": "command", "command": "$CLAUDE_PROJECT_DIR/.claude/hooks/no-curl.sh", "timeout": 5}]},
	      {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "check-edit", "timeout": 0.5}, {"type": "command", "command": "second"}]}
	    ],
	    "PostToolUse": [{"hooks": [{"type": "command", "command": "log-all"}]}],
	    "SessionStart": [{"hooks": [{"type": "command", "command": "hello"}]}],
	    "UserPromptSubmit": [{"hooks": [{"type": "prompt", "prompt": "judge it"}]}]
	  }
	}`), ClaudeCode, ".claude/settings.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pre) != 2 || len(s.Post) != 1 {
		t.Fatalf("got %d pre and %d post groups", len(s.Pre), len(s.Post))
	}
	h := s.Pre[0].Hooks[0]
	if h.Command != "$CLAUDE_PROJECT_DIR/.claude/hooks/no-curl.sh" || h.Timeout != 5*time.Second || h.Dialect != ClaudeCode || h.File != ".claude/settings.json" {
		t.Errorf("first hook: %+v", h)
	}
	if got := s.Pre[1].Hooks[0].Timeout; got != 500*time.Millisecond {
		t.Errorf("a timeout of 0.5 s read as %s", got)
	}
	if got := s.Pre[1].Hooks[1].timeout(); got != DefaultTimeout {
		t.Errorf("no timeout means %s, want %s", got, DefaultTimeout)
	}
	if s.Post[0].Matcher != nil {
		t.Errorf("no matcher read as %q", s.Post[0].Matcher)
	}
	notes := strings.Join(s.Notes, "\n")
	for _, want := range []string{"hooks.SessionStart left out", "hooks.UserPromptSubmit left out"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q do not say %q", notes, want)
		}
	}
}

func TestParseGeminiCLISettings(t *testing.T) {
	s, err := Parse([]byte(`{
	  // Gemini CLI allows comments
	  "tools": {"core": ["read_file"]},
	  "hooksConfig": {"enabled": true, "disabled": ["off-one"]},
	  "hooks": {
	    "BeforeTool": [{"matcher": "run_shell_command|write_file", "sequential": true, "hooks": [
	      {"type": "command", "command": "./no-curl.sh", "name": "no-curl", "timeout": 1500, "description": "no curl"},
	      {"type": "command", "command": "./off.sh", "name": "off-one"}]}],
	    "AfterTool": [{"matcher": "*", "hooks": [{"type": "command", "command": "./ctx.sh"}]}],
	    "BeforeModel": [{"hooks": [{"type": "command", "command": "x"}]}],
	    "PreToolUse": [{"hooks": [{"type": "command", "command": "claude-style"}]}]
	  }
	}`), GeminiCLI, ".gemini/settings.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pre) != 1 || len(s.Pre[0].Hooks) != 1 || !s.Pre[0].Sequential {
		t.Fatalf("pre groups: %+v", s.Pre)
	}
	h := s.Pre[0].Hooks[0]
	if h.Name != "no-curl" || h.Timeout != 1500*time.Millisecond || h.Description != "no curl" || h.Dialect != GeminiCLI || h.Label() != "no-curl" {
		t.Errorf("hook: %+v", h)
	}
	if len(s.Post) != 1 || !s.Post[0].Matcher.Match([]string{"anything"}) {
		t.Errorf("post groups: %+v", s.Post)
	}
	notes := strings.Join(s.Notes, "\n")
	for _, want := range []string{`hook "off-one" is disabled`, "hooks.BeforeModel left out", "hooks.PreToolUse is Claude Code's name for an event"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q do not say %q", notes, want)
		}
	}
}

func TestHooksTurnedOff(t *testing.T) {
	for _, c := range []struct {
		d    Dialect
		file string
	}{
		{GeminiCLI, `{"hooksConfig": {"enabled": false}, "hooks": {"BeforeTool": [{"hooks": [{"type": "command", "command": "x"}]}]}}`},
		{GeminiCLI, `{"hooks": {"enabled": false, "BeforeTool": [{"hooks": [{"type": "command", "command": "x"}]}]}}`},
		{ClaudeCode, `{"disableAllHooks": true, "hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x"}]}]}}`},
	} {
		file := c.file
		s, err := Parse([]byte(file), c.d, "s.json")
		if err != nil || !s.Empty() || !strings.Contains(strings.Join(s.Notes, ""), "turned off") {
			t.Errorf("%s: %+v %v", file, s, err)
		}
	}
}

func TestSettingsErrors(t *testing.T) {
	tests := []struct {
		name    string
		dialect Dialect
		file    string
		says    string
	}{
		{"not json", ClaudeCode, `{"hooks": `, "not a settings file"},
		{"hooks not an object", ClaudeCode, `{"hooks": []}`, "not a settings file"},
		{"event not an array", ClaudeCode, `{"hooks": {"PreToolUse": {}}}`, "hooks.PreToolUse: want an array"},
		{"no hooks array", ClaudeCode, `{"hooks": {"PreToolUse": [{"matcher": "Bash"}]}}`, `group 0: no "hooks" array`},
		{"bad regex", GeminiCLI, `{"hooks": {"BeforeTool": [{"matcher": "read_(", "hooks": []}]}}`, `matcher "read_(" is not a regular expression`},
		{"lookahead", ClaudeCode, `{"hooks": {"PreToolUse": [{"matcher": "^(?!Read).*", "hooks": []}]}}`, "Go RE2 syntax"},
		{"empty name list", ClaudeCode, `{"hooks": {"PreToolUse": [{"matcher": "|", "hooks": []}]}}`, "names no tool"},
		{"prompt type", ClaudeCode, `{"hooks": {"PreToolUse": [{"hooks": [{"type": "prompt", "prompt": "is it safe?"}]}]}}`, `type "prompt": toolbus runs hooks of type "command" only`},
		{"no type", GeminiCLI, `{"hooks": {"BeforeTool": [{"hooks": [{"command": "x"}]}]}}`, `type "": toolbus runs hooks`},
		{"no command", ClaudeCode, `{"hooks": {"PostToolUse": [{"hooks": [{"type": "command"}]}]}}`, "no command"},
		{"command not a string", ClaudeCode, `{"hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": ["rm"]}]}]}}`, "hook 0"},
		{"zero timeout", ClaudeCode, `{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "timeout": 0}]}]}}`, "want a positive number of seconds"},
		{"negative timeout", GeminiCLI, `{"hooks": {"BeforeTool": [{"hooks": [{"type": "command", "command": "x", "timeout": -5}]}]}}`, "want a positive number of milliseconds"},
		{"huge timeout", ClaudeCode, `{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "timeout": 1e300}]}]}}`, "positive number"},
		{"timeout a string", ClaudeCode, `{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "timeout": "60"}]}]}}`, "hook 0"},
		{"enabled not a bool", GeminiCLI, `{"hooks": {"enabled": "yes"}}`, "hooks.enabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.file), tt.dialect, "s.json")
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("got %v, want an error saying %q", err, tt.says)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	if _, err := load(filepath.Join(t.TempDir(), "missing.json"), ClaudeCode); err == nil {
		t.Error("a missing file loaded")
	}
	path := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(path, []byte(`{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}`), 0o644)
	if _, err := load(path, ClaudeCode); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("the error does not name the file: %v", err)
	}
	os.WriteFile(path, []byte(`{"model": "x"}`), 0o644)
	if s, err := load(path, ClaudeCode); err != nil || !s.Empty() {
		t.Errorf("a file without hooks: %+v %v", s, err)
	}
}

// load reads the hooks of the settings file at path, as toolbus up does.
func load(path string, d Dialect) (*Set, error) {
	format := settings.ClaudeSettings
	if d == GeminiCLI {
		format = settings.GeminiSettings
	}
	f, err := settings.Read(path, format)
	if err != nil {
		return nil, err
	}
	return SetFrom(f.Hooks, d, path)
}

func TestMergeAndPlan(t *testing.T) {
	claude, err := Parse([]byte(`{"hooks": {"PreToolUse": [
		{"matcher": "Bash", "hooks": [{"type": "command", "command": "same"}]},
		{"matcher": "*", "hooks": [{"type": "command", "command": "same"}, {"type": "command", "command": "all"}]}]}}`), ClaudeCode, "c.json")
	if err != nil {
		t.Fatal(err)
	}
	gemini, err := Parse([]byte(`{"hooks": {"BeforeTool": [{"matcher": "run_shell_command", "sequential": true, "hooks": [{"type": "command", "command": "same"}]}],
		"AfterTool": [{"matcher": "read_.*", "hooks": [{"type": "command", "command": "after-read"}]}]}}`), GeminiCLI, "g.json")
	if err != nil {
		t.Fatal(err)
	}
	s := Merge(claude, nil, gemini)
	shell := s.PlanFor(Tool{Name: "run_shell_command", Source: events.SourceBuiltin})
	if shell == nil || len(shell.Pre) != 3 || !shell.PreSequential || len(shell.Post) != 0 {
		t.Fatalf("plan for the shell: %+v", shell)
	}
	// The same command from one file runs once; from the other file it
	// is told another dialect's input, so it stays.
	if shell.Pre[0].Command != "same" || shell.Pre[1].Command != "all" || shell.Pre[2].Dialect != GeminiCLI {
		t.Errorf("shell pre hooks: %v %v %v", shell.Pre[0], shell.Pre[1], shell.Pre[2])
	}
	read := s.PlanFor(Tool{Name: "read_file", Source: events.SourceBuiltin})
	if read == nil || len(read.Pre) != 2 || read.PreSequential || len(read.Post) != 1 {
		t.Errorf("plan for read_file: %+v", read)
	}
	if p := (&Set{}).PlanFor(Tool{Name: "read_file"}); p != nil {
		t.Errorf("an empty set planned %+v", p)
	}
	only, _ := Parse([]byte(`{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "x"}]}]}}`), ClaudeCode, "c.json")
	if p := only.PlanFor(Tool{Name: "read_file", Source: events.SourceBuiltin}); p != nil {
		t.Errorf("a hook on Bash planned for read_file: %+v", p)
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []*Set{
		{Pre: []Group{{Hooks: []*Hook{{}}}}},
		{Post: []Group{{Hooks: []*Hook{{Command: "x", Func: func(context.Context, *Input) Outcome { return Outcome{} }}}}}},
		{Pre: []Group{{Hooks: []*Hook{nil}}}},
		{Pre: []Group{{Hooks: []*Hook{{Command: "x", Timeout: -1}}}}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v validated", s)
		}
	}
}
