package cli

import (
	"flag"
	"log/slog"

	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/hooks"
)

// HookFlags are the settings files whose hooks an executor runs: Gemini
// CLI's settings.json (--settings, which the command shares with the MCP
// servers and the registry) and Claude Code's (--claude-settings), each
// read as its agent writes it.
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

// Apply reads the hooks of the files named into cfg.Hooks. A file that
// does not read, a matcher that does not compile or a hook that is not a
// command is an error; what is left out (other events, hooks turned off)
// is logged.
func (f *HookFlags) Apply(cfg *executor.Config, log *slog.Logger) error {
	var sets []*hooks.Set
	for _, file := range []struct {
		path    *string
		dialect hooks.Dialect
	}{{f.Settings, hooks.GeminiCLI}, {f.ClaudeSettings, hooks.ClaudeCode}} {
		if file.path == nil || *file.path == "" {
			continue
		}
		s, err := hooks.Load(*file.path, file.dialect)
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
