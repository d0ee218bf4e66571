package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/console"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/settings"
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
	auditOpts := busnode.AuditFlags(fs)
	consoleAddr := fs.String("console", "", "address the web console listens on, or off (default "+console.DefaultListen+", else a free loopback port); token from env "+consoleTokenEnv)
	identities := fs.String("identities", "", "directory of the identities the parts connect with (made on the first start; `toolbus init` makes a fleet's), or off (default DATA/identities)")
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
	settingsFiles, err := settings.ReadFiles(*settingsPath, *hookFlags.ClaudeSettings, *mcpFlags.MCPConfig)
	if err != nil {
		return err
	}
	regSettings, err := registry.SettingsFrom(settingsFiles.Gemini.Tools)
	if err != nil {
		return fmt.Errorf("settings %s: %w", *settingsPath, err)
	}

	ctx, stop := cli.SignalContext()
	defer stop()
	var parts []*bus.Bus // the parts' own connections, closed last

	busCfg := busnode.Config{Listen: *listen, DataDir: *dataDir, Name: "toolbus-up", Logger: log, Identity: cli.Identity("bus")}
	if err := auditOpts.Apply(&busCfg); err != nil {
		return usageError{err}
	}
	idDir := *identities
	if idDir == "" {
		idDir = filepath.Join(*dataDir, "identities")
	}
	if idDir != "off" {
		if err := upIdentities(idDir, &busCfg); err != nil {
			return err
		}
	}
	node, err := busnode.Start(ctx, busCfg)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		node.Close(ctx)
	}()
	b := node.Bus
	// Each part connects as its own member, with its role's permissions,
	// as in a fleet; without identities they share the bus's connection.
	as := func(name string) (*bus.Bus, error) {
		if idDir == "off" {
			return b, nil
		}
		part, err := bus.Connect(ctx, bus.Config{URL: b.URL(), Name: "toolbus-up " + name, NkeyFile: identity.SeedFile(idDir, name), Logger: log})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		parts = append(parts, part)
		return part, nil
	}
	defer func() {
		for i := len(parts) - 1; i >= 0; i-- {
			cli.Close(parts[i])
		}
	}()
	m, stopMetrics, err := cli.StartMetrics(*metricsAddr, "up", b, log)
	if err != nil {
		return err
	}
	defer stopMetrics()

	regBus, err := as("registry")
	if err != nil {
		return err
	}
	reg, err := registry.Start(ctx, regBus.Conn(), regBus.JetStream(), registry.Config{
		Settings: regSettings, Identity: cli.Identity("registry"), Logger: log})
	if err != nil {
		return err
	}
	defer reg.Stop()

	exBus, err := as("executor")
	if err != nil {
		return err
	}
	exCfg := executor.Config{Identity: cli.Identity("executor"), Observer: m, Logger: log}
	outputs.Apply(&exCfg)
	exec, err := executornode.Start(ctx, executornode.Config{Bus: exBus, Executor: exCfg, Workspace: *workspace,
		PolicyDir: *policyDir, Settings: settingsFiles})
	if err != nil {
		return err
	}
	defer exec.Close(context.Background())
	if exec.MCP != nil {
		m.WatchMCP(exec.MCP.Manager.Status)
	}

	// The console is an approver: with it, a call the policy asks about
	// waits for a person instead of being denied at once.
	var cons *runningConsole
	if *consoleAddr != "off" {
		consBus, err := as("console")
		if err != nil {
			return err
		}
		if cons, err = startConsole(ctx, consBus, *consoleAddr, os.Getenv(consoleTokenEnv), "", log); err != nil {
			return err
		}
		defer cons.stop()
	}

	// Agents that speak MCP call the fleet's tools here.
	var mcpEP *mcpEndpoint
	if *mcpListen != "off" {
		mcpBus, err := as("mcp")
		if err != nil {
			return err
		}
		fac, ep, err := upMCPEndpoint(ctx, mcpBus, *mcpListen, exec.Executor.Policy, log)
		if err != nil {
			return err
		}
		defer fac.Close()
		defer ep.stop()
		mcpEP = ep
	}

	fmt.Printf("toolbus is up\n  bus:       %s\n  data:      %s\n  workspace: %s\n  policy:    %s\n  tools:     %d registered, %d active\n",
		b.URL(), *dataDir, exec.Workspace.Root(), exec.Executor.Policy().Revision(),
		reg.Registry().Catalog().Len(), len(reg.Registry().Catalog().AllToolNames()))
	if idDir != "off" {
		fmt.Printf("  identities: %s (a client with none is the developer, an admin; an agent to confine: TOOLBUS_IDENTITY=%s)\n",
			idDir, identity.SeedFile(idDir, "agent"))
	}
	if *settingsPath != "" {
		fmt.Printf("  settings:  %s\n", *settingsPath)
	}
	if *mcpFlags.MCPConfig != "" {
		fmt.Printf("  mcp:       %s\n", *mcpFlags.MCPConfig)
	}
	if h := exec.Executor.Hooks(); !h.Empty() {
		fmt.Printf("  hooks:     %d pre, %d post hook groups (from %s)\n", len(h.Pre), len(h.Post), strings.Join(hookFiles(hookFlags), ", "))
	}
	if exec.Discovery != nil {
		fmt.Printf("  discovery: %s\n", exec.Discovery.Describe())
	}
	if exec.MCP != nil {
		fmt.Printf("  servers:   %d MCP servers, connecting in the background (toolbus mcp status)\n", len(exec.MCP.Manager.Status()))
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

// upMembers are the identities of `toolbus up`'s parts, and the ones a
// developer hands out: the agent's, to confine an agent to an agent's
// permissions.
var upMembers = []auth.Member{
	{Name: "bus", Role: auth.RoleBus}, {Name: "developer", Role: auth.RoleAdmin},
	{Name: "registry", Role: auth.RoleRegistry}, {Name: "executor", Role: auth.RoleExecutor},
	{Name: "console", Role: auth.RoleApprover}, {Name: "mcp", Role: auth.RoleAgent},
	{Name: "agent", Role: auth.RoleAgent}, {Name: "auditor", Role: auth.RoleAuditor},
}

// upIdentities makes (or completes) the identities in dir and sets cfg to
// admit only them, a client with none taken as the developer: on
// loopback, one developer needs no step of their own, and the parts are
// confined to their roles as in a fleet.
func upIdentities(dir string, cfg *busnode.Config) error {
	if _, err := auth.Init(dir, upMembers); err != nil {
		return fmt.Errorf("identities in %s: %w", dir, err)
	}
	roster, err := auth.LoadRoster(dir)
	if err != nil {
		return fmt.Errorf("identities in %s: %w", dir, err)
	}
	for _, m := range roster.Members {
		if m.Name == "developer" {
			cfg.AnonymousKey = m.PublicKey
		}
	}
	cfg.AuthConfig, cfg.NkeyFile = filepath.Join(dir, auth.ServerConfigFile), identity.SeedFile(dir, "bus")
	return nil
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
