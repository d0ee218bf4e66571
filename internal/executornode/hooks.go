package executornode

import (
	"log/slog"

	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/settings"
)

// applyHooks puts the hooks of the settings files (Gemini CLI's and Claude
// Code's settings.json) into cfg.Hooks. A matcher that does not compile or
// a hook that is not a command is an error; what is left out (other events,
// hooks turned off) is logged.
func applyHooks(cfg *executor.Config, files *settings.Files, log *slog.Logger) error {
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
