package hooks

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/toolbus/toolbus/internal/settings"
)

// SetFrom makes the Set of a settings file's hooks h, as the agent of
// dialect d wrote them (settings.Hooks shows how each does); file names the
// file in notes and errors. Events other than the tool events are left out
// with a note, and so are the hooks of a file that turns them off. A hook
// of another type than "command", without a command, with a timeout that
// is not a positive number of the agent's unit, or under a matcher that
// does not compile is an error.
func SetFrom(h settings.Hooks, d Dialect, file string) (*Set, error) {
	if d != ClaudeCode && d != GeminiCLI {
		return nil, fmt.Errorf("unknown dialect %v", d)
	}
	s := &Set{}
	for _, k := range h.Others {
		s.Notes = append(s.Notes, noteFor(d, k, file))
	}
	if h.Off {
		if h.Pre != nil || h.Post != nil {
			how := "enabled: false"
			if d == ClaudeCode {
				how = "disableAllHooks"
			}
			s.Notes = append(s.Notes, fmt.Sprintf("%s: hooks are turned off (%s); none of its hooks run", file, how))
		}
		return s, nil
	}
	for _, ev := range []Event{Pre, Post} {
		groups, into := h.Pre, &s.Pre
		if ev == Post {
			groups, into = h.Post, &s.Post
		}
		var err error
		if *into, err = setGroups(groups, d, file, h.Disabled, &s.Notes); err != nil {
			err = fmt.Errorf("hooks.%s: %w", d.EventName(ev), err)
			if file != "" {
				err = fmt.Errorf("hooks in %s: %w", file, err)
			}
			return nil, err
		}
	}
	return s, nil
}

// Parse reads the hooks of a settings file's contents, written by the agent
// of dialect d, as settings.Parse and SetFrom do; file names it in messages.
func Parse(data []byte, d Dialect, file string) (*Set, error) {
	format := settings.ClaudeSettings
	switch d {
	case GeminiCLI:
		format = settings.GeminiSettings
	case ClaudeCode:
	default:
		return nil, fmt.Errorf("unknown dialect %v", d)
	}
	f, err := settings.Parse(data, file, format)
	if err != nil {
		return nil, fmt.Errorf("not a settings file: %w", err)
	}
	return SetFrom(f.Hooks, d, file)
}

func noteFor(d Dialect, event, file string) string {
	other := GeminiCLI
	if d == GeminiCLI {
		other = ClaudeCode
	}
	for _, ev := range []Event{Pre, Post} {
		if event == other.EventName(ev) {
			return fmt.Sprintf("%s: hooks.%s is %s's name for an event, and this file is read as %s's; its hooks do not run (use %s)", file, event, other, d, d.EventName(ev))
		}
	}
	return fmt.Sprintf("%s: hooks.%s left out: toolbus runs hooks around tool calls only (%s, %s)", file, event, d.EventName(Pre), d.EventName(Post))
}

// setGroups makes the groups of one event, leaving out the hooks disabled
// names (by name or command) with a note.
func setGroups(in []settings.HookGroup, d Dialect, file string, disabled []string, notes *[]string) ([]Group, error) {
	var groups []Group
	for i, gs := range in {
		if gs.Hooks == nil {
			return nil, fmt.Errorf("group %d: no \"hooks\" array", i)
		}
		g := Group{Sequential: gs.Sequential}
		if gs.Matcher != nil {
			m, err := NewMatcher(d, *gs.Matcher)
			if err != nil {
				return nil, fmt.Errorf("group %d: %w", i, err)
			}
			g.Matcher = m
		}
		for j, hs := range gs.Hooks {
			h, err := newHook(hs, d, file)
			if err != nil {
				return nil, fmt.Errorf("group %d, hook %d: %w", i, j, err)
			}
			if slices.Contains(disabled, h.Name) || slices.Contains(disabled, h.Command) {
				*notes = append(*notes, fmt.Sprintf("%s: hook %q is disabled", file, h.Label()))
				continue
			}
			g.Hooks = append(g.Hooks, h)
		}
		if len(g.Hooks) > 0 {
			groups = append(groups, g)
		}
	}
	return groups, nil
}

// newHook makes one hook, its timeout in the unit of d's agent.
func newHook(hs settings.Hook, d Dialect, file string) (*Hook, error) {
	if hs.Type != "command" {
		return nil, fmt.Errorf("type %q: toolbus runs hooks of type \"command\" only", hs.Type)
	}
	if hs.Command == "" {
		return nil, fmt.Errorf("no command")
	}
	h := &Hook{Name: hs.Name, Command: hs.Command, Description: hs.Description, Dialect: d, File: file}
	if hs.Timeout != nil {
		t := *hs.Timeout
		unit, unitName := time.Second, "seconds" // Claude Code
		if d == GeminiCLI {
			unit, unitName = time.Millisecond, "milliseconds"
		}
		if !(t > 0) || t*float64(unit) > float64(math.MaxInt64/2) {
			return nil, fmt.Errorf("timeout %v: want a positive number of %s", t, unitName)
		}
		h.Timeout = time.Duration(t * float64(unit))
		if h.Timeout <= 0 {
			h.Timeout = time.Millisecond
		}
	}
	return h, nil
}
