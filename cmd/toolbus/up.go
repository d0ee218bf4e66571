package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/buscontext"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/console"
	"github.com/toolbus/toolbus/internal/datadir"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/portholder"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/settings"
)

// upFlags are the command line of `toolbus up`.
type upFlags struct {
	dataDir, listen, settingsPath, workspace, policyDir *string
	mcpListen, consoleAddr, identities, logLevel        *string
	metricsAddr                                         *string
	mcp                                                 *cli.MCPFlags
	hooks                                               *cli.HookFlags
	outputs                                             *cli.OutputFlags
	tools                                               *cli.ToolFlags
	audit                                               *busnode.AuditOptions
	webhook                                             *webhookFlags
	signin                                              *oidcFlags
	// context is the name of the context up writes (--context).
	context string
}

func newUpFlags(fs *pflag.FlagSet) *upFlags {
	f := &upFlags{
		dataDir:      fs.String("data", "", "directory for the bus's data, created if missing (default $XDG_STATE_HOME/toolbus, else ~/.local/state/toolbus)"),
		listen:       fs.String("listen", bus.DefaultListen, "address the bus listens on"),
		settingsPath: fs.String("settings", "", "Gemini CLI settings.json: tools.core, tools.exclude, tools.discoveryCommand, mcpServers (default: "+settings.ProjectGemini+" if present)"),
	}
	f.mcp = goFlags(fs, func(g *flag.FlagSet) *cli.MCPFlags { return cli.AddMCPFlags(g, f.settingsPath) })
	f.hooks = goFlags(fs, func(g *flag.FlagSet) *cli.HookFlags { return cli.AddHookFlags(g, f.settingsPath) })
	f.workspace = fs.String("workspace", ".", "directory the built-in tools are confined to")
	f.policyDir = fs.String("policy", "", "directory of .rego files (default: the built-in default policy)")
	f.outputs = goFlags(fs, cli.AddOutputFlags)
	f.tools = goFlags(fs, func(g *flag.FlagSet) *cli.ToolFlags { return cli.AddToolFlags(g, false) })
	f.mcpListen = fs.String("mcp-listen", "", "address the MCP endpoint (toolbus as an MCP server, streamable HTTP) listens on, or off (default "+defaultMCPListen+", else a free loopback port)")
	f.audit = goFlags(fs, busnode.AuditFlags)
	f.consoleAddr = fs.String("console", "", "address the web console listens on, or off (default "+console.DefaultListen+", else a free loopback port); token from env "+consoleTokenEnv)
	f.identities = fs.String("identities", "", "directory of the identities the parts connect with (made on the first start; toolbus init makes a fleet's), or off (default DATA/identities)")
	f.logLevel = goFlags(fs, cli.LogFlag)
	f.metricsAddr = goFlags(fs, cli.MetricsFlag)
	f.webhook = addWebhookFlags(fs)
	f.signin = addOIDCFlags(fs)
	return f
}

// readSettings reads the agents' settings files, the project's own in the
// working directory (.gemini/settings.json, .claude/settings.json,
// .mcp.json) unless others are named, so an existing project works
// unchanged.
func (f *upFlags) readSettings() (*settings.Files, registry.Settings, error) {
	*f.settingsPath, *f.hooks.ClaudeSettings, *f.mcp.MCPConfig = settings.ProjectPaths(".", *f.settingsPath, *f.hooks.ClaudeSettings, *f.mcp.MCPConfig)
	files, err := settings.ReadFiles(*f.settingsPath, *f.hooks.ClaudeSettings, *f.mcp.MCPConfig)
	if err != nil {
		return nil, registry.Settings{}, err
	}
	regSettings, err := registry.SettingsFrom(files.Gemini.Tools)
	if err != nil {
		return nil, registry.Settings{}, fmt.Errorf("settings %s: %w", *f.settingsPath, err)
	}
	return files, regSettings, nil
}

