// Package executornode assembles an executor node: an executor hosting
// the built-in tools over a workspace under a policy, with the tool
// sources and hooks of the agents' settings files (MCP servers, the
// discovery command). cmd/executor, `toolbus up` and the tests all start
// one through Start.
package executornode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/metrics"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/sandbox"
	"github.com/toolbus/toolbus/internal/settings"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// DefaultStopGrace is how long Close lets running calls finish, when its
// context sets no deadline, before it cancels them.
const DefaultStopGrace = 10 * time.Second

// Config is one executor node.
type Config struct {
	// Bus is the node's connection; it stays the caller's to close.
	Bus *bus.Bus
	// Executor is the executor's own configuration: its identity,
	// deadlines, output bounds, observer and logger. The node fills in
	// what it assembles when it is unset: Tools (the built-ins over
	// Workspace), Workspace, Policy (compiled from PolicyDir), PolicyDir,
	// Hooks (from Settings) and IdentitiesEnforced (when Bus connects as
	// a member of a fleet). Starter is always the node's own.
	Executor executor.Config
	// Workspace is the directory the built-in tools are confined to.
	Workspace string
	// PolicyDir is the directory of .rego files to enforce and follow;
	// empty for the built-in policy.
	PolicyDir string
	// Settings are the agents' settings files: their MCP servers, their
	// discovery command, their hooks and toolbus's composite tools. Nil
	// for none.
	Settings *settings.Files
	// Secrets are the files and directories the tool processes (shell
	// lines, background commands, discovered tools) may not read, list or
	// write: the bus's data dir, the identity seeds, the credentials
	// (cli.ToolSecrets gives a command's). They run confined by Landlock
	// (internal/sandbox), reading everything else and writing only the
	// workspace, the temp dirs and Writable, as far as the kernel can;
	// Start logs how far.
	Secrets []string
	// Writable are directories the tool processes may write besides the
	// workspace and the temp dirs: a shared build cache, say.
	Writable []string
	// Connect are the TCP ports the tool processes may connect to, on
	// any host; nil means DefaultConnect and the ports of the proxies
	// the executor's environment names (ProxyPorts). Landlock grants
	// ports one by one (ABI 4 and later), so every other port, toolbus's
	// own among them, is refused.
	Connect []uint16
	// AnyPort leaves the tool processes' TCP connect unconfined
	// (--tool-ports any): Connect and Reserved are then moot.
	AnyPort bool
	// Reserved are this host's toolbus TCP ports (bus, cluster,
	// monitoring, console, MCP endpoint, metrics), which the tool
	// processes may never connect to, even when Connect lists one. The
	// ports of the servers the node's bus connection knows are added.
	Reserved []uint16
	// Configure, when set, adjusts the executor's configuration once the
	// node has assembled it, before the executor starts: tests give it
	// another policy, a deadline or more tools.
	Configure func(*executor.Config)
}

// withDefaults is cfg with its settings present and the executor's
// identity taken from the bus's principal when it names none.
func (cfg Config) withDefaults() Config {
	if cfg.Settings == nil {
		cfg.Settings = &settings.Files{Gemini: &settings.File{}, Claude: &settings.File{}, MCPConfig: &settings.File{}}
	}
	if cfg.Executor.Identity.ID == "" && cfg.Bus != nil && cfg.Bus.Principal() != "" {
		cfg.Executor.Identity.ID = cfg.Bus.Principal()
	}
	if cfg.Bus != nil && cfg.Bus.Principal() != "" {
		cfg.Executor.IdentitiesEnforced = true
	}
	if cfg.Executor.PolicyDir == "" {
		cfg.Executor.PolicyDir = cfg.PolicyDir
	}
	return cfg
}

// Validate reports what is missing in cfg.
func (cfg Config) Validate() error {
	switch {
	case cfg.Bus == nil:
		return errors.New("executor node: no bus connection given")
	case cfg.Workspace == "" && cfg.Executor.Tools == nil:
		return errors.New("executor node: no workspace given")
	case cfg.Executor.Identity.ID == "":
		return errors.New("executor node: no identity given")
	}
	return nil
}

// Node is a running executor node. Close it.
type Node struct {
	// Executor runs the calls.
	Executor *executor.Executor
	// Workspace is the built-in tools' workspace; nil when Config gave
	// the tools.
	Workspace *builtin.Workspace
	// MCP is the node's MCP servers, nil without any.
	MCP *MCP
	// Discovery is the node's discovery command, nil without one.
	Discovery *Discovery
	// Sandbox confines the node's tool processes.
	Sandbox *sandbox.Sandbox
	// Starter starts every process of the node (shell lines, background
	// commands, hooks, discovery and call commands, stdio MCP servers),
	// each confined by Sandbox: the one place a process is started.
	Starter *proctree.Starter
	shells  *builtin.Shells

	closeOnce sync.Once
	closeErr  error
}

