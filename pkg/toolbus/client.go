package toolbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/invoke"
)

// Identity is who a client calls as. The policy judges it, and the audit
// trail records it with every call.
type Identity struct {
	// ID is the principal, e.g. "agent:my-bot". Defaults to
	// "agent:toolbus-go@HOST".
	ID string
	// Agent, Session and User narrow the caller down inside a fleet.
	Agent   string
	Session string
	User    string
}

// Option configures Connect.
type Option func(*config)

type config struct {
	id       Identity
	name     string
	creds    string
	nkey     string
	natsOpts []nats.Option
	log      *slog.Logger
}

// WithIdentity sets who the client calls as.
func WithIdentity(id Identity) Option { return func(c *config) { c.id = id } }

// WithName sets the NATS connection name other NATS tools show.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithCredentials authenticates with a NATS credentials file (JWT and
// nkey seed).
func WithCredentials(file string) Option { return func(c *config) { c.creds = file } }

// WithIdentityFile connects with the seed file of a fleet member made by
// `toolbus init` (DIR/<name>.nk): the bus then vouches that the calls
// are that member's, and the policy sees the caller as proven. The
// caller's ID becomes the member's name (or stays "<name>/…" when it
// says so already).
func WithIdentityFile(seedFile string) Option { return func(c *config) { c.nkey = seedFile } }

// WithNATSOptions passes further options to nats.Connect (TLS, tokens,
// reconnect behaviour). They are applied after this package's own.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(c *config) { c.natsOpts = append(c.natsOpts, opts...) }
}

// WithLogger sets the logger for connection events and catalogue entries
// that do not decode. Defaults to discarding.
func WithLogger(log *slog.Logger) Option { return func(c *config) { c.log = log } }

// Client calls the tools of a toolbus fleet. It is safe for concurrent
// use. Close it to end its connection; calls in flight then end.
type Client struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
	id  events.Identity
	inv *invoke.Client

	// The catalogue replica, started on first need (Tools, Declarations,
	// name mapping) and stopped by Close.
	catMu   sync.Mutex
	replica *catalog.Replica
	closed  bool
}

// Connect connects to the bus at url (a NATS URL, comma-separated for a
// cluster). It does not wait for an executor; Ping does.
func Connect(ctx context.Context, url string, opts ...Option) (*Client, error) {
	cfg := config{name: "toolbus-go", log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.id.ID == "" {
		host, _ := os.Hostname()
		cfg.id.ID = "agent:toolbus-go@" + host
	}
	log := cfg.log
	nopts := []nats.Option{
		nats.Name(cfg.name),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("toolbus: bus disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("toolbus: bus reconnected", "url", nc.ConnectedUrl()) }),
	}
	if cfg.creds != "" {
		nopts = append(nopts, nats.UserCredentials(cfg.creds))
	}
	principal := ""
	if cfg.nkey != "" {
		name, as, err := identity.Connect(cfg.nkey)
		if err != nil {
			return nil, fmt.Errorf("toolbus: %w", err)
		}
		principal = name
		nopts = append(nopts, as...)
	}
	nopts = append(nopts, cfg.natsOpts...)
	if d, ok := ctx.Deadline(); ok {
		// nats.Connect takes no context; its dial timeout is the nearest
		// it has.
		nopts = append(nopts, nats.Timeout(max(time.Until(d), 0)))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("toolbus: connect to %s: %w", url, err)
	}
	if err := bus.CheckServer(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("toolbus: %w", err)
	}
	// A fleet's agent has an account of its own and reads the shared
	// state through the services account's JetStream; without JetStream
	// (yet), the catalogue calls say so when made.
	js, err := bus.JetStreamOf(ctx, nc)
	if err != nil {
		if js, err = jetstream.New(nc); err != nil {
			nc.Close()
			return nil, fmt.Errorf("toolbus: jetstream: %w", err)
		}
	}
	host, _ := os.Hostname()
	id := events.Identity{ID: cfg.id.ID, Role: "agent", Agent: cfg.id.Agent, Session: cfg.id.Session, User: cfg.id.User, Host: host}
	return &Client{nc: nc, js: js, log: log, id: id, inv: invoke.NewClient(nc, id, principal)}, nil
}

// Close stops the client: calls in flight end, the catalogue replica
// stops and the connection closes. It is safe to call more than once.
func (c *Client) Close() error {
	c.catMu.Lock()
	defer c.catMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	if c.replica != nil {
		c.replica.Close()
	}
	errs = append(errs, c.inv.Close())
	c.nc.Close()
	return errors.Join(errs...)
}

// Ping checks that an executor is running, failing at once with
// ErrNoExecutor when none is.
func (c *Client) Ping(ctx context.Context) error {
	err := c.inv.Ping(ctx)
	if errors.Is(err, invoke.ErrNoExecutor) {
		return ErrNoExecutor
	}
	return err
}
