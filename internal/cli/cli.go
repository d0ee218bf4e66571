// Package cli holds what every toolbus command shares: the --nats flag, the
// logger, the process identity and the signal-bound context.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	osuser "os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/buscontext"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/metrics"
	"github.com/toolbus/toolbus/internal/telemetry/export"
)

// NATSFlag registers --nats on fs: the URL of the bus, defaulting to
// $TOOLBUS_NATS or the local `toolbus up`.
func NATSFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("TOOLBUS_NATS")
	if def == "" {
		def = bus.DefaultURL
	}
	return fs.String("nats", def, "NATS URL of the bus (env TOOLBUS_NATS)")
}

// LogFlag registers --log-level on fs.
func LogFlag(fs *flag.FlagSet) *string {
	return fs.String("log-level", "info", "log level: debug, info, warn or error")
}

// LogFormatEnv names the log format: text (the default) or json, one
// object a line, for a log collector.
const LogFormatEnv = "TOOLBUS_LOG_FORMAT"

// Logger is a logger on stderr at the named level, in the format
// $TOOLBUS_LOG_FORMAT names.
func Logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch f := os.Getenv(LogFormatEnv); f {
	case "", "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("%s=%q: want text or json", LogFormatEnv, f)
	}
}

// MetricsFlag registers --metrics on fs: where a daemon serves /metrics,
// /healthz and /readyz.
func MetricsFlag(fs *flag.FlagSet) *string {
	return fs.String("metrics", "", "address to serve /metrics (Prometheus), /healthz and /readyz on, e.g. 127.0.0.1:9464 (default: none)")
}

// StartMetrics serves the metrics of daemon, which runs over b, on addr
// (ServeMetrics, then WatchBus).
func StartMetrics(addr, daemon string, b *bus.Bus, log *slog.Logger) (m *metrics.Metrics, stop func(), err error) {
	m, stop, err = ServeMetrics(addr, daemon, log)
	if err == nil {
		WatchBus(m, b)
	}
	return m, stop, err
}

// ServeMetrics serves the metrics of daemon on addr; with addr empty it
// serves nothing but still returns metrics to report to. Until WatchBus,
// /readyz says the daemon is still connecting. Either way the daemon
// logs when it turns unready, and why, and ready again
// (metrics.WatchReadiness). stop stops serving and watching.
func ServeMetrics(addr, daemon string, log *slog.Logger) (m *metrics.Metrics, stop func(), err error) {
	m = metrics.New(daemon)
	if addr == "" {
		return m, m.WatchReadiness(log), nil
	}
	srv, err := m.Serve(addr, log)
	if err != nil {
		return nil, nil, err
	}
	stopWatching := m.WatchReadiness(log)
	return m, func() { stopWatching(); srv.Stop() }, nil
}

// Daemon is a daemon's metrics, served from its start, and its bus,
// connected once the bus answers (StartDaemon).
type Daemon struct {
	Metrics     *metrics.Metrics
	Bus         *bus.Bus
	stopMetrics func()
}

// StartDaemon serves the metrics of daemon on metricsAddr (ServeMetrics:
// /healthz answers and /readyz says it is connecting while it waits),
// waits for the bus at url (ConnectWaiting, as the connection
// "toolbus-"+daemon) and watches it (WatchBus). It fails with ErrStopped
// when ctx ends before the bus answered. Close stops both.
func StartDaemon(ctx context.Context, daemon, metricsAddr, url string, log *slog.Logger) (*Daemon, error) {
	m, stopMetrics, err := ServeMetrics(metricsAddr, daemon, log)
	if err != nil {
		return nil, err
	}
	b, err := ConnectWaiting(ctx, url, "toolbus-"+daemon, log)
	if err != nil {
		stopMetrics()
		return nil, err
	}
	WatchBus(m, b)
	return &Daemon{Metrics: m, Bus: b, stopMetrics: stopMetrics}, nil
}

// Close closes the daemon's bus connection, then stops its metrics.
func (d *Daemon) Close() {
	Close(d.Bus)
	d.stopMetrics()
}

// WatchBus makes m report b's connection, and /readyz check it and its
// JetStream.
func WatchBus(m *metrics.Metrics, b *bus.Bus) {
	m.WatchConn(b.Conn())
	m.Ready("jetstream", b.JetStreamReady)
}

// Identity is this process's identity in the given role: role@host.
func Identity(role string) events.Identity {
	host, _ := os.Hostname()
	user := os.Getenv("USER")
	return events.Identity{ID: role + "@" + host, Role: role, Host: host, User: user}
}