// Start assembles and starts the node cfg describes. On failure,
// whatever it started is stopped again, in one place.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{}
	defer func() {
		if err != nil {
			n.Close(context.Background())
		}
	}()
	ex := cfg.Executor
	if ex.Logger == nil {
		ex.Logger = slog.Default()
	}
	// Every line of the node says which executor it is: a fleet's, and
	// up's, logs hold other parts' lines too.
	ex.Logger = ex.Logger.With("executor", ex.Identity.ID)
	if ex.Tools == nil {
		if n.Workspace, err = builtin.NewWorkspace(cfg.Workspace); err != nil {
			return nil, err
		}
		ex.Workspace = n.Workspace.Root()
	}
	if n.Sandbox, err = newSandbox(cfg, ex.Workspace, ex.Logger); err != nil {
		return nil, err
	}
	n.Starter = proctree.NewStarter(n.Sandbox)
	ex.Starter = n.Starter
	if n.Workspace != nil {
		n.shells = builtin.NewShells(n.Workspace, n.Starter)
		ex.Tools = builtin.Tools(n.Workspace, n.shells)
	}
	if ex.Policy == nil {
		if ex.Policy, err = compilePolicy(ctx, cfg.PolicyDir); err != nil {
			return nil, err
		}
	}
	if err := applyHooks(&ex, cfg.Settings, ex.Logger); err != nil {
		return nil, err
	}
	// The code the settings run keeps its owner's rights: the policy is
	// told which files that is.
	prot := newProtection(ex.Workspace, ex.Logger)
	prot.setHooks(ex.Hooks)
	prot.setDiscovery(cfg.Settings.Gemini.Discovery, cfg.Settings.Gemini.Path)
	prot.setMCP(mcpConfig(mcpFiles(cfg.Settings)))
	ex.Protected = prot.Set()
	if cfg.Configure != nil {
		cfg.Configure(&ex)
	}
	if n.Executor, err = executor.Start(ctx, cfg.Bus.Conn(), cfg.Bus.JetStream(), ex); err != nil {
		return nil, err
	}
	prot.follow(n.Executor.SetProtected)
	if err := hostComposites(ctx, n.Executor, cfg.Settings, ex.Tools, ex.Logger); err != nil {
		return nil, err
	}
	if n.MCP, err = startMCP(ctx, cfg.Bus, n.Executor, ex.Identity, cfg.Settings, n.Starter, prot, ex.Logger); err != nil {
		return nil, err
	}
	// The tools of the settings' discovery command run in this
	// executor's workspace, so it hosts them.
	if n.Discovery, err = startDiscovery(ctx, cfg.Bus, n.Executor, ex.Identity, cfg.Settings.Gemini, ex.Workspace, ex.Tools, n.Starter, prot, ex.Logger); err != nil {
		return nil, err
	}
	return n, nil
}

// DefaultConnect are the TCP ports tool processes may connect to when
// the configuration names none: what coding tools reach out to (ssh and
// git over ssh 22, DNS over TCP 53, HTTP 80, HTTPS 443, git 9418). A
// service of the host on another port (a dev server, a database) needs
// granting (--tool-ports); toolbus's own ports never can be.
var DefaultConnect = []uint16{22, 53, 80, 443, 9418}

// ProxyPorts are the ports of the proxies environ names (HTTP_PROXY,
// HTTPS_PROXY, ALL_PROXY, in either case): a tool that honours them
// connects to the proxy, not to 443.
func ProxyPorts(environ []string) []uint16 {
	var out []uint16
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY":
		default:
			continue
		}
		if !strings.Contains(value, "://") {
			value = "http://" + value
		}
		u, err := url.Parse(value)
		if err != nil || u.Host == "" {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"https": "443", "socks5": "1080", "socks5h": "1080", "socks4": "1080"}[u.Scheme]
			if port == "" {
				port = "80"
			}
		}
		if p, ok := PortOf(":" + port); ok {
			out = append(out, p)
		}
	}
	return out
}

// PortOf is the TCP port of addr (host:port, or a URL's host), when it
// names one.
func PortOf(addr string) (uint16, bool) {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return 0, false
	}
	return uint16(p), true
}

