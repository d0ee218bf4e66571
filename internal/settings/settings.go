// Package settings reads the agents' settings files, as the agents write
// them, into one typed value: Gemini CLI's settings.json, Claude Code's
// settings.json and Claude Code's .mcp.json. A file written for its agent
// reads unchanged: keys toolbus has no use for are ignored.
//
// Reading checks the form of what it reads: JSON with // and /* */
// comments (as Gemini CLI allows them), and the type of every value read;
// an error says where, as FILE:LINE:COLUMN. What the values mean (that a
// command splits into words, a matcher compiles, a server can be
// connected) is for the part of toolbus that takes them: the registry
// File.Tools, discovery File.Discovery, the MCP servers File.MCP and
// File.MCPServers, the hooks File.Hooks.
//
// A mistake in one mcpServers entry is that entry's alone: it is noted in
// the entry (Server.Problems), and the file and the other entries still
// read.
package settings

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Format is what a file is read as; it decides which keys are read.
type Format int

const (
	// GeminiSettings is Gemini CLI's settings.json: tools, mcp,
	// mcpServers, hooks and hooksConfig, toolbus's own toolbus, and the
	// older top-level keys Gemini CLI still reads (coreTools,
	// excludeTools, toolDiscoveryCommand, toolCallCommand,
	// allowMCPServers, excludeMCPServers).
	GeminiSettings Format = iota + 1
	// ClaudeSettings is Claude Code's settings.json: hooks,
	// disableAllHooks and toolbus's own toolbus.
	ClaudeSettings
	// MCPConfig is a file read for its MCP servers only: Claude Code's
	// .mcp.json, or the MCP keys (mcpServers, mcp, allowMCPServers,
	// excludeMCPServers) of a Gemini CLI settings.json. The agents'
	// mcpServers entries share their keys, so one reading serves both.
	MCPConfig
)

// String names the format in messages.
func (f Format) String() string {
	switch f {
	case GeminiSettings:
		return "Gemini CLI settings"
	case ClaudeSettings:
		return "Claude Code settings"
	case MCPConfig:
		return "MCP configuration"
	}
	return fmt.Sprintf("format(%d)", int(f))
}

// File is one settings file, read. The parts its Format does not read are
// empty. Nothing changes a File once Read or Parse returns it, so it may be
// read concurrently.
type File struct {
	// Path is the file read, or the name given to Parse; it names the
	// file in messages. It is empty for no file.
	Path   string
	Format Format

	// Tools are the registry's keys (GeminiSettings).
	Tools Tools
	// Discovery are the discovery command's keys (GeminiSettings).
	Discovery Discovery
	// MCP are the lists that let MCP servers connect or keep them out
	// (GeminiSettings, MCPConfig).
	MCP MCP
	// MCPServers are the mcpServers entries, sorted by name, one per name
	// (GeminiSettings, MCPConfig).
	MCPServers []Server
	// Hooks are the tool hooks (GeminiSettings, ClaudeSettings).
	Hooks Hooks
	// Toolbus is the toolbus key: the composite tools (GeminiSettings,
	// ClaudeSettings).
	Toolbus Toolbus
}

// Read reads the file at path as a file of format f. An empty path names
// no file: it gives an empty File, as a command given no settings file has
// none. A file that cannot be read is an error wrapping the os error; one
// that does not read as f is an *Error naming path, line and column.
func Read(path string, f Format) (*File, error) {
	if path == "" {
		if err := f.check(); err != nil {
			return nil, err
		}
		return &File{Format: f}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	return Parse(data, path, f)
}

// Parse reads data, the contents of a file of format f; name names it in
// File.Path and in errors, and may be empty. An error is an *Error: the
// data is not JSON (errors.Is ErrSyntax), not a JSON object, or has a value
// of the wrong type or form where f reads one.
func Parse(data []byte, name string, f Format) (*File, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	data = stripComments(data)
	// The syntax of the whole file comes first, so that a file cut short
	// says so rather than naming the first value of a wrong type.
	var v jsontext.Value
	if err := json.Unmarshal(data, &v, decodeOptions); err != nil {
		return nil, errorAt(data, name, err)
	}
	if k := v.Kind(); k != '{' {
		start := len(data) - len(bytes.TrimLeft(data, " \t\r\n"))
		return nil, newError(data, name, int64(start), "not a JSON object but "+kindName(k), nil)
	}
	out := &File{Path: name, Format: f}
	var err error
	switch f {
	case GeminiSettings:
		var g geminiJSON
		if err = json.Unmarshal(data, &g, decodeOptions); err == nil {
			out.Tools, out.Discovery = g.Tools.tools(g), g.Tools.discovery(g)
			out.MCP, out.MCPServers = g.mcpJSON.lists(), g.mcpJSON.servers()
			out.Hooks = g.Hooks.hooks(g.HooksConfig)
			out.Toolbus = g.Toolbus.toolbus()
		}
	case ClaudeSettings:
		var c claudeJSON
		if err = json.Unmarshal(data, &c, decodeOptions); err == nil {
			out.Hooks = c.Hooks.hooks(c.DisableAllHooks)
			out.Toolbus = c.Toolbus.toolbus()
		}
	case MCPConfig:
		var m mcpJSON
		if err = json.Unmarshal(data, &m, decodeOptions); err == nil {
			out.MCP, out.MCPServers = m.lists(), m.servers()
		}
	}
	if err != nil {
		return nil, errorAt(data, name, err)
	}
	return out, nil
}

func (f Format) check() error {
	if f < GeminiSettings || f > MCPConfig {
		return fmt.Errorf("settings: unknown format %v", f)
	}
	return nil
}

// decodeOptions read JSON as the agents' own readers (JavaScript's
// JSON.parse) do: a repeated key takes the last value, and a string that
// is not valid UTF-8 is read with U+FFFD in place of the bad bytes.
var decodeOptions = json.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// The files' top-level keys, as each format reads them.
type (
	geminiJSON struct {
		Tools                toolsJSON      `json:"tools"`
		CoreTools            []string       `json:"coreTools"`
		ExcludeTools         []string       `json:"excludeTools"`
		AllowedTools         jsontext.Value `json:"allowedTools"`
		ToolDiscoveryCommand *command       `json:"toolDiscoveryCommand"`
		ToolCallCommand      *command       `json:"toolCallCommand"`
		Hooks                *geminiHooks   `json:"hooks"`
		HooksConfig          *switches      `json:"hooksConfig"`
		Toolbus              *toolbusJSON   `json:"toolbus"`
		mcpJSON
	}
	claudeJSON struct {
		Hooks           *claudeHooks `json:"hooks"`
		DisableAllHooks bool         `json:"disableAllHooks"`
		Toolbus         *toolbusJSON `json:"toolbus"`
	}
	mcpJSON struct {
		MCP               *mcpListsJSON `json:"mcp"`
		AllowMCPServers   names         `json:"allowMCPServers"`
		ExcludeMCPServers names         `json:"excludeMCPServers"`
		MCPServers        servers       `json:"mcpServers"`
	}
)

// sortedKeys are the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// pick is the value of a key, else of the older key Gemini CLI migrates to
// it, and the name of the key it came from.
func pick[T any](v *T, key string, older *T, olderKey string) (*T, string) {
	if v == nil && older != nil {
		return older, olderKey
	}
	return v, key
}

// orOlder is list, else the list of the older key when list is empty, and
// the name of the key it came from.
func orOlder(list []string, key string, older []string, olderKey string) ([]string, string) {
	if len(list) == 0 && len(older) > 0 {
		return older, olderKey
	}
	return list, key
}
