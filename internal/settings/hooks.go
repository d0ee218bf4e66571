package settings

import (
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Hooks are the tool hooks of a settings file, as its agent writes them.
//
// Claude Code (.claude/settings.json):
//
//	{"hooks": {"PreToolUse": [{"matcher": "Bash",
//	  "hooks": [{"type": "command", "command": "…", "timeout": 60}]}]}}
//
// Gemini CLI (.gemini/settings.json):
//
//	{"hooks": {"BeforeTool": [{"matcher": "run_shell_command", "sequential": true,
//	  "hooks": [{"type": "command", "command": "…", "name": "…", "timeout": 60000, "description": "…"}]}]}}
//
// Gemini CLI's "enabled" and "disabled" may sit beside the events in
// "hooks" (older files) or in "hooksConfig"; the ones in "hooks" win.
type Hooks struct {
	// Pre and Post are the groups of the events before a tool call
	// (Claude Code's PreToolUse, Gemini CLI's BeforeTool) and after it
	// (PostToolUse, AfterTool); nil when the file does not name the event.
	Pre, Post []HookGroup
	// Others are the other events the file names, sorted, whatever their
	// value.
	Others []string
	// Off is set when the file turns its hooks off: Gemini CLI's
	// enabled: false, Claude Code's disableAllHooks.
	Off bool
	// Disabled names hooks, by name or command, not to run (Gemini CLI).
	Disabled []string
}

// HookGroup is hooks under one matcher.
type HookGroup struct {
	// Matcher is as written; nil when not given.
	Matcher *string `json:"matcher"`
	// Sequential runs the group's hooks one after another (Gemini CLI).
	Sequential bool `json:"sequential"`
	// Hooks are nil when the group gives no hooks array.
	Hooks []Hook `json:"hooks"`
}

// Hook is one hook as written: its type ("command" is the one toolbus
// runs), command, name (Gemini CLI), description and timeout.
type Hook struct {
	Type        string `json:"type"`
	Command     string `json:"command"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// Timeout is in the agent's unit: seconds for Claude Code,
	// milliseconds for Gemini CLI; nil when not given.
	Timeout *float64 `json:"timeout"`
}

// The hooks key of each agent's settings.json.
type (
	claudeHooks struct {
		PreToolUse  *hookGroups               `json:"PreToolUse"`
		PostToolUse *hookGroups               `json:"PostToolUse"`
		Others      map[string]jsontext.Value `json:",embed"`
	}
	geminiHooks struct {
		BeforeTool    *hookGroups               `json:"BeforeTool"`
		AfterTool     *hookGroups               `json:"AfterTool"`
		Enabled       *bool                     `json:"enabled"`
		Disabled      *[]string                 `json:"disabled"`
		Notifications jsontext.Value            `json:"notifications"`
		Others        map[string]jsontext.Value `json:",embed"`
	}
	// switches are Gemini CLI's hooksConfig.
	switches struct {
		Enabled  *bool    `json:"enabled"`
		Disabled []string `json:"disabled"`
	}
)

func (c *claudeHooks) hooks(disableAll bool) Hooks {
	if c == nil {
		return Hooks{Off: disableAll}
	}
	return Hooks{Pre: c.PreToolUse.groups(), Post: c.PostToolUse.groups(), Others: sortedKeys(c.Others), Off: disableAll}
}

func (g *geminiHooks) hooks(config *switches) Hooks {
	on := switches{}
	if config != nil {
		on = *config
	}
	h := Hooks{}
	if g != nil {
		h.Pre, h.Post, h.Others = g.BeforeTool.groups(), g.AfterTool.groups(), sortedKeys(g.Others)
		if g.Enabled != nil {
			on.Enabled = g.Enabled
		}
		if g.Disabled != nil {
			on.Disabled = *g.Disabled
		}
	}
	h.Off, h.Disabled = on.Enabled != nil && !*on.Enabled, on.Disabled
	return h
}

// hookGroups are the groups of one event.
type hookGroups []HookGroup

func (g *hookGroups) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if k := dec.PeekKind(); k != '[' {
		return &valueError{": want an array of hook groups, got " + kindName(k)}
	}
	return json.UnmarshalDecode(dec, (*[]HookGroup)(g))
}

// groups are the groups of an event given, never nil; nil for one not
// given.
func (g *hookGroups) groups() []HookGroup {
	if g == nil {
		return nil
	}
	if *g == nil {
		return []HookGroup{}
	}
	return *g
}