// ApproverIdentity is who a person approves as: id when given, else
// "approver:USER@HOST". The executor records it with every answer and the
// policy (data.toolbus.approver_allowed) judges it.
func ApproverIdentity(id string) events.Identity {
	host, _ := os.Hostname()
	user := os.Getenv("USER")
	if user == "" { // not set in every environment (a service, a container)
		if u, err := osuser.Current(); err == nil {
			user = u.Username
		}
	}
	if id == "" {
		id = "approver:" + user + "@" + host
	}
	return events.Identity{ID: id, Role: "approver", Host: host, User: user}
}

// TerminalSigner is the person a terminal approver (toolbus confirm)
// answers as: with an identity of its own (principal, as the bus proves
// it), the member, whose seed the person holds; else the OS user who runs
// it, a name nobody proves.
func TerminalSigner(principal string) *events.Signer {
	if principal != "" {
		return &events.Signer{Member: true}
	}
	return &events.Signer{Name: ApproverIdentity("").User}
}

// ConsoleSigner is the person a console that signs nobody in answers as:
// the OS user who runs it, who holds its token file (a single developer's
// toolbus up). Nobody proves it.
func ConsoleSigner() *events.Signer {
	return &events.Signer{Name: ApproverIdentity("").User}
}

// SignalContext is cancelled on SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Connect opens the bus at url for a short-lived command, with an error
// that says what to do when nothing is there.
//
// The connection's credentials come from the environment, as every
// command and daemon reads them: TOOLBUS_NATS_CREDS (a NATS credentials
// file), TOOLBUS_NATS_CA (the CA of the servers' certificates), and
// TOOLBUS_NATS_CERT and TOOLBUS_NATS_KEY (a client certificate), and
// TOOLBUS_IDENTITY (the seed file of a fleet member, `toolbus init`);
// else the identity of the selected context when it names url
// (internal/buscontext).
//
// With none of these, a command that connects to a `toolbus up` on this
// host acts as its developer, when it can read the seed up noted
// (developer.go); else it shows no identity, and up takes it for its
// agent.
func Connect(ctx context.Context, url, name string, log *slog.Logger) (*bus.Bus, error) {
	return ConnectAs(ctx, url, name, "", log)
}

// ConnectAs is Connect with the identity of seed, a seed file, in place
// of the one Connect finds; "" for that one.
func ConnectAs(ctx context.Context, url, name, seed string, log *slog.Logger) (*bus.Bus, error) {
	if seed == "" {
		seed = identityFor(url)
	}
	b, err := bus.Connect(ctx, bus.Config{URL: url, Name: name, Logger: log,
		CredsFile: os.Getenv("TOOLBUS_NATS_CREDS"), CAFile: os.Getenv("TOOLBUS_NATS_CA"),
		CertFile: os.Getenv("TOOLBUS_NATS_CERT"), KeyFile: os.Getenv("TOOLBUS_NATS_KEY"),
		NkeyFile: seed})
	if err != nil {
		hint := contextHint(url)
		if hint == "" && url == bus.DefaultURL {
			hint = " (is `toolbus up` running?)"
		}
		return nil, fmt.Errorf("cannot reach the bus at %s%s: %w", url, hint, unwrapConnect(err))
	}
	return b, nil
}

// ConnectWaiting is Connect for a daemon, which may start before its bus
// (a host's services in any order, containers, a bus restarted): while
// the bus is unreachable (bus.Unreachable) it logs that it waits, and
// tries again, less often as the wait grows, until the bus answers or ctx
// ends; then it fails with ErrStopped. Any other failure, such as
// credentials the bus refuses, ends it at once.
func ConnectWaiting(ctx context.Context, url, name string, log *slog.Logger) (*bus.Bus, error) {
	const (
		firstRetry = 250 * time.Millisecond
		maxRetry   = 5 * time.Second
		// A daemon that waits long says so again now and then, so that
		// its log shows it still waits and on what.
		remindEvery = time.Minute
	)
	retry := firstRetry
	var waitingSince, reminded time.Time
	for {
		b, err := Connect(ctx, url, name, log)
		switch {
		case err == nil:
			if !waitingSince.IsZero() {
				log.Info("the bus is reachable", "url", url, "waited", time.Since(waitingSince).Round(time.Second))
			}
			return b, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w before the bus at %s was reachable", ErrStopped, url)
		case !bus.Unreachable(err):
			return nil, err
		case waitingSince.IsZero():
			waitingSince, reminded = time.Now(), time.Now()
			log.Warn("waiting for the bus: trying again until it answers", "url", url, "err", err)
		case time.Since(reminded) >= remindEvery:
			reminded = time.Now()
			log.Warn("still waiting for the bus", "url", url, "for", time.Since(waitingSince).Round(time.Second), "err", err)
		}
		wait := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil, fmt.Errorf("%w before the bus at %s was reachable", ErrStopped, url)
		case <-wait.C:
		}
		retry = min(2*retry, maxRetry)
	}
}