// idDir is the directory of the parts' identities, or "off".
func (f *upFlags) idDir() string {
	if *f.identities == "" {
		return filepath.Join(*f.dataDir, "identities")
	}
	return *f.identities
}

func newUpCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the bus, the registry, an executor, the console and the MCP endpoint in one process",
		Long: `Runs the whole system in one process on this host: the bus (NATS with
JetStream, on --listen), the registry, an executor with the built-in tools
confined to --workspace and the MCP servers of the project's settings, the
web console and the MCP endpoint. Other commands on this host reach it, as its
developer, through the context it writes.

It reads the project's agent settings in the working directory as they are,
when present: .gemini/settings.json (Gemini CLI: tools.core, tools.exclude,
tools.discoveryCommand, mcpServers, hooks), .claude/settings.json (Claude
Code hooks) and .mcp.json (Claude Code's MCP servers); --settings,
--claude-settings and --mcp-config name others.

It writes the context --context names (local by default) and selects it:
every later command on this host talks to this bus, wherever it listens
(toolbus context). Ctrl-C stops it.`,
		Example: `  # In a project: its tools, confined to it.
  toolbus up

  # Another workspace, policy and bus address.
  toolbus up --workspace ~/src/app --policy ./policy --listen 127.0.0.1:4223

  # Without the console and the MCP endpoint.
  toolbus up --console off --mcp-listen off

  # A signed notice to a webhook for each call that waits for a person.
  toolbus up --webhook https://hooks.example/toolbus --webhook-secret-file ~/.config/toolbus/webhook-secret`,
		Args: noArgs,
	}
	f := newUpFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f.context = upContextName
		if c := cmd.Flag("context"); c != nil && c.Changed {
			f.context = c.Value.String()
		}
		if err := buscontext.CheckName(f.context); err != nil {
			return usageError{fmt.Errorf("--context: %w", err)}
		}
		return runUp(f)
	}
	return cmd
}

// upContextName is the context `toolbus up` writes unless --context names
// another.
const upContextName = "local"