// newSandbox is the confinement of the node's tool processes, which it
// logs: what they may write and not read, the ports they may connect to,
// and what the kernel enforces of it.
func newSandbox(cfg Config, workspace string, log *slog.Logger) (*sandbox.Sandbox, error) {
	var writable []string
	if workspace != "" {
		writable = append(writable, workspace)
	}
	connect := cfg.Connect
	if connect == nil {
		connect = append(slices.Clone(DefaultConnect), ProxyPorts(os.Environ())...)
	}
	reserved := slices.Clone(cfg.Reserved)
	if cfg.Bus != nil && cfg.Bus.Conn() != nil {
		// Every server of the fleet this node knows: its own bus first.
		for _, u := range append([]string{cfg.Bus.Conn().ConnectedUrl()}, cfg.Bus.Conn().Servers()...) {
			if p, ok := PortOf(u); ok {
				reserved = append(reserved, p)
			}
		}
	}
	slices.Sort(reserved)
	reserved = slices.Compact(reserved)
	p := sandbox.Policy{Writable: append(writable, cfg.Writable...), Hidden: cfg.Secrets, Connect: connect, Reserved: reserved, AnyPort: cfg.AnyPort}
	sb, err := sandbox.New(p)
	if err != nil {
		return nil, fmt.Errorf("executor node: tool processes: %w", err)
	}
	cov := sb.Covered()
	level := slog.LevelInfo
	if !cov.Complete() {
		level = slog.LevelWarn // best effort: the tools run, confined only as far as the kernel can
	}
	network := "tcp connect to ports " + portList(p.Ports()) + " only"
	switch {
	case cfg.AnyPort:
		network = "not confined (--tool-ports any): toolbus's own ports are reachable"
	case !cov.Network:
		network = "not confined (needs Landlock ABI 4)"
	}
	scopes := "signals and abstract sockets scoped"
	if !cov.Scopes {
		scopes = "not scoped (needs Landlock ABI 6)"
	}
	attrs := []any{"landlock", sandbox.Describe(), "writable", p.Writable, "unreadable", cfg.Secrets,
		"network", network, "reserved", portList(reserved), "ipc", scopes}
	if missing := cov.Missing(); len(missing) > 0 {
		attrs = append(attrs, "not confined", strings.Join(missing, ", "))
	}
	log.Log(context.Background(), level, "tool processes confined", attrs...)
	return sb, nil
}

// portList is ports as "22,53,80", or "none".
func portList(ports []uint16) string {
	if len(ports) == 0 {
		return "none"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

// compilePolicy compiles the policy of dir, or the built-in policy.
func compilePolicy(ctx context.Context, dir string) (*policy.Policy, error) {
	files, err := policy.DirFiles(dir, policy.Files(defaultpolicy.Default()))
	if err != nil {
		return nil, err
	}
	return policy.Compile(ctx, files)
}

// Readiness is where a node's readiness checks go: a daemon's metrics
// (metrics.Metrics), whose /readyz runs them.
type Readiness interface {
	Ready(name string, check func(context.Context) error)
}

// TrailGauges is what takes the audit trail's gauges, when a Readiness
// does too (metrics.Metrics).
type TrailGauges interface {
	WatchTrail(fill func() float64, refusals func() uint64)
}

var _ TrailGauges = (*metrics.Metrics)(nil)

// ReportReadiness adds the node's readiness checks to r: its catalogue
// replica in step with the catalogue bucket, its policy the last one
// offered, the audit trail not near its cap (the executor refuses calls
// meanwhile), and its MCP servers up (each not down past its retries).
// An r that is also TrailGauges gets the trail's fill and refusals.
func (n *Node) ReportReadiness(r Readiness) {
	r.Ready("catalogue", func(context.Context) error { return n.Executor.CatalogHealth() })
	r.Ready("policy", func(context.Context) error { return n.Executor.PolicyHealth() })
	r.Ready("audit trail", func(context.Context) error { return n.Executor.TrailHealth() })
	if g, ok := r.(TrailGauges); ok {
		g.WatchTrail(n.Executor.TrailFill, n.Executor.TrailRefusals)
	}
	if n.MCP != nil {
		r.Ready("mcp", func(context.Context) error { return n.MCP.Manager.Health() })
	}
}

// Close lets running calls finish until ctx ends (DefaultStopGrace when it
// sets no deadline), then cancels them; it then stops the MCP servers and
// the discovery, which the calls may use, and the background shells. It
// is safe to call more than once.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.close(ctx) })
	return n.closeErr
}

func (n *Node) close(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStopGrace)
		defer cancel()
	}
	var errs []error
	if n.Executor != nil {
		if err := n.Executor.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("executor: %w", err))
		}
	}
	n.MCP.Stop()       // after the calls, which may use them
	n.Discovery.Stop() // after the calls, which run its commands
	if n.shells != nil {
		n.shells.Close()
	}
	if n.Starter != nil {
		n.Starter.Close() // after every part that starts processes stopped
	}
	if n.Sandbox != nil {
		n.Sandbox.Close()
	}
	if n.Workspace != nil {
		n.Workspace.Close()
	}
	return errors.Join(errs...)
}