// ErrStopped says a daemon was told to stop (its context ended) before it
// was running: a stop, not a failure.
var ErrStopped = errors.New("stopped")

// unwrapConnect says of err, a failure of bus.Connect, only its cause:
// the caller names the bus. What it wraps stays there (bus.Unreachable).
func unwrapConnect(err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.HasPrefix(msg, "connect to bus") {
		return causeError{msg: msg[i+2:], err: err}
	}
	return err
}

// causeError is an error shown by its cause's message alone.
type causeError struct {
	msg string
	err error
}

func (e causeError) Error() string { return e.msg }
func (e causeError) Unwrap() error { return e.err }

// IdentityEnv names the seed file a part connects with in a fleet with
// identities.
const IdentityEnv = "TOOLBUS_IDENTITY"

// identityFor is the seed file a command connects to url with: the
// environment's, else the developer's of a `toolbus up` on this host, else
// none.
func identityFor(url string) string {
	if seed := os.Getenv(IdentityEnv); seed != "" {
		return seed
	}
	if os.Getenv("TOOLBUS_NATS_CREDS") != "" {
		return ""
	}
	if c, err := buscontext.At(DefaultDataDir()).Current(); err == nil && c.URL == url && c.Identity != "" {
		return c.Identity
	}
	return developerSeed(url)
}

// SigningKey is the key of the identity a command connects to url with
// (identityFor), which signs what the command pushes; nil when it has
// none.
func SigningKey(url string) (nkeys.KeyPair, error) {
	seed := identityFor(url)
	if seed == "" {
		return nil, nil
	}
	return identity.KeyOf(seed)
}

// FacadeSeed is the seed `toolbus mcp serve` speaks as the facade with
// on the bus at url: the facade's seed beside the identity a command
// finds there (identityFor: the developer's of a `toolbus up` on this
// host), when this process may read it; "" otherwise, and when
// TOOLBUS_IDENTITY names one (that identity is used as it is). A process
// that cannot read the data dir, as no confined tool process can,
// speaks as what it may be, never as the facade.
func FacadeSeed(url string) string {
	if os.Getenv(IdentityEnv) != "" {
		return ""
	}
	id := identityFor(url)
	if id == "" {
		return ""
	}
	seed := identity.SeedFile(filepath.Dir(id), "facade")
	f, err := os.Open(seed)
	if err != nil {
		return ""
	}
	f.Close()
	return seed
}

// contextHint says why the bus at url, named by the selected context, may
// not answer: the `toolbus up` that wrote the context has stopped.
func contextHint(url string) string {
	c, err := buscontext.At(DefaultDataDir()).Current()
	if err != nil || c.URL != url || c.Running() {
		return ""
	}
	return fmt.Sprintf(" (the context %s names it, written by a `toolbus up`, pid %d, that has stopped: start it again, or choose another bus with `toolbus context use`)", c.Name, c.PID)
}

// Close closes b, giving it ten seconds to drain.
func Close(b *bus.Bus) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.Close(ctx)
}

// DefaultDataDir is where `toolbus up` keeps its data unless told otherwise:
// $XDG_STATE_HOME/toolbus, else ~/.local/state/toolbus.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "toolbus")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "toolbus")
	}
	return ".toolbus"
}

// UsageError is a mistake in a command line: Main exits 2 with it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Main runs a daemon's run with its arguments and exits as daemons do: 0
// when run returns nil, 2 for a UsageError, 1 for any other error, which
// it prints after name. run returns before Main exits, so its defers run.
func Main(name string, run func(args []string) error) {
	err := WithTraces(name, func() error { return run(os.Args[1:]) })
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, name+":", err)
	var usage UsageError
	if errors.As(err, &usage) {
		os.Exit(2)
	}
	os.Exit(1)
}

// WithTraces runs f with the process's tracer provider set up from the
// OTEL_* variables (export.Setup: off unless they ask for an exporter),
// as service name, and flushes its spans when f returns. A provider
// that cannot be made is said on stderr, and f runs without traces.
func WithTraces(name string, f func() error) error {
	shutdown, err := export.Setup(context.Background(), name)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+": traces off:", err)
		return f()
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			fmt.Fprintln(os.Stderr, name+": spans not flushed:", err)
		}
	}()
	return f()
}
