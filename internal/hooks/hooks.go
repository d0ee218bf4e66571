// Package hooks runs user hooks around tool calls, as Claude Code and
// Gemini CLI configure them in their settings.json: shell commands, each
// with a matcher on the tool's name, that get the call as JSON on stdin
// before it runs (PreToolUse, BeforeTool) and with its result after
// (PostToolUse, AfterTool), and answer with an exit code and JSON on
// stdout.
//
// A Set is what the settings files configure (internal/settings reads
// them; SetFrom, settings.go); a Plan is the hooks of a Set that match one
// tool (matcher.go); a Runner runs a hook and reads its answer into an
// Outcome (run.go, output.go). What the executor does with an Outcome — a
// pre hook can only make a verdict stricter — is the executor's business.
package hooks

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Event is when a hook runs.
type Event int

// The two events toolbus runs hooks for.
const (
	// Pre is before the tool runs, after the policy's decision and before
	// any approver is asked (Claude Code PreToolUse, Gemini CLI BeforeTool).
	Pre Event = iota + 1
	// Post is after the tool ran, before its result is sent (PostToolUse,
	// AfterTool).
	Post
)

// String is the event's name in the audit trail: "pre" or "post".
func (e Event) String() string {
	switch e {
	case Pre:
		return "pre"
	case Post:
		return "post"
	}
	return fmt.Sprintf("event(%d)", int(e))
}

// Dialect is the agent whose settings file a hook came from. It decides how
// the hook's matcher reads, what the hook finds on stdin and the event's
// name in messages: a hook written for one agent runs here as it did there.
type Dialect int

// The two agents whose hooks toolbus reads.
const (
	ClaudeCode Dialect = iota + 1
	GeminiCLI
)

// String names the agent.
func (d Dialect) String() string {
	switch d {
	case ClaudeCode:
		return "Claude Code"
	case GeminiCLI:
		return "Gemini CLI"
	}
	return fmt.Sprintf("dialect(%d)", int(d))
}

// EventName is the agent's own name for e: PreToolUse / PostToolUse for
// Claude Code, BeforeTool / AfterTool for Gemini CLI.
func (d Dialect) EventName(e Event) string {
	if d == GeminiCLI {
		if e == Pre {
			return "BeforeTool"
		}
		return "AfterTool"
	}
	if e == Pre {
		return "PreToolUse"
	}
	return "PostToolUse"
}

// DefaultTimeout is how long a hook may run when its settings give no
// timeout: 60 seconds, as in both agents.
const DefaultTimeout = 60 * time.Second

// Hook is one configured hook.
type Hook struct {
	// Name is the hook's name as configured (Gemini CLI's name); Claude
	// Code hooks have none.
	Name string
	// Command is the shell command, run with bash -c.
	Command string
	// Description is the configured description, for people.
	Description string
	// Timeout bounds a run; zero means DefaultTimeout.
	Timeout time.Duration
	// Dialect is the agent whose file the hook came from.
	Dialect Dialect
	// File is the settings file it came from, for messages.
	File string
	// Func, when set instead of Command, is the hook: for programs that
	// embed an executor (and tests that need to act between the policy's
	// decision and the tool's run). It gets the same Input and its
	// Outcome counts the same as a command's; the context ends at the
	// hook's timeout. A panic is a failed hook.
	Func func(ctx context.Context, in *Input) Outcome
}

// Label is how messages and the audit trail name the hook: its name, else
// its command (cut to 100 characters).
func (h *Hook) Label() string {
	switch {
	case h.Name != "":
		return h.Name
	case h.Command != "":
		return cut(h.Command, 100)
	}
	return "function hook"
}

func (h *Hook) timeout() time.Duration {
	if h.Timeout <= 0 {
		return DefaultTimeout
	}
	return h.Timeout
}

