package settings

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
