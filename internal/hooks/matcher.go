package hooks

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/toolbus/toolbus/internal/events"
)

// How a matcher reads, decided here once for both agents:
//
//   - "", "*" or no matcher: every tool.
//   - Claude Code, a matcher of letters, digits, _ - , | and spaces only: a
//     list of whole names ("Bash", "Edit|Write"), compared ignoring case
//     ("bash" is the shell too; Claude Code compares case-sensitively, so
//     a file that worked there matches the same tools here, and more).
//   - Otherwise a regular expression (Go syntax, RE2), unanchored, as both
//     agents test theirs ("read_.*" matches read_file and read_many_files;
//     write ^…$ to anchor). A matcher that does not compile is an error
//     when the settings are read, never a hook that silently never runs.
//
// A tool is matched under every name it has (Tool.matchNames): its
// catalogue name, its own name, Claude Code's name for it and, for an MCP
// tool, mcp__SERVER__TOOL. All of them are the executor's own knowledge of
// the tool it hosts, never the name a caller used (an alias, another
// spelling): the call is resolved to its tool before its hooks are looked
// up. Matching more names can only run a hook more often, and a hook can
// only make a call stricter, so every widening is on the safe side.

// Matcher selects tools by name. A nil Matcher matches every tool.
type Matcher struct {
	pattern string
	all     bool
	names   []string       // whole names, compared ignoring case
	re      *regexp.Regexp // or a regular expression
}

// NewMatcher reads pattern as an agent of dialect d reads it.
func NewMatcher(d Dialect, pattern string) (*Matcher, error) {
	m := &Matcher{pattern: pattern}
	p := strings.TrimSpace(pattern)
	if p == "" || p == "*" {
		m.all = true
		return m, nil
	}
	if d == ClaudeCode && isNameList(p) {
		for _, n := range strings.FieldsFunc(p, func(r rune) bool { return r == '|' || r == ',' }) {
			if n = strings.TrimSpace(n); n != "" {
				m.names = append(m.names, n)
			}
		}
		if len(m.names) == 0 { // "|" or ",": nothing named
			return nil, fmt.Errorf("matcher %q names no tool", pattern)
		}
		return m, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("matcher %q is not a regular expression toolbus can read (Go RE2 syntax): %v", pattern, err)
	}
	m.re = re
	return m, nil
}

// isNameList reports whether p is written as Claude Code's plain names.
func isNameList(p string) bool {
	for _, r := range p {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '_', r == '-', r == '|', r == ',', r == ' ':
		default:
			return false
		}
	}
	return true
}

// String is the matcher as written.
func (m *Matcher) String() string {
	if m == nil {
		return ""
	}
	return m.pattern
}

// Match reports whether any of names matches. It allocates nothing.
func (m *Matcher) Match(names []string) bool {
	if m == nil || m.all {
		return true
	}
	for _, n := range names {
		if m.re != nil {
			if m.re.MatchString(n) {
				return true
			}
			continue
		}
		for _, want := range m.names {
			if strings.EqualFold(n, want) {
				return true
			}
		}
	}
	return false
}

// Tool is what the executor knows of the tool a call resolved to: the
// names hooks are matched against, and what a hook is told.
type Tool struct {
	// Name is the tool's catalogue name.
	Name string
	// Source is built-in, discovered, mcp or composite.
	Source events.Source
	// Server is the MCP server's name, for MCP tools.
	Server string
	// Own is the tool's name as its provider declared it (an MCP tool's
	// name on its server), when it differs from Name.
	Own string
}

// claudeNames are Claude Code's names for the tools toolbus has under
// Gemini CLI's names, so that a Claude Code matcher ("Bash", "Edit|Write")
// and a hook reading tool_name find the same tool.
var claudeNames = map[string][]string{
	"run_shell_command":   {"Bash"},
	"shell_output":        {"BashOutput"},
	"kill_shell":          {"KillShell"},
	"read_file":           {"Read"},
	"write_file":          {"Write"},
	"replace":             {"Edit", "MultiEdit"},
	"glob":                {"Glob"},
	"search_file_content": {"Grep"},
	"list_directory":      {"LS"},
	"web_fetch":           {"WebFetch"},
	"google_web_search":   {"WebSearch"},
}

// ClaudeName is Claude Code's name for the built-in tool of Gemini CLI
// name name, or "".
func ClaudeName(name string) string {
	if n := claudeNames[name]; len(n) > 0 {
		return n[0]
	}
	return ""
}

// mcpName is how both agents name an MCP tool in hooks.
func (t Tool) mcpName() string {
	own := t.Own
	if own == "" {
		own = t.Name
	}
	return "mcp__" + t.Server + "__" + own
}

// matchNames is every name of t a matcher is tried on.
func (t Tool) matchNames() []string {
	names := []string{t.Name}
	if t.Own != "" && t.Own != t.Name {
		names = append(names, t.Own)
	}
	if t.Source == events.SourceMCP {
		names = append(names, t.mcpName())
	}
	for _, n := range names[:len(names):len(names)] {
		names = append(names, claudeNames[n]...)
	}
	return names
}

// nameFor is the tool_name a hook of dialect d is told: Claude Code's name
// for a built-in it has one for, mcp__SERVER__TOOL for an MCP tool, else
// the catalogue name.
func (t Tool) nameFor(d Dialect) string {
	switch {
	case t.Source == events.SourceMCP:
		return t.mcpName()
	case d == ClaudeCode && t.Source == events.SourceBuiltin && ClaudeName(t.Name) != "":
		return ClaudeName(t.Name)
	}
	return t.Name
}