func runUp(f *upFlags) error {
	if err := f.webhook.check(); err != nil {
		return usageError{err}
	}
	if *f.webhook.url != "" && *f.consoleAddr == "off" {
		return usageError{fmt.Errorf("--webhook needs the console: its notices link to the request there, where a person approves it")}
	}
	if err := f.signin.check(); err != nil {
		return usageError{err}
	}
	if f.signin.cfg != nil && *f.consoleAddr == "off" {
		return usageError{fmt.Errorf("--oidc-issuer signs people in to the console, which --console off turns off")}
	}
	if *f.dataDir == "" {
		*f.dataDir = cli.DefaultDataDir()
	}
	log, err := cli.Logger(*f.logLevel)
	if err != nil {
		return usageError{err}
	}
	files, regSettings, err := f.readSettings()
	if err != nil {
		return err
	}
	// The data dir is this process's before anything in it is read or
	// written: another up on it would corrupt its store.
	lock, err := datadir.Acquire(*f.dataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	busCfg := busnode.Config{Listen: *f.listen, DataDir: *f.dataDir, DataDirLock: lock, Name: "toolbus-up", Logger: log, Identity: cli.Identity("bus")}
	if err := f.audit.Apply(&busCfg); err != nil {
		return usageError{err}
	}
	if f.idDir() != "off" {
		if err := upIdentities(f.idDir(), &busCfg); err != nil {
			return err
		}
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	u := &up{f: f, log: log}
	defer u.close()
	if err := u.start(ctx, busCfg, files, regSettings); err != nil {
		return err
	}
	if err := u.writeContext(); err != nil {
		return err
	}
	u.describe()
	fmt.Println("Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Println("toolbus: stopping")
	return nil
}

// up is everything `toolbus up` runs: the bus node, and each part on its
// own connection, as its own member of the fleet when identities are on.
// close stops them in the reverse order of their start.
type up struct {
	f     *upFlags
	log   *slog.Logger
	node  *busnode.Node
	parts []*bus.Bus // the parts' own connections
	stops []func()   // what close runs, last first
	reg   *registry.Service
	exec  *executornode.Node
	cons  *runningConsole
	mcpEP *mcpEndpoint
}

// start starts the bus node and the parts: registry, executor node,
// console (an approver while a page is open: then a call the policy asks
// about waits for a person instead of being denied at once) and MCP
// endpoint (where agents that speak MCP call the fleet's tools).
func (u *up) start(ctx context.Context, busCfg busnode.Config, files *settings.Files, regSettings registry.Settings) (err error) {
	f, log := u.f, u.log
	if u.node, err = busnode.Start(ctx, busCfg); err != nil {
		return portTaken(busCfg.Listen, err)
	}
	u.stops = append(u.stops, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		u.node.Close(ctx)
	})
	if id := f.idDir(); id != "off" {
		forget, err := cli.WriteDeveloperNote(u.node.URL(), identity.SeedFile(id, "developer"))
		if err != nil {
			return fmt.Errorf("note the developer's identity for this host's commands: %w", err)
		}
		u.stops = append(u.stops, forget)
	}
	m, stopMetrics, err := cli.StartMetrics(*f.metricsAddr, "up", u.node.Bus, log)
	if err != nil {
		return err
	}
	u.stops = append(u.stops, stopMetrics)
	regBus, err := u.as(ctx, "registry")
	if err != nil {
		return err
	}
	if u.reg, err = registry.Start(ctx, regBus.Conn(), regBus.JetStream(), registry.Config{
		Settings: regSettings, Identity: cli.Identity("registry"), Logger: log}); err != nil {
		return err
	}
	u.stops = append(u.stops, func() { u.reg.Stop() })
	exBus, err := u.as(ctx, "executor")
	if err != nil {
		return err
	}
	exID, err := cli.StoredExecutorIdentity(*f.dataDir)
	if err != nil {
		return err
	}
	exCfg := executor.Config{Identity: exID, Observer: m, Logger: log}
	if id := f.idDir(); id != "off" {
		// The developer, an admin, signs what it pushes: toolbus init
		// wrote its key into the trust list.
		if exCfg.PolicySigners, err = policy.LoadSigners(filepath.Join(id, auth.PolicySignersFile)); err != nil {
			return err
		}
	}
	f.outputs.Apply(&exCfg)
	// The console's address is known before the executor starts, which
	// tells a caller denied for want of an approver where to find one.
	var consLn net.Listener
	if *f.consoleAddr != "off" {
		if consLn, err = console.Listen(*f.consoleAddr, log); err != nil {
			return err
		}
		u.stops = append(u.stops, func() { consLn.Close() }) // the console's, once it started
		exCfg.ApproveHint = fmt.Sprintf("open the console at %s (with the token `toolbus up` printed) or run `toolbus confirm`", console.BaseURL(consLn.Addr()))
	}
	connect, err := f.tools.Connect()
	if err != nil {
		return err
	}
	if u.exec, err = executornode.Start(ctx, executornode.Config{Bus: exBus, Executor: exCfg, Workspace: *f.workspace,
		PolicyDir: *f.policyDir, Settings: files, Secrets: f.toolSecrets(), Connect: connect, AnyPort: f.tools.AnyPort(),
		Reserved: f.ownPorts(u.node.URL(), consLn)}); err != nil {
		return err
	}
	u.stops = append(u.stops, func() { u.exec.Close(context.Background()) })
	if u.exec.MCP != nil {
		m.WatchMCP(u.exec.MCP.Manager.Status)
	}
	u.exec.ReportReadiness(m)
	if consLn != nil {
		consBus, err := u.as(ctx, "console")
		if err != nil {
			return err
		}
		if u.cons, err = startConsole(ctx, consBus, consBus.Principal(), console.Config{Listener: consLn, Token: os.Getenv(consoleTokenEnv), OIDC: f.signin.cfg}, "", log); err != nil {
			return err
		}
		u.stops = append(u.stops, func() { u.cons.stop() })
		// The console's approver is followed read-only: the webhook
		// makes nobody present, and answers nothing.
		stopHook, err := f.webhook.start(u.cons.approver, u.cons.server.BaseURL(), log)
		if err != nil {
			return err
		}
		u.stops = append(u.stops, stopHook)
	}
	if *f.mcpListen != "off" {
		mcpBus, err := u.as(ctx, "facade")
		if err != nil {
			return err
		}
		fac, ep, err := upMCPEndpoint(ctx, mcpBus, *f.dataDir, *f.mcpListen, u.exec.Executor.Policy, log)
		if err != nil {
			return err
		}
		u.stops = append(u.stops, func() { fac.Close() }, func() { ep.stop() })
		u.mcpEP = ep
	}
	return nil
}

// as is the connection part name runs on: its own, as its own member,
// with its role's permissions, as in a fleet; without identities, the
// bus node's.
func (u *up) as(ctx context.Context, name string) (*bus.Bus, error) {
	if u.f.idDir() == "off" {
		return u.node.Bus, nil
	}
	// In-process, without TCP: a request-reply between two parts takes
	// about half as long (docs/performance.md).
	part, err := bus.Connect(ctx, bus.Config{URL: u.node.URL(), Local: u.node.Bus.Server(), Name: "toolbus-up " + name,
		NkeyFile: identity.SeedFile(u.f.idDir(), name), Logger: u.log})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	u.parts = append(u.parts, part)
	return part, nil
}

// close stops what start started, last first, and then closes the parts'
// connections.
func (u *up) close() {
	for i := len(u.stops) - 1; i >= 0; i-- {
		if i == 0 {
			// The parts' connections close before the bus node.
			for j := len(u.parts) - 1; j >= 0; j-- {
				cli.Close(u.parts[j])
			}
		}
		u.stops[i]()
	}
}

// writeContext writes the context of this up and selects it, so that the
// commands run on this host after it talk to its bus, with the
// developer's identity when identities are on.
func (u *up) writeContext() error {
	data, err := filepath.Abs(*u.f.dataDir)
	if err != nil {
		return err
	}
	c := buscontext.Context{Name: u.f.context, URL: u.node.URL(), Data: data, PID: os.Getpid()}
	if id := u.f.idDir(); id != "off" {
		if c.Identity, err = filepath.Abs(identity.SeedFile(id, "developer")); err != nil {
			return err
		}
	}
	if u.cons != nil {
		c.Console = u.cons.server.BaseURL()
	}
	if u.mcpEP != nil {
		c.MCP = u.mcpEP.url
	}
	s := contexts()
	if err := s.Save(c); err != nil {
		return fmt.Errorf("write the context %s: %w", c.Name, err)
	}
	if err := s.Use(c.Name); err != nil {
		return fmt.Errorf("select the context %s: %w", c.Name, err)
	}
	return nil
}

// portTaken is err, the bus node's failure to start on listen, with who
// holds the port and what to do when the port is taken.
func portTaken(listen string, err error) error {
	if !strings.Contains(err.Error(), "address already in use") {
		return err
	}
	host, portText, splitErr := net.SplitHostPort(listen)
	port, atoiErr := strconv.Atoi(portText)
	if splitErr != nil || atoiErr != nil {
		return err
	}
	holder := "another process"
	if h, ok := portholder.Find(port); ok {
		holder = h.String()
	}
	return fmt.Errorf("the bus cannot listen on %s: %s holds the port. Stop it, or run toolbus up --listen %s; the commands run after it find the bus there through the context it writes (toolbus context)",
		listen, holder, net.JoinHostPort(host, strconv.Itoa(port+1)))
}

// describe prints what runs and where.
func (u *up) describe() {
	f, exec := u.f, u.exec
	reg := u.reg.Registry().Catalog()
	fmt.Printf("toolbus is up\n  bus:       %s\n  data:      %s\n  executor:  %s\n  workspace: %s\n  policy:    %s\n  tools:     %d registered, %d active\n",
		u.node.URL(), *f.dataDir, exec.Executor.ID(), exec.Workspace.Root(), exec.Executor.Policy().Revision(), reg.Len(), len(reg.AllToolNames()))
	if id := f.idDir(); id != "off" {
		fmt.Printf("  identities: %s (commands on this host act as the developer, an admin; a client with no identity is the agent, as is TOOLBUS_IDENTITY=%s)\n",
			id, identity.SeedFile(id, "agent"))
	}
	if *f.settingsPath != "" {
		fmt.Printf("  settings:  %s\n", *f.settingsPath)
	}
	if *f.mcp.MCPConfig != "" {
		fmt.Printf("  mcp:       %s\n", *f.mcp.MCPConfig)
	}
	if h := exec.Executor.Hooks(); !h.Empty() {
		fmt.Printf("  hooks:     %d pre, %d post hook groups (from %s)\n", len(h.Pre), len(h.Post), strings.Join(hookFiles(f.hooks), ", "))
	}
	if exec.Discovery != nil {
		fmt.Printf("  discovery: %s\n", exec.Discovery.Describe())
	}
	if exec.MCP != nil {
		fmt.Printf("  servers:   %d MCP servers, connecting in the background (toolbus mcp status)\n", len(exec.MCP.Manager.Status()))
	}
	if u.cons != nil {
		fmt.Printf("  console:   %s\n", u.cons.server.URL())
		if f.signin.cfg != nil {
			fmt.Printf("  sign-in:   %s (people sign in with it; the token answers nothing)\n", f.signin.cfg.Issuer)
		}
	}
	if *f.webhook.url != "" {
		fmt.Printf("  webhook:   %s (a signed notice for each call that waits for a person)\n", *f.webhook.url)
	}
	if u.mcpEP != nil {
		fmt.Printf("  mcp serve: %s\n", u.mcpEP.describe())
	}
	if *f.metricsAddr != "" {
		fmt.Printf("  metrics:   http://%s/metrics\n", *f.metricsAddr)
	}
	fmt.Printf("  context:   %s, selected: the commands run on this host after this talk to this bus (toolbus context)\n", f.context)
}

// upMembers are the identities of `toolbus up`'s parts, and the ones a
// developer hands out: the agent's, to confine an agent to an agent's
// permissions.
var upMembers = []auth.Member{
	{Name: "bus", Role: auth.RoleBus}, {Name: "developer", Role: auth.RoleAdmin},
	{Name: "registry", Role: auth.RoleRegistry}, {Name: "executor", Role: auth.RoleExecutor},
	{Name: "console", Role: auth.RoleApprover}, {Name: "facade", Role: auth.RoleFacade},
	{Name: "agent", Role: auth.RoleAgent}, {Name: "auditor", Role: auth.RoleAuditor},
}

// upIdentities makes (or completes) the identities in dir and sets cfg to
// admit only them, a client with none taken as the agent: a shell line a
// model wrote connects from this host too. The developer's commands need
// no step of their own all the same (cli.WriteDeveloperNote), and the
// parts are confined to their roles as in a fleet.
func upIdentities(dir string, cfg *busnode.Config) error {
	if _, err := auth.Init(dir, upMembers); err != nil {
		return fmt.Errorf("identities in %s: %w", dir, err)
	}
	roster, err := auth.LoadRoster(dir)
	if err != nil {
		return fmt.Errorf("identities in %s: %w", dir, err)
	}
	for _, m := range roster.Members {
		if m.Name == "agent" {
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
