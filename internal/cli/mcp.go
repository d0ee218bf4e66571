package cli

import (
	"flag"
)

// MCPFlags are the files an executor reads its MCP servers from: a Gemini
// CLI settings.json and a Claude Code .mcp.json, each as the agent writes
// it (settings.ReadFiles, then executornode). When both name a server, the .mcp.json
// entry wins.
type MCPFlags struct {
	Settings  *string
	MCPConfig *string
}

// AddMCPFlags registers --mcp-config on fs, and --settings unless the
// command has its own (settings, which `toolbus up` also reads for the
// registry).
func AddMCPFlags(fs *flag.FlagSet, settings *string) *MCPFlags {
	if settings == nil {
		settings = fs.String("settings", "", "Gemini CLI settings.json whose mcpServers this executor connects to and whose tools.discoveryCommand it runs")
	}
	return &MCPFlags{Settings: settings,
		MCPConfig: fs.String("mcp-config", "", "Claude Code .mcp.json whose mcpServers this executor connects to")}
}
