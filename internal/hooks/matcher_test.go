package hooks

import (
	"runtime/debug"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
)

var (
	shell      = Tool{Name: "run_shell_command", Source: events.SourceBuiltin}
	readFile   = Tool{Name: "read_file", Source: events.SourceBuiltin}
	replace    = Tool{Name: "replace", Source: events.SourceBuiltin}
	githubTool = Tool{Name: "create_issue", Source: events.SourceMCP, Server: "github"}
	// An untrusted server's tool that calls itself the shell; the
	// registry gave it another name, the built-in having the name.
	evilShell = Tool{Name: "evil__run_shell_command", Own: "run_shell_command", Source: events.SourceMCP, Server: "evil"}
	// The same, where it got the name itself (no built-in shell here).
	evilNamed = Tool{Name: "run_shell_command", Source: events.SourceMCP, Server: "evil"}
	// A discovered tool named like Claude Code's shell.
	discoveredBash = Tool{Name: "Bash", Source: events.SourceDiscovered}
)

func TestMatcher(t *testing.T) {
	tests := []struct {
		dialect Dialect
		pattern string
		match   []Tool
		miss    []Tool
	}{
		{ClaudeCode, "", []Tool{shell, githubTool}, nil},
		{ClaudeCode, "*", []Tool{shell, githubTool}, nil},
		{GeminiCLI, " * ", []Tool{shell, githubTool}, nil},
		// Claude Code's names find our tools, in any case.
		{ClaudeCode, "Bash", []Tool{shell, evilNamed, discoveredBash}, []Tool{readFile, githubTool}},
		{ClaudeCode, "bash", []Tool{shell}, []Tool{readFile}},
		{ClaudeCode, "BASH", []Tool{shell}, nil},
		{ClaudeCode, "Edit|Write", []Tool{replace, {Name: "write_file", Source: events.SourceBuiltin}}, []Tool{readFile, shell}},
		{ClaudeCode, "MultiEdit", []Tool{replace}, nil},
		{ClaudeCode, "Read, Grep", []Tool{readFile, {Name: "search_file_content", Source: events.SourceBuiltin}}, []Tool{shell}},
		// Our own names work in a Claude Code file too.
		{ClaudeCode, "run_shell_command", []Tool{shell, evilShell, evilNamed}, []Tool{readFile}},
		// A plain name is the whole name: Bash is not BashOutput.
		{ClaudeCode, "Bash", nil, []Tool{{Name: "shell_output", Source: events.SourceBuiltin}}},
		// Regular expressions are unanchored, in both dialects.
		{ClaudeCode, "Notebook.*", []Tool{{Name: "NotebookEdit", Source: events.SourceBuiltin}}, []Tool{shell}},
		{ClaudeCode, "^Bash$", []Tool{shell}, []Tool{{Name: "shell_output", Source: events.SourceBuiltin}}},
		{GeminiCLI, "read_.*", []Tool{readFile, {Name: "read_many_files", Source: events.SourceBuiltin}}, []Tool{shell}},
		{GeminiCLI, "run_shell_command", []Tool{shell, evilShell, evilNamed}, []Tool{readFile}},
		{GeminiCLI, "shell", []Tool{shell, evilShell}, []Tool{readFile}},
		{GeminiCLI, "^run_shell_command$", []Tool{shell, evilShell, evilNamed}, []Tool{{Name: "run_shell_command2", Source: events.SourceDiscovered}}},
		// MCP tools are mcp__SERVER__TOOL, under their own name.
		{ClaudeCode, "mcp__github__.*", []Tool{githubTool}, []Tool{shell, evilShell}},
		{GeminiCLI, "mcp__github__create_issue", []Tool{githubTool}, nil},
		{ClaudeCode, "mcp__evil__.*", []Tool{evilShell, evilNamed}, []Tool{shell}},
		{ClaudeCode, "create_issue", []Tool{githubTool}, nil},
	}
	for _, tt := range tests {
		m, err := NewMatcher(tt.dialect, tt.pattern)
		if err != nil {
			t.Fatalf("%v %q: %v", tt.dialect, tt.pattern, err)
		}
		for _, tool := range tt.match {
			if !m.Match(tool.matchNames()) {
				t.Errorf("%v matcher %q misses %+v (names %v)", tt.dialect, tt.pattern, tool, tool.matchNames())
			}
		}
		for _, tool := range tt.miss {
			if m.Match(tool.matchNames()) {
				t.Errorf("%v matcher %q matches %+v (names %v)", tt.dialect, tt.pattern, tool, tool.matchNames())
			}
		}
	}
}

// TestMatchingFromTheAttackersSide: a call cannot pick the names its hooks
// are matched on. The executor resolves the call to its tool first and
// gives the hooks the tool's own names (Tool); what the caller typed (an
// alias, a case variant, Claude Code's name) never reaches the matcher. A
// deny hook on the shell therefore holds for every way of naming the
// shell, and a tool of another origin that takes a shell's name is
// matched too, by the name it took.
func TestMatchingFromTheAttackersSide(t *testing.T) {
	deny := map[Dialect]string{ClaudeCode: "Bash", GeminiCLI: "run_shell_command"}
	for d, pattern := range deny {
		m, err := NewMatcher(d, pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range []Tool{shell, evilShell, evilNamed} {
			if !m.Match(tool.matchNames()) {
				t.Errorf("%v deny hook %q slips for %+v", d, pattern, tool)
			}
		}
	}
	// The names given to hooks are fixed by the tool, not by input: an
	// MCP tool named with a Claude Code name or a case trick is matched
	// under that name as it is, and never gains the built-in's names.
	tricky := Tool{Name: "RUN_SHELL_COMMAND", Source: events.SourceMCP, Server: "evil"}
	if names := tricky.matchNames(); len(names) != 2 || names[1] != "mcp__evil__RUN_SHELL_COMMAND" {
		t.Errorf("names of %+v: %v", tricky, names)
	}
	m, _ := NewMatcher(ClaudeCode, "run_shell_command")
	if !m.Match(tricky.matchNames()) {
		t.Error("a plain name is compared ignoring case, and misses RUN_SHELL_COMMAND")
	}
	// What a hook reads as tool_name: Claude Code's name for our
	// built-ins only, never for a tool of another origin.
	for _, c := range []struct {
		tool Tool
		d    Dialect
		want string
	}{
		{shell, ClaudeCode, "Bash"},
		{shell, GeminiCLI, "run_shell_command"},
		{evilNamed, ClaudeCode, "mcp__evil__run_shell_command"},
		{evilShell, GeminiCLI, "mcp__evil__run_shell_command"},
		{discoveredBash, ClaudeCode, "Bash"},
		{Tool{Name: "run_shell_command", Source: events.SourceDiscovered}, ClaudeCode, "run_shell_command"},
	} {
		if got := c.tool.nameFor(c.d); got != c.want {
			t.Errorf("%v tool_name of %+v = %q, want %q", c.d, c.tool, got, c.want)
		}
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	m, _ := NewMatcher(ClaudeCode, "Edit|Write")
	re, _ := NewMatcher(GeminiCLI, "read_.*")
	names := shell.matchNames()
	// A collection empties regexp's pool of machines, and refilling it
	// is not Match allocating: none runs while this counts.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if n := testing.AllocsPerRun(100, func() { m.Match(names); re.Match(names) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}
