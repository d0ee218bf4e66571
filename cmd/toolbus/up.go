package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	defaultpolicy "github.com/toolbus/toolbus/policy"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/console"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/metrics"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/registry"
)

// projectSettings is where Gemini CLI keeps a project's settings; `toolbus
// up` reads it when present, so an existing project works unchanged.
var projectSettings = filepath.Join(".gemini", "settings.json")

// claudeSettings is where Claude Code keeps a project's settings; `toolbus
// up` runs its hooks when present.
var claudeSettings = filepath.Join(".claude", "settings.json")

func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dataDir := fs.String("data", cli.DefaultDataDir(), "directory for the bus's data (created if missing)")
	listen := fs.String("listen", bus.DefaultListen, "address the bus listens on")
	settingsPath := fs.String("settings", "", "Gemini CLI settings.json: tools.core, tools.exclude, tools.discoveryCommand, mcpServers (default: "+projectSettings+" if present)")
	mcpFlags := cli.AddMCPFlags(fs, settingsPath)
	hookFlags := cli.AddHookFlags(fs, settingsPath)
	workspace := fs.String("workspace", ".", "directory the built-in tools are confined to")
	policyDir := fs.String("policy", "", "directory of .rego files (default: the built-in default policy)")
	outputs := cli.AddOutputFlags(fs)
	mcpListen := fs.String("mcp-listen", "", "address the MCP endpoint (toolbus as an MCP server, streamable HTTP) listens on, or off (default "+defaultMCPListen+", else a free loopback port)")
	auditOpts := cli.AuditFlags(fs)
	consoleAddr := fs.String("console", "", "address the web console listens on, or off (default "+console.DefaultListen+", else a free loopback port); token from env "+consoleTokenEnv)
	logLevel := cli.LogFlag(fs)
	metricsAddr := cli.MetricsFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := cli.Logger(*logLevel)
	if err != nil {
		return usageError{err}
	}
	if *settingsPath == "" {
		if _, err := os.Stat(projectSettings); err == nil {
			*settingsPath = projectSettings
		}
	}
	if *hookFlags.ClaudeSettings == "" {
		if _, err := os.Stat(claudeSettings); err == nil {
			*hookFlags.ClaudeSettings = claudeSettings
		}
	}
	settings, err := registry.LoadSettings(*settingsPath)
	if err != nil {
		return err
	}

	ctx, stop := cli.SignalContext()
	defer stop()

	busCfg := bus.Config{Listen: *listen, DataDir: *dataDir, Name: "toolbus-up", Logger: log}
	if err := auditOpts.Apply(&busCfg); err != nil {
		return usageError{err}
	}
	b, err := bus.Open(ctx, busCfg)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	stopCheckpoints, err := auditOpts.StartCheckpoints(b, *dataDir, log)
	if err != nil {
		return err
	}
	defer stopCheckpoints()
	m, stopMetrics, err := cli.StartMetrics(*metricsAddr, "up", b, log)
	if err != nil {
		return err
	}
	defer stopMetrics()

	reg, err := registry.Start(ctx, b.Conn(), b.JetStream(), registry.Config{
		Settings: settings, Identity: cli.Identity("registry"), Logger: log})
	if err != nil {
		return err
	}
	defer reg.Stop()

	exec, err := startExecutor(ctx, b, *workspace, *policyDir, outputs, mcpFlags, hookFlags, m, log)
	if err != nil {
		return err
	}
	defer exec.stop()

	// The console is an approver: with it, a call the policy asks about
	// waits for a person instead of being denied at once.
	var cons *runningConsole
	if *consoleAddr != "off" {
		if cons, err = startConsole(ctx, b, *consoleAddr, os.Getenv(consoleTokenEnv), "", log); err != nil {
			return err
		}
		defer cons.stop()
	}

	// Agents that speak MCP call the fleet's tools here.
	var mcpEP *mcpEndpoint
	if *mcpListen != "off" {
		fac, ep, err := upMCPEndpoint(ctx, b, *mcpListen, exec.executor.Policy, log)
		if err != nil {
			return err
		}
		defer fac.Close()
		defer ep.stop()
		mcpEP = ep
	}

	fmt.Printf("toolbus is up\n  bus:       %s\n  data:      %s\n  workspace: %s\n  policy:    %s\n  tools:     %d registered, %d active\n",
		b.URL(), *dataDir, exec.workspace.Root(), exec.executor.Policy().Revision(),
		reg.Registry().Catalog().Len(), len(reg.Registry().Catalog().AllToolNames()))
	if *settingsPath != "" {
		fmt.Printf("  settings:  %s\n", *settingsPath)
	}
	if *mcpFlags.MCPConfig != "" {
		fmt.Printf("  mcp:       %s\n", *mcpFlags.MCPConfig)
	}
	if h := exec.hooks; !h.Empty() {
		fmt.Printf("  hooks:     %d pre, %d post hook groups (from %s)\n", len(h.Pre), len(h.Post), strings.Join(hookFiles(hookFlags), ", "))
	}
	if exec.discovery != nil {
		fmt.Printf("  discovery: %s\n", exec.discovery.Describe())
	}
	if exec.mcp != nil {
		fmt.Printf("  servers:   %d MCP servers, connecting in the background (toolbus mcp status)\n", len(exec.mcp.Manager.Status()))
	}
	if cons != nil {
		fmt.Printf("  console:   %s\n", cons.server.URL())
	}
	if mcpEP != nil {
		fmt.Printf("  mcp serve: %s\n", mcpEP.describe())
	}
	if *metricsAddr != "" {
		fmt.Printf("  metrics:   http://%s/metrics\n", *metricsAddr)
	}
	fmt.Println("Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Println("toolbus: stopping")
	return nil
}

