package executornode

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/toolbus/toolbus/internal/composite"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/settings"
	"github.com/toolbus/toolbus/internal/tool"
)

// hostComposites hosts on ex the composite tools the settings files
// define (the toolbus key of Gemini CLI's and Claude Code's
// settings.json), which the settings reader checked. A name defined in
// both files, or one of the built-in tools' (builtins), is an error: a
// composite would replace the tool of that name for every agent.
func hostComposites(ctx context.Context, ex *executor.Executor, files *settings.Files, builtins []tool.Tool, log *slog.Logger) error {
	taken := make(map[string]string)
	for _, t := range builtins {
		taken[t.Spec().Name] = "a built-in tool"
	}
	var tools []tool.Tool
	for _, f := range []*settings.File{files.Gemini, files.Claude} {
		if f == nil {
			continue
		}
		for _, d := range f.Toolbus.Composites {
			if by, ok := taken[d.Name]; ok {
				return fmt.Errorf("settings %s: toolbus.composites.%s: the name is taken by %s; give the composite another", f.Path, d.Name, by)
			}
			taken[d.Name] = "a composite of " + f.Path
			t, err := composite.New(d)
			if err != nil {
				return fmt.Errorf("settings %s: toolbus.composites.%s: %w", f.Path, d.Name, err)
			}
			tools = append(tools, t)
		}
	}
	if len(tools) == 0 {
		return nil
	}
	_, warnings, err := hostReply(ctx, ex, executor.Scope{Source: events.SourceComposite}, tools)
	for _, w := range warnings {
		log.Warn("composite tool", "warning", w)
	}
	return err
}
