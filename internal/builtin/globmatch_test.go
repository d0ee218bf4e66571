package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

func TestGlobSyntax(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"*.go", "main.go", true},
		{"*.go", "src/main.go", false},
		{"*", ".env", true}, // dotfiles, as Gemini CLI's glob (dot: true)
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/.b/c.go", true},
		{"src/**", "src", true},
		{"src/**", "src/a/b", true},
		{"src/**", "srcx/a", false},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/**/b", "a/x/b", true},
		{"a**b", "axyb", true}, // not a whole component: the same as *
		{"a**b", "ax/yb", false},
		{"**", "any/thing/at/all", true},
		{"?.go", "a.go", true},
		{"?", "/", false},
		{"[ab].go", "b.go", true},
		{"[a-c]x", "cx", true},
		{"[a-c]x", "dx", false},
		{"[!a]x", "bx", true},
		{"[!a]x", "ax", false},
		{"[^a]x", "bx", true},
		{"a[^b]c", "a/c", false}, // a class never matches /
		{"a[.-0]c", "a/c", false},
		{"a[.-0]c", "a0c", true},
		{"a[/]c", "a/c", false},
		{`[\]]`, "]", true},
		{`[a\-z]`, "-", true},
		{`[a\-z]`, "b", false},
		{"*.{md,txt}", "x.txt", true},
		{"*.{md,txt}", "x.go", false},
		{"{src/a,lib}/*.go", "src/a/x.go", true},
		{"{src/a,lib}/*.go", "lib/x.go", true},
		{"x.{a,{b,c}d}", "x.cd", true},
		{"x.{a,{b,c}d}", "x.c", false},
		{"x{,.bak}", "x", true},
		{"x{,.bak}", "x.bak", true},
		{"{**/,}*.go", "a/b/c.go", true},
		{"a{b", "a{b", true}, // no }: the character itself
		{"a}b", "a}b", true},
		{"a,b", "a,b", true},
		{`\*`, "*", true},
		{`\*`, "x", false},
		{"(x)+|y$", "(x)+|y$", true}, // regexp syntax is just characters
		{"docs/*", "docs", false},
	}
	for _, tt := range tests {
		g, err := compileGlob(tt.pattern)
		if err != nil {
			t.Errorf("compileGlob(%q): %v", tt.pattern, err)
			continue
		}
		if got := g.match(tt.path); got != tt.want {
			t.Errorf("%q matches %q: %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
	for _, bad := range []string{"[ab", "[]", "[!]", `a\`, "[z-a]", strings.Repeat("x", maxGlobPattern+1)} {
		if _, err := compileGlob(bad); err == nil {
			t.Errorf("compileGlob(%q) accepted a malformed pattern", bad)
		}
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// braceBomb is 26 groups of two alternatives: 2^26 patterns to a matcher
// that expands braces.
var braceBomb = strings.Repeat("{a,b}", 26)

// TestBraceBombIsCheap: a pattern of 26 brace groups, wherever a tool takes
// a pattern, is matched in linear time: the call returns within its
// deadline having used little CPU (expanded, the groups burnt seconds of
// CPU per file, past the deadline).
func TestBraceBombIsCheap(t *testing.T) {
	_, tools := newWorkspace(t)
	bomb, _ := json.Marshal(braceBomb)
	for _, c := range []struct{ tool, args string }{
		{"glob", `{"pattern":` + string(bomb) + `}`},
		{"glob", `{"pattern":"**/` + braceBomb + `/*.go"}`},
		{"search_file_content", `{"pattern":"x","include":` + string(bomb) + `}`},
		{"read_many_files", `{"paths":["**"],"exclude":[` + string(bomb) + `]}`},
		{"read_many_files", `{"paths":[` + string(bomb) + `]}`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		before := cpuTime(t)
		out, err := tools[c.tool].Run(ctx, &tool.Call{ID: "t", Args: json.RawMessage(c.args)})
		used := cpuTime(t) - before
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s %.60s: %v", c.tool, c.args, err)
		} else if err == nil && out.Err != nil {
			t.Errorf("%s %.60s: %s %s", c.tool, c.args, out.Err.Type, out.LLMContent)
		}
		if used > 2*time.Second {
			t.Errorf("%s %.60s used %v of CPU", c.tool, c.args, used)
		}
	}
}

func TestMalformedPatternIsInvalidParams(t *testing.T) {
	_, tools := newWorkspace(t)
	for _, c := range []struct{ tool, args string }{
		{"glob", `{"pattern":"src/[ab"}`},
		{"search_file_content", `{"pattern":"x","include":"[ab"}`},
		{"read_many_files", `{"paths":["*.md"],"exclude":["[ab"]}`},
		{"read_many_files", `{"paths":["[ab*"]}`},
	} {
		out := run(t, tools[c.tool], c.args)
		if out.Err == nil || out.Err.Type != events.ErrInvalidParams || !strings.Contains(out.LLMContent, "[ab") {
			t.Errorf("%s %s: %+v", c.tool, c.args, out)
		}
	}
}
