package cli

import (
	"flag"
	"log/slog"

	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/settings"
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

// ApplyHooks puts the hooks of the settings files (Gemini CLI's and Claude
// Code's settings.json) into cfg.Hooks. A matcher that does not compile or
// a hook that is not a command is an error; what is left out (other events,
// hooks turned off) is logged.
func ApplyHooks(cfg *executor.Config, files *SettingsFiles, log *slog.Logger) error {
	var sets []*hooks.Set
	for _, file := range []struct {
		f       *settings.File
		dialect hooks.Dialect
	}{{files.Gemini, hooks.GeminiCLI}, {files.Claude, hooks.ClaudeCode}} {
		if file.f.Path == "" {
			continue
		}
		s, err := hooks.SetFrom(file.f.Hooks, file.dialect, file.f.Path)
		if err != nil {
			return err
		}
		for _, note := range s.Notes {
			log.Info("hooks: " + note)
		}
		sets = append(sets, s)
	}
	if set := hooks.Merge(sets...); !set.Empty() {
		cfg.Hooks = set
		log.Info("hooks configured", "pre", len(set.Pre), "post", len(set.Post))
	}
	return nil
}
