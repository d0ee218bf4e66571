package cli

import (
	"flag"
)

// HookFlags are the settings files whose hooks an executor runs: Gemini
// CLI's settings.json (--settings, which the command shares with the MCP
// servers and the registry) and Claude Code's (--claude-settings), each
// read as its agent writes it (ReadSettings, then ApplyHooks).
type HookFlags struct {
	Settings       *string
	ClaudeSettings *string
}

// AddHookFlags registers --claude-settings on fs; settings is the
// command's --settings (nil when it has none).
func AddHookFlags(fs *flag.FlagSet, settings *string) *HookFlags {
	return &HookFlags{Settings: settings, ClaudeSettings: fs.String("claude-settings", "",
		"Claude Code settings.json whose hooks (PreToolUse, PostToolUse) the executor runs around calls; Gemini CLI hooks (BeforeTool, AfterTool) come from --settings")}
}
