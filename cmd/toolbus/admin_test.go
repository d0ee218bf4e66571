package main

import (
	"testing"

	"github.com/toolbus/toolbus/internal/policy"
)

// A remembered command line is an agent's words: the table must not hand
// its escape sequences to the terminal.
func TestAllowlistTableShowsCommandsAsText(t *testing.T) {
	tests := []struct {
		entry policy.AllowEntry
		want  string
	}{
		{policy.AllowEntry{Scope: "command", Argv: []string{"git", "status"}, Exact: true}, "git status"},
		{policy.AllowEntry{Scope: "command", Argv: []string{"ls"}}, "ls …"},
		{policy.AllowEntry{Scope: "command", Prefix: "git"}, "git …"},
		{policy.AllowEntry{Scope: "path", Path: "/w/notes.md"}, "/w/notes.md"},
		{policy.AllowEntry{Scope: "tool", Tool: "web_fetch"}, "-"},
		{policy.AllowEntry{Scope: "command", Argv: []string{"echo", "\x1b]0;pwned\x07\x1b[2J"}, Exact: true}, `"echo \x1b]0;pwned\a\x1b[2J"`},
	}
	for _, tt := range tests {
		if got := shown(covers(tt.entry)); got != tt.want {
			t.Errorf("%+v: got %s, want %s", tt.entry, got, tt.want)
		}
	}
}