// Group is hooks under one matcher, as the settings files group them.
type Group struct {
	// Matcher selects the tools; nil matches every tool.
	Matcher *Matcher
	// Sequential runs the group's hooks one after another, stopping at
	// the first that blocks (Gemini CLI's sequential); otherwise the
	// hooks of a call run at the same time, as both agents run them.
	Sequential bool
	Hooks      []*Hook
}

// Set is every configured hook, by event. It is not changed once an
// executor runs it; it is safe for concurrent use then.
type Set struct {
	Pre, Post []Group
	// Notes say what of the files was left out (events toolbus does not
	// run, hooks turned off), for the log.
	Notes []string
}

// Empty reports whether s holds no hook (s may be nil).
func (s *Set) Empty() bool {
	if s == nil {
		return true
	}
	for _, groups := range [][]Group{s.Pre, s.Post} {
		for _, g := range groups {
			if len(g.Hooks) > 0 {
				return false
			}
		}
	}
	return true
}

// Commands reports whether s holds a command hook, one that starts a
// process (s may be nil).
func (s *Set) Commands() bool {
	if s == nil {
		return false
	}
	for _, groups := range [][]Group{s.Pre, s.Post} {
		for _, g := range groups {
			for _, h := range g.Hooks {
				if h.Func == nil {
					return true
				}
			}
		}
	}
	return false
}

// Validate reports a hook that cannot run: neither a command nor a
// function, or both.
func (s *Set) Validate() error {
	if s == nil {
		return nil
	}
	for _, ev := range []struct {
		e      Event
		groups []Group
	}{{Pre, s.Pre}, {Post, s.Post}} {
		for i, g := range ev.groups {
			for j, h := range g.Hooks {
				switch {
				case h == nil:
					return fmt.Errorf("hooks: %s group %d, hook %d: nil", ev.e, i, j)
				case (h.Command == "") == (h.Func == nil):
					return fmt.Errorf("hooks: %s group %d, hook %d (%s): give a command or a function, not both or neither", ev.e, i, j, h.Label())
				case h.Timeout < 0:
					return fmt.Errorf("hooks: %s group %d, hook %q: negative timeout", ev.e, i, h.Label())
				}
			}
		}
	}
	return nil
}

// Merge returns a Set with the hooks and notes of every set given, in
// order; nil sets are skipped.
func Merge(sets ...*Set) *Set {
	out := &Set{}
	for _, s := range sets {
		if s == nil {
			continue
		}
		out.Pre = append(out.Pre, s.Pre...)
		out.Post = append(out.Post, s.Post...)
		out.Notes = append(out.Notes, s.Notes...)
	}
	return out
}

// Plan is the hooks of a Set that match one tool.
type Plan struct {
	Pre, Post []*Hook
	// PreSequential and PostSequential: a matching group asked for its
	// hooks to run one after another, so all of the event's do (as
	// Gemini CLI plans them).
	PreSequential, PostSequential bool
}

// PlanFor returns the hooks that match t, each once (the same command
// configured twice runs once), or nil when none does. It compiles
// nothing: matchers are compiled when the Set is read.
func (s *Set) PlanFor(t Tool) *Plan {
	if s.Empty() {
		return nil
	}
	names := t.matchNames()
	var p Plan
	p.Pre, p.PreSequential = planEvent(s.Pre, names)
	p.Post, p.PostSequential = planEvent(s.Post, names)
	if len(p.Pre) == 0 && len(p.Post) == 0 {
		return nil
	}
	return &p
}

func planEvent(groups []Group, names []string) ([]*Hook, bool) {
	var out []*Hook
	sequential := false
	for _, g := range groups {
		if !g.Matcher.Match(names) {
			continue
		}
		sequential = sequential || g.Sequential
	next:
		for _, h := range g.Hooks {
			for _, o := range out {
				if o == h || (h.Func == nil && o.Func == nil && o.Command == h.Command && o.Dialect == h.Dialect) {
					continue next
				}
			}
			out = append(out, h)
		}
	}
	return out, sequential
}

// cut shortens s to at most n characters, on a character boundary, saying
// so when it cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return strings.ToValidUTF8(s[:i], "") + "…"
}
