package executornode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/settings"
	"github.com/toolbus/toolbus/internal/tool"
)

// mcpConfig is the MCP servers of files, in order, later entries winning.
func mcpConfig(files []*settings.File) *mcp.Config {
	cfg := &mcp.Config{}
	for _, f := range files {
		cfg = cfg.Merge(mcp.ConfigFrom(f, os.Getenv))
	}
	return cfg
}

// mcpFiles are those of files that name MCP servers: Gemini CLI's
// settings.json and the .mcp.json, when given, in that order.
func mcpFiles(files *settings.Files) []*settings.File {
	var given []*settings.File
	for _, f := range []*settings.File{files.Gemini, files.MCPConfig} {
		if f.Path != "" {
			given = append(given, f)
		}
	}
	return given
}

// reread reads the MCP keys of files again, as they now are: only those,
// so that a mistake elsewhere in a settings.json does not hold back a
// change of its servers.
func reread(files []*settings.File) ([]*settings.File, error) {
	out := make([]*settings.File, 0, len(files))
	for _, f := range files {
		again, err := settings.Read(f.Path, settings.MCPConfig)
		if err != nil {
			return nil, err
		}
		out = append(out, again)
	}
	return out, nil
}

// MCP is the MCP servers of one executor, and the watch on their
// configuration files.
type MCP struct {
	Manager *mcp.Manager
	files   []*settings.File
	prot    *protection
	log     *slog.Logger
	stop    chan struct{}
	wg      sync.WaitGroup
}

// StartMCP connects ex to the servers of the settings files that name
// MCP servers (Gemini CLI's settings.json and the .mcp.json; when both name
// a server, the .mcp.json entry wins), when any is given, and follows the
// files: a change is applied as it is saved (a server that left is removed
// with its tools, a changed one restarted), and a file that no longer reads
// keeps the servers as they were, with an error in the log. It returns nil
// when neither file is given.
func startMCP(ctx context.Context, b *bus.Bus, ex *executor.Executor, id events.Identity, files *settings.Files, starter *proctree.Starter, prot *protection, log *slog.Logger) (*MCP, error) {
	given := mcpFiles(files)
	if len(given) == 0 {
		return nil, nil
	}
	cfg := mcpConfig(given)
	for _, w := range cfg.Warnings {
		log.Warn("MCP configuration: " + w)
	}
	m, err := mcp.Start(ctx, cfg, mcp.Options{Identity: id, Conn: b.Conn(), JS: b.JetStream(), Host: HostOn(ex), Logger: log, Starter: starter})
	if err != nil {
		return nil, err
	}
	w := &MCP{Manager: m, files: given, prot: prot, log: log, stop: make(chan struct{})}
	w.wg.Add(1)
	go w.follow()
	return w, nil
}

// follow re-reads the files when one changes.
func (w *MCP) follow() {
	defer w.wg.Done()
	paths := make([]string, len(w.files))
	for i, f := range w.files {
		paths[i] = f.Path
	}
	last := stamps(paths)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		now := stamps(paths)
		if now == last {
			continue
		}
		last = now
		files, err := reread(w.files)
		if err != nil {
			w.log.Error("MCP configuration not applied; the servers stay as they were", "err", err)
			continue
		}
		cfg := mcpConfig(files)
		for _, warning := range cfg.Warnings {
			w.log.Warn("MCP configuration: " + warning)
		}
		w.log.Info("MCP configuration changed; applying it")
		// The new servers' code is protected before they start.
		w.prot.setMCP(cfg)
		w.Manager.Apply(cfg)
	}
}

// stamps says when and how the files last changed.
func stamps(paths []string) string {
	s := ""
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%s %d %d;", p, fi.ModTime().UnixNano(), fi.Size())
		} else {
			s += p + " missing;"
		}
	}
	return s
}

// Stop stops following the files and every server: stdio servers'
// processes are ended and reaped.
func (w *MCP) Stop() {
	if w == nil {
		return
	}
	close(w.stop)
	w.wg.Wait()
	w.Manager.Stop()
}

// HostOn hosts MCP servers' tools on ex.
func HostOn(ex *executor.Executor) mcp.HostFunc {
	return func(ctx context.Context, server string, trust bool, tools []tool.Tool) (map[string]string, []string, error) {
		reply, warnings, err := hostReply(ctx, ex, executor.Scope{Source: events.SourceMCP, Server: server, Trust: trust}, tools)
		names := map[string]string{}
		if reply != nil {
			for _, o := range reply.Tools {
				if o.Name != "" {
					names[o.Requested] = o.Name
				}
			}
		}
		return names, warnings, err
	}
}

// host hosts tools on ex in scope, and says what became of them: the
// names they are listed under, and a warning for each that was refused
// or changed. With no registry up yet, the set waits for one: a warning,
// not an error.
func host(ctx context.Context, ex *executor.Executor, scope executor.Scope, tools []tool.Tool) (names, warnings []string, err error) {
	reply, warnings, err := hostReply(ctx, ex, scope, tools)
	if reply != nil {
		for _, o := range reply.Tools {
			if o.Name != "" {
				names = append(names, o.Name)
			}
		}
	}
	return names, warnings, err
}

// hostReply hosts tools on ex in scope, and returns the registry's reply
// with a warning for each tool that was refused or changed.
func hostReply(ctx context.Context, ex *executor.Executor, scope executor.Scope, tools []tool.Tool) (*events.RegisterReply, []string, error) {
	reply, err := ex.Host(ctx, scope, tools)
	if errors.Is(err, registry.ErrNoRegistry) {
		return nil, []string{"no registry is up yet; the tools are registered when one comes up"}, nil
	}
	var warnings []string
	if reply != nil {
		for _, o := range reply.Tools {
			if o.Error != "" {
				warnings = append(warnings, fmt.Sprintf("%s: %s", o.Requested, o.Error))
			} else if o.Warning != "" {
				warnings = append(warnings, fmt.Sprintf("%s: %s", o.Requested, o.Warning))
			}
		}
	}
	return reply, warnings, err
}
