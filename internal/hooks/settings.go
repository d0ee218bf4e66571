package hooks

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/toolbus/toolbus/internal/jsonc"
)

// The settings files, as each agent writes them:
//
// Claude Code (.claude/settings.json):
//
//	{"hooks": {"PreToolUse": [{"matcher": "Bash",
//	  "hooks": [{"type": "command", "command": "…", "timeout": 60}]}]}}
//
// with timeout in seconds. Gemini CLI (.gemini/settings.json):
//
//	{"hooks": {"BeforeTool": [{"matcher": "run_shell_command", "sequential": true,
//	  "hooks": [{"type": "command", "command": "…", "name": "…", "timeout": 60000, "description": "…"}]}]}}
//
// with timeout in milliseconds; "enabled" and "disabled" (hook names) may
// sit beside the events in "hooks" or in "hooksConfig" (Claude Code's
// "disableAllHooks" turns a file's hooks off). Events other than
// the tool events are left out with a note; a hook of another type than
// "command", a matcher that does not compile, or a field of the wrong type
// is an error.

// Load reads the hooks of the settings file at path, written by the agent
// of dialect d. A file without hooks gives an empty Set.
func Load(path string, d Dialect) (*Set, error) {
	if path == "" {
		return nil, errNoHook
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hooks: %w", err)
	}
	s, err := Parse(data, d, path)
	if err != nil {
		return nil, fmt.Errorf("hooks in %s: %w", path, err)
	}
	return s, nil
}

// Parse reads the hooks of a settings file's contents (comments allowed,
// as Gemini CLI allows them); file names it in messages.
func Parse(data []byte, d Dialect, file string) (*Set, error) {
	if d != ClaudeCode && d != GeminiCLI {
		return nil, fmt.Errorf("unknown dialect %v", d)
	}
	var top struct {
		Hooks       map[string]json.RawMessage `json:"hooks"`
		HooksConfig *switches                  `json:"hooksConfig"`     // Gemini CLI
		DisableAll  bool                       `json:"disableAllHooks"` // Claude Code
	}
	if err := json.Unmarshal(jsonc.StripComments(data), &top); err != nil {
		return nil, fmt.Errorf("not a settings file: %w", err)
	}
	s := &Set{}
	if len(top.Hooks) == 0 {
		return s, nil
	}
	on := switches{}
	if top.HooksConfig != nil && d == GeminiCLI {
		on = *top.HooksConfig
	}
	if top.DisableAll && d == ClaudeCode {
		on.Enabled = new(false)
	}
	keys := make([]string, 0, len(top.Hooks))
	for k := range top.Hooks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	events := map[string]Event{}
	if d == ClaudeCode {
		events["PreToolUse"], events["PostToolUse"] = Pre, Post
	} else {
		events["BeforeTool"], events["AfterTool"] = Pre, Post
	}
	raw := map[Event]json.RawMessage{}
	for _, k := range keys {
		v := top.Hooks[k]
		if ev, ok := events[k]; ok {
			raw[ev] = v
			continue
		}
		if d == GeminiCLI {
			// Gemini CLI's switches, beside the events in older versions.
			switch k {
			case "enabled":
				if err := json.Unmarshal(v, &on.Enabled); err != nil {
					return nil, fmt.Errorf("hooks.enabled: %w", err)
				}
				continue
			case "disabled":
				if err := json.Unmarshal(v, &on.Disabled); err != nil {
					return nil, fmt.Errorf("hooks.disabled: %w", err)
				}
				continue
			case "notifications":
				continue
			}
		}
		s.Notes = append(s.Notes, noteFor(d, k, file))
	}
	if on.Enabled != nil && !*on.Enabled {
		if len(raw) > 0 {
			how := "enabled: false"
			if d == ClaudeCode {
				how = "disableAllHooks"
			}
			s.Notes = append(s.Notes, fmt.Sprintf("%s: hooks are turned off (%s); none of its hooks run", file, how))
		}
		return s, nil
	}
	for _, ev := range []Event{Pre, Post} {
		v, ok := raw[ev]
		if !ok {
			continue
		}
		groups, err := parseGroups(v, d, ev, file, on.Disabled, &s.Notes)
		if err != nil {
			return nil, fmt.Errorf("hooks.%s: %w", d.EventName(ev), err)
		}
		if ev == Pre {
			s.Pre = groups
		} else {
			s.Post = groups
		}
	}
	return s, nil
}

// switches are Gemini CLI's hooksConfig.
type switches struct {
	Enabled  *bool    `json:"enabled"`
	Disabled []string `json:"disabled"`
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

// groupJSON and hookJSON are a group and a hook as the files write them.
type groupJSON struct {
	Matcher    *string           `json:"matcher"`
	Sequential bool              `json:"sequential"`
	Hooks      []json.RawMessage `json:"hooks"`
}

type hookJSON struct {
	Type        string   `json:"type"`
	Command     string   `json:"command"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Timeout     *float64 `json:"timeout"`
}

func parseGroups(data json.RawMessage, d Dialect, ev Event, file string, disabled []string, notes *[]string) ([]Group, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("want an array of hook groups: %w", err)
	}
	var groups []Group
	for i, r := range raw {
		var gj groupJSON
		if err := json.Unmarshal(r, &gj); err != nil {
			return nil, fmt.Errorf("group %d: %w", i, err)
		}
		if gj.Hooks == nil {
			return nil, fmt.Errorf("group %d: no \"hooks\" array", i)
		}
		g := Group{Sequential: gj.Sequential}
		if gj.Matcher != nil {
			m, err := NewMatcher(d, *gj.Matcher)
			if err != nil {
				return nil, fmt.Errorf("group %d: %w", i, err)
			}
			g.Matcher = m
		}
		for j, hr := range gj.Hooks {
			h, err := parseHook(hr, d, file)
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

func parseHook(data json.RawMessage, d Dialect, file string) (*Hook, error) {
	var hj hookJSON
	if err := json.Unmarshal(data, &hj); err != nil {
		return nil, err
	}
	if hj.Type != "command" {
		return nil, fmt.Errorf("type %q: toolbus runs hooks of type \"command\" only", hj.Type)
	}
	if hj.Command == "" {
		return nil, fmt.Errorf("no command")
	}
	h := &Hook{Name: hj.Name, Command: hj.Command, Description: hj.Description, Dialect: d, File: file}
	if hj.Timeout != nil {
		t := *hj.Timeout
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
