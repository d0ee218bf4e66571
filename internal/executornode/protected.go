package executornode

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/protect"
	"github.com/toolbus/toolbus/internal/settings"
)

// protection keeps an executor's protected paths (internal/protect) in
// step with the settings it runs code from: the hooks, read once; the
// discovery and call commands and the stdio MCP servers, which follow
// their files. Safe for concurrent use.
type protection struct {
	finder protect.Finder
	log    *slog.Logger
	apply  func(*protect.Set) // the executor's SetProtected, once it runs

	mu                    sync.Mutex
	hooks, discovery, mcp []protect.Run
	current               *protect.Set
}

func newProtection(workspace string, log *slog.Logger) *protection {
	home, _ := os.UserHomeDir()
	return &protection{finder: protect.Finder{Workspace: workspace, Home: home}, log: log}
}

// set replaces the runs of one source and derives the paths again.
func (p *protection) set(which *[]protect.Run, runs []protect.Run) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*which = runs
	set, notes := p.finder.Find(slices.Concat(p.hooks, p.discovery, p.mcp))
	for _, n := range notes {
		p.log.Info("protected code: " + n)
	}
	if p.current != nil && slices.Equal(p.current.Paths, set.Paths) {
		return
	}
	p.current = set
	if p.apply != nil {
		p.apply(set)
	}
	if len(set.Paths) > 0 {
		p.log.Info("protected code: the policy is shown these paths", "paths", len(set.Paths))
	}
}

// Set is the paths derived last.
func (p *protection) Set() *protect.Set {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

// follow has every later change handed to apply.
func (p *protection) follow(apply func(*protect.Set)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.apply = apply
	apply(p.current)
}

func (p *protection) setHooks(s *hooks.Set) { p.set(&p.hooks, hookRuns(s)) }

func (p *protection) setDiscovery(d settings.Discovery, file string) {
	p.set(&p.discovery, discoveryRuns(d, file))
}

func (p *protection) setMCP(cfg *mcp.Config) { p.set(&p.mcp, mcpRuns(cfg)) }

// hookRuns are the command lines of s's hooks, each run in the workspace.
func hookRuns(s *hooks.Set) []protect.Run {
	if s == nil {
		return nil
	}
	var runs []protect.Run
	for _, ev := range []hooks.Event{hooks.Pre, hooks.Post} {
		groups := s.Pre
		if ev == hooks.Post {
			groups = s.Post
		}
		for _, g := range groups {
			for _, h := range g.Hooks {
				if h.Command == "" {
					continue
				}
				runs = append(runs, protect.Run{Line: h.Command,
					By: fmt.Sprintf("the %s hook %q of %s", h.Dialect.EventName(ev), h.Label(), h.File)})
			}
		}
	}
	return runs
}

// discoveryRuns are the discovery and call commands of d, from file.
func discoveryRuns(d settings.Discovery, file string) []protect.Run {
	var runs []protect.Run
	if d.DiscoveryCommand != "" {
		runs = append(runs, protect.Run{Line: d.DiscoveryCommand, By: fmt.Sprintf("the discovery command of %s", file)})
	}
	if d.CallCommand != "" {
		runs = append(runs, protect.Run{Line: d.CallCommand, By: fmt.Sprintf("the call command of %s", file)})
	}
	return runs
}

// mcpRuns are the commands of cfg's stdio servers, each in its cwd.
func mcpRuns(cfg *mcp.Config) []protect.Run {
	if cfg == nil {
		return nil
	}
	var runs []protect.Run
	for _, s := range cfg.Servers {
		if s.Transport != mcp.Stdio || s.Command == "" {
			continue
		}
		dir := s.Cwd
		if dir != "" {
			// The server starts there, relative to toolbus's own directory.
			if abs, err := filepath.Abs(dir); err == nil {
				dir = abs
			}
		}
		runs = append(runs, protect.Run{Argv: append([]string{s.Command}, s.Args...), Dir: dir,
			By: fmt.Sprintf("the stdio MCP server %q", s.Name)})
	}
	return runs
}
