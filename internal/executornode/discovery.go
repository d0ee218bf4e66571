package executornode

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/discovery"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/settings"
	"github.com/toolbus/toolbus/internal/tool"
)

// Discovery is an executor's discovery command (tools.discoveryCommand of
// its settings.json), and the watch on the file.
type Discovery struct {
	Source *discovery.Source
	path   string
	prot   *protection
	log    *slog.Logger
	stop   chan struct{}
	wg     sync.WaitGroup
}

// StartDiscovery runs the discovery command of the Gemini CLI settings
// file f, when it names one, in workspace, and hosts the tools on ex;
// builtins are the tools ex hosts itself, whose names no discovered tool
// may take; starter starts (and confines) the commands. It follows the file: a changed command is run as the file is
// saved, a removed one takes its tools with it, and a file that no longer
// reads keeps the tools as they were, with an error in the log. Settings
// that do not validate (an unparsable command, one command without the
// other) are an error; a discovery that fails is not (it is in the log and
// the status). It returns nil when f is no file.
func startDiscovery(ctx context.Context, b *bus.Bus, ex *executor.Executor, id events.Identity, f *settings.File, workspace string,
	builtins []tool.Tool, starter *proctree.Starter, prot *protection, log *slog.Logger) (*Discovery, error) {
	if f.Path == "" {
		return nil, nil
	}
	ds, err := discoverySettings(f)
	if err != nil {
		return nil, err
	}
	reserved := make(map[string]bool)
	for _, t := range builtins {
		spec := t.Spec()
		reserved[spec.Name] = true
		for _, a := range spec.Aliases {
			reserved[a] = true
		}
	}
	src, err := discovery.Start(ctx, discovery.Options{Settings: ds, Workspace: workspace, Identity: id,
		Conn: b.Conn(), JS: b.JetStream(), Host: HostDiscoveredOn(ex), Reserved: func(name string) bool { return reserved[name] }, Starter: starter, Logger: log})
	if err != nil {
		return nil, err
	}
	d := &Discovery{Source: src, path: f.Path, prot: prot, log: log, stop: make(chan struct{})}
	d.wg.Add(1)
	go d.follow()
	return d, nil
}

// follow applies the file's discovery settings when it changes.
func (d *Discovery) follow() {
	defer d.wg.Done()
	last := stamps([]string{d.path})
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		now := stamps([]string{d.path})
		if now == last {
			continue
		}
		last = now
		f, err := settings.Read(d.path, settings.GeminiSettings)
		var ds discovery.Settings
		if err == nil {
			ds, err = discoverySettings(f)
		}
		if err != nil {
			d.log.Error("discovery settings not applied; the discovered tools stay as they were", "err", err)
			continue
		}
		d.prot.setDiscovery(f.Discovery, f.Path)
		ctx, cancel := context.WithTimeout(context.Background(), discovery.DiscoveryTimeout+time.Minute)
		if err := d.Source.Apply(ctx, ds); err != nil {
			d.log.Error("discovery after a settings change failed", "err", err)
		}
		cancel()
	}
}

// discoverySettings are the discovery settings of f; an error names f.
func discoverySettings(f *settings.File) (discovery.Settings, error) {
	ds, err := discovery.SettingsFrom(f.Discovery)
	if err != nil {
		return discovery.Settings{}, fmt.Errorf("settings %s: %w", f.Path, err)
	}
	return ds, nil
}

// Stop stops following the file and the discovery. Stop the executor
// first: its calls of discovered tools run their command through it.
func (d *Discovery) Stop() {
	if d == nil {
		return
	}
	close(d.stop)
	d.wg.Wait()
	d.Source.Stop()
}

// Describe says in a line what the discovery found, for `toolbus up`.
func (d *Discovery) Describe() string {
	st := d.Source.Status()
	switch {
	case st.State == events.DiscoveryOK:
		return fmt.Sprintf("%d tools discovered by `%s` (toolbus tools discover)", st.Tools, st.DiscoveryCommand)
	case st.State == events.DiscoveryFailed:
		return "discovery failed: " + st.Error
	}
	return "no discovery command"
}

// HostDiscoveredOn hosts discovered tools on ex, as its discovered set.
func HostDiscoveredOn(ex *executor.Executor) discovery.HostFunc {
	return func(ctx context.Context, tools []tool.Tool) (names, warnings []string, err error) {
		return host(ctx, ex, executor.Scope{Source: events.SourceDiscovered}, tools)
	}
}
