package cli

import (
	"github.com/toolbus/toolbus/internal/settings"
)

// SettingsFiles are the agents' settings files a command was given, each
// read once; the parts of toolbus take theirs from them. A file not given
// is an empty File with an empty Path.
type SettingsFiles struct {
	// Gemini is Gemini CLI's settings.json (--settings): the registry's
	// tools keys, the discovery command, MCP servers and hooks.
	Gemini *settings.File
	// Claude is Claude Code's settings.json (--claude-settings): hooks.
	Claude *settings.File
	// MCPConfig is Claude Code's .mcp.json (--mcp-config): MCP servers.
	MCPConfig *settings.File
}

// ReadSettings reads the files named, each as its agent writes it; an empty
// name is a file not given.
func ReadSettings(gemini, claude, mcpConfig string) (*SettingsFiles, error) {
	var s SettingsFiles
	for _, f := range []struct {
		path   string
		format settings.Format
		into   **settings.File
	}{{gemini, settings.GeminiSettings, &s.Gemini}, {claude, settings.ClaudeSettings, &s.Claude}, {mcpConfig, settings.MCPConfig, &s.MCPConfig}} {
		var err error
		if *f.into, err = settings.Read(f.path, f.format); err != nil {
			return nil, err
		}
	}
	return &s, nil
}
