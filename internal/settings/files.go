package settings

import (
	"os"
	"path/filepath"
)

// Files are the agents' settings files a command was given, each read
// once; the parts of toolbus take theirs from them. A file not given is
// an empty File with an empty Path.
type Files struct {
	// Gemini is Gemini CLI's settings.json (--settings): the registry's
	// tools keys, the discovery command, MCP servers and hooks.
	Gemini *File
	// Claude is Claude Code's settings.json (--claude-settings): hooks.
	Claude *File
	// MCPConfig is Claude Code's .mcp.json (--mcp-config): MCP servers.
	MCPConfig *File
}

// ReadFiles reads the files named, each as its agent writes it; an empty
// name is a file not given.
func ReadFiles(gemini, claude, mcpConfig string) (*Files, error) {
	var s Files
	for _, f := range []struct {
		path   string
		format Format
		into   **File
	}{{gemini, GeminiSettings, &s.Gemini}, {claude, ClaudeSettings, &s.Claude}, {mcpConfig, MCPConfig, &s.MCPConfig}} {
		var err error
		if *f.into, err = Read(f.path, f.format); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// The files an agent keeps in a project's directory, which `toolbus up`
// reads when it is given no others, so that a project that works with its
// agent works with toolbus unchanged. The default policy keeps agents from
// writing them (policy/paths.rego): an agent that could would start any
// program as an MCP server of the next `toolbus up`.
var (
	ProjectGemini = filepath.Join(".gemini", "settings.json")
	ProjectClaude = filepath.Join(".claude", "settings.json")
	ProjectMCP    = ".mcp.json"
)

// ProjectPaths are the files to read: each one named, else the project's
// own in dir when it is there ("" for none).
func ProjectPaths(dir, gemini, claude, mcpConfig string) (string, string, string) {
	orProject := func(named, own string) string {
		if named != "" {
			return named
		}
		path := filepath.Join(dir, own)
		if dir == "." || dir == "" {
			path = own
		}
		if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() {
			return path
		}
		return ""
	}
	return orProject(gemini, ProjectGemini), orProject(claude, ProjectClaude), orProject(mcpConfig, ProjectMCP)
}