// runningExecutor is an executor with the built-in tools and what it owns.
type runningExecutor struct {
	executor  *executor.Executor
	workspace *builtin.Workspace
	shells    *builtin.Shells
	mcp       *cli.MCP       // nil without MCP servers
	hooks     *hooks.Set     // nil without hooks
	discovery *cli.Discovery // nil without a settings file
}

// startExecutor runs an executor hosting the built-in tools over workspace,
// enforcing the policy of policyDir, or the default policy, keeping output
// within outputs.
func startExecutor(ctx context.Context, b *bus.Bus, workspace, policyDir string, outputs *cli.OutputFlags, mcpFlags *cli.MCPFlags, hookFlags *cli.HookFlags, m *metrics.Metrics, log *slog.Logger) (*runningExecutor, error) {
	files, err := policy.DirFiles(policyDir, policy.Files(defaultpolicy.Default()))
	if err != nil {
		return nil, err
	}
	pol, err := policy.Compile(ctx, files)
	if err != nil {
		return nil, err
	}
	ws, err := builtin.NewWorkspace(workspace)
	if err != nil {
		return nil, err
	}
	shells := builtin.NewShells(ws)
	cfg := executor.Config{
		Identity: cli.Identity("executor"), Tools: builtin.Tools(ws, shells), Policy: pol, PolicyDir: policyDir,
		Workspace: ws.Root(), Observer: m, Logger: log}
	outputs.Apply(&cfg)
	err = hookFlags.Apply(&cfg, log)
	var ex *executor.Executor
	if err == nil {
		ex, err = executor.Start(ctx, b.Conn(), b.JetStream(), cfg)
	}
	if err != nil {
		shells.Close()
		ws.Close()
		return nil, err
	}
	r := &runningExecutor{executor: ex, workspace: ws, shells: shells, hooks: cfg.Hooks}
	if r.mcp, err = cli.StartMCP(ctx, b, ex, cfg.Identity, mcpFlags, log); err != nil {
		r.stop()
		return nil, err
	}
	if r.mcp != nil {
		m.WatchMCP(r.mcp.Manager.Status)
	}
	// The tools of the settings' discovery command run in this
	// executor's workspace, so it hosts them.
	if r.discovery, err = cli.StartDiscovery(ctx, b, ex, cfg.Identity, *mcpFlags.Settings, ws.Root(), cfg.Tools, log); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// hookFiles are the settings files hooks were read from.
func hookFiles(f *cli.HookFlags) []string {
	var out []string
	for _, p := range []*string{f.Settings, f.ClaudeSettings} {
		if p != nil && *p != "" {
			out = append(out, *p)
		}
	}
	return out
}

// stop lets running calls finish for a few seconds, then cancels them and
// kills the background shells.
func (r *runningExecutor) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.executor.Stop(ctx)
	r.mcp.Stop()
	r.discovery.Stop() // after the calls, which run its commands
	r.shells.Close()
	r.workspace.Close()
}
