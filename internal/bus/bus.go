// Package bus gives every toolbus part its connection to the bus, and the
// JetStream helpers the parts share: the audit stream, the fleet's
// buckets, and the Recorder that makes sure each record is stored. A part
// that only connects links no server: the embedded nats-server is
// internal/busnode's, which hands its in-process connection to Connect.
package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
)

// DefaultListen is where an embedded bus listens unless told otherwise: the
// standard NATS port, on loopback only.
const DefaultListen = "127.0.0.1:4222"

// DefaultURL is where parts look for a bus when given no --nats flag.
const DefaultURL = "nats://" + DefaultListen

// Config says which bus to connect to, as whom, and, for the part that
// makes the audit stream, how long the stream keeps events.
type Config struct {
	// URL of an existing NATS deployment (comma-separated for a cluster).
	// Ignored with Server.
	URL string
	// Server is the embedded server of this process (internal/busnode):
	// the connection reaches it in-process, the Bus owns it (Close shuts
	// it down), and the audit stream is made to this Config.
	Server Server
	// Clustered says Server is a node of a cluster: its JetStream is
	// waited for, as it answers only once a quorum of nodes is up.
	Clustered bool
	// Name is the connection name other NATS tools show for this part.
	Name string
	// Logger receives connection events. Defaults to slog.Default().
	Logger *slog.Logger
	// AuditMaxAge is how long the audit stream keeps events (the flags'
	// default is DefaultAuditMaxAge); 0 keeps them for good, until an
	// operator moves them out: the stream then fills, and the fleet
	// refuses calls once it is near AuditMaxBytes.
	AuditMaxAge time.Duration
	// AuditMaxBytes caps the audit stream's size; 0 means
	// DefaultAuditMaxBytes. Near it, the fleet refuses recorded calls;
	// nothing is evicted to make room.
	AuditMaxBytes int64
	// Replicas is how many copies the cluster keeps of the audit stream
	// and, through EnsureKeyValue and EnsureObjectStore, of every bucket
	// the parts create. 0 means 3 in a cluster, else 1.
	Replicas int
	// AuditAllowDelete lets clients delete and purge messages of the
	// audit stream. By default the stream refuses both (JetStream's
	// deny-delete and deny-purge), which cannot be undone for the stream:
	// only its age and size limits remove events. For tests of tamper
	// evidence, which must be able to tamper.
	AuditAllowDelete bool
	// CredsFile, CAFile, CertFile and KeyFile configure the connection to
	// an existing deployment: a NATS credentials file (user JWT and nkey
	// seed), the CA that signed the servers' certificates, and a client
	// certificate for TLS with client authentication.
	CredsFile, CAFile, CertFile, KeyFile string
	// NkeyFile is this part's identity in a fleet: the seed file of a
	// member made by `toolbus init` (DIR/<name>.nk). The connection
	// authenticates with it, takes its replies under the member's own
	// inbox prefix, and Principal is the member's name.
	NkeyFile string
	// Local is a server in this process, owned by another Bus, that the
	// connection reaches without TCP (toolbus up's parts on its node).
	// Unlike Server, it is not closed with the connection.
	Local Server
}

// Server is the embedded nats-server a Bus owns (*server.Server of
// nats-server): what Connect and Close need of it.
type Server interface {
	InProcessConn() (net.Conn, error)
	ClientURL() string
	Shutdown()
	WaitForShutdown()
}

// connectTimeout bounds the dial and handshake of a connection to the bus.
const connectTimeout = 10 * time.Second

// Bus is an open connection to the toolbus NATS, and the embedded server
// when it owns one. Close it to stop both.
type Bus struct {
	srv Server // nil when connected to an existing deployment
	nc  *nats.Conn
	js  jetstream.JetStream
	url string
	log *slog.Logger
	// principal is the member name of NkeyFile, "" without one.
	principal string
	// services says js is the services account's JetStream, seen from
	// a member's account of its own (JetStreamOf).
	services bool
}

// Connect connects to the bus cfg describes and ensures the audit stream
// (a member of a fleet leaves that to the bus and only waits for its
// JetStream). The returned Bus owns its connection, and cfg.Server when
// set, also on failure: Close it.
func Connect(ctx context.Context, cfg Config) (*Bus, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &Bus{url: cfg.URL, log: log, srv: cfg.Server}
	opts, err := b.options(cfg)
	if err != nil {
		b.shutdownServer()
		return nil, err
	}
	connectTo := b.url
	local := b.srv
	if local == nil {
		local = cfg.Local
	}
	if local != nil {
		b.url = local.ClientURL()
		// The process's own connection is in-process, where the server
		// takes plain NATS even when its port speaks only TLS.
		connectTo = "nats://" + strings.TrimPrefix(b.url, "tls://")
	}
	if b.nc, err = nats.Connect(connectTo, opts...); err != nil {
		b.shutdownServer()
		return nil, fmt.Errorf("connect to bus %s: %w", b.url, err)
	}
	if err := CheckServer(b.nc); err != nil {
		b.Close(ctx)
		return nil, err
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		b.Close(ctx)
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := b.awaitAudit(ctx, cfg); err != nil {
		b.Close(ctx)
		return nil, err
	}
	return b, nil
}

// Unreachable reports whether err, from Connect, says that nothing
// answered at the bus's address: nothing listening there yet, its name
// not resolving yet, or a dial or greeting that timed out. A daemon
// started before its bus tries again on such an error; a refusal of its
// credentials or a TLS mismatch is not one, and trying again would not
// change it.
func Unreachable(err error) bool {
	var dial *net.OpError
	var dns *net.DNSError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout):
		return true
	case errors.As(err, &dial) && dial.Op == "dial", errors.As(err, &dns):
		return true
	case errors.As(err, &timeout) && timeout.Timeout():
		return true
	}
	return false
}

// Server is the embedded server b owns, nil when it owns none: another
// part of the process may connect to it without TCP (Config.Local).
func (b *Bus) Server() Server { return b.srv }

// options are the NATS options of cfg's connection.
func (b *Bus) options(cfg Config) ([]nats.Option, error) {
	log := b.log
	opts := []nats.Option{
		nats.Name(cfg.Name),
		// A loaded server may take more than nats.go's 2 s to accept and
		// greet a connection (64 commands started at once can make it
		// so); nothing listening still fails at once.
		nats.Timeout(connectTimeout),
		nats.MaxReconnects(-1),
		// In a cluster, a part whose node goes moves to another: the
		// sooner, the fewer calls find no executor in between.
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("bus disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("bus reconnected", "url", nc.ConnectedUrl()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error("bus error", "subject", subject, "err", err)
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NkeyFile != "" {
		name, as, err := identity.Connect(cfg.NkeyFile)
		if err != nil {
			return nil, err
		}
		b.principal = name
		opts = append(opts, as...)
	}
	if cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.CAFile))
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		opts = append(opts, nats.ClientCert(cfg.CertFile, cfg.KeyFile))
	}
	switch {
	case b.srv != nil:
		// The embedding process talks to its own server without TCP.
		opts = append(opts, nats.InProcessServer(b.srv))
	case cfg.Local != nil:
		opts = append(opts, nats.InProcessServer(cfg.Local))
	}
	return opts, nil
}

// awaitAudit makes sure the audit stream is there. A node of a cluster,
// and a part connecting to one, waits for the cluster's JetStream: until
// a quorum of nodes is up, nothing can be stored. (A part cannot tell a
// cluster from a single server: it waits as long as ctx lets it.)
func (b *Bus) awaitAudit(ctx context.Context, cfg Config) error {
	if b.srv != nil {
		return untilJetStream(ctx, b.log, cfg.Clustered, func(ctx context.Context) error {
			return ensureAudit(ctx, b.js, cfg, true)
		})
	}
	return untilJetStream(ctx, b.log, true, func(ctx context.Context) error {
		js, services, err := jetStreamOf(ctx, b.nc)
		switch {
		case err != nil:
			return err
		case services:
			// A member in an account of its own (internal/auth), named
			// by its seed or taken for one by a bus that admits clients
			// with no identity as an agent: it reads the services
			// account's JetStream, ready once the catalogue is found,
			// or found missing.
			if _, err = js.Stream(ctx, "KV_"+events.CatalogBucket); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return err
			}
			if b.principal == "" {
				// Admitted with no identity: the bus says as whom. The
				// account of such a member is named after it.
				if b.principal, err = accountOf(ctx, b.nc); err != nil {
					return err
				}
			}
			b.js, b.services = js, true
			return nil
		case b.principal != "":
			// A member of a fleet leaves the audit stream to the bus:
			// its identity may not even look at it.
			return nil
		}
		return ensureAudit(ctx, b.js, cfg, false)
	})
}

// Conn is the bus connection. It stays owned by the Bus.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the JetStream context of Conn.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// JetStreamReady says whether the JetStream this part uses answers: its
// account's, or, for a member in an account of its own, the services
// account's, asked what such a member may ask of it (the catalogue's
// info, as Connect waits for it; the account's own info it may not).
func (b *Bus) JetStreamReady(ctx context.Context) error {
	if !b.services {
		_, err := b.js.AccountInfo(ctx)
		return err
	}
	_, err := b.js.Stream(ctx, "KV_"+events.CatalogBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		err = nil
	}
	return err
}

// URL is where other processes reach this bus.
func (b *Bus) URL() string { return b.url }

// Principal is the member name this part connects as in a fleet with
// identities, "" when it connects without one.
func (b *Bus) Principal() string { return b.principal }

// Embedded reports whether this Bus runs its own server.
func (b *Bus) Embedded() bool { return b.srv != nil }

// Close drains the connection, so handlers finish what they were given, and
// then stops the embedded server. It is safe to call more than once.
func (b *Bus) Close(ctx context.Context) error {
	var errs []error
	if b.nc != nil && !b.nc.IsClosed() {
		closed := make(chan struct{})
		b.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		if err := b.nc.Drain(); err != nil {
			b.nc.Close()
		} else {
			select {
			case <-closed:
			case <-ctx.Done():
				b.nc.Close()
				errs = append(errs, fmt.Errorf("bus drain: %w", ctx.Err()))
			}
		}
	}
	b.shutdownServer()
	return errors.Join(errs...)
}

func (b *Bus) shutdownServer() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}

// JetStreamOf is the JetStream API that nc reaches: its account's own,
// or, for a member in an account of its own (internal/auth), which has
// no JetStream, the services account's under events.ServicesAPIPrefix.
// It fails with what the account's JetStream said when neither holds.
func JetStreamOf(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, error) {
	js, _, err := jetStreamOf(ctx, nc)
	return js, err
}

// jetStreamOf is JetStreamOf, saying whether the API is the services
// account's seen from another.
func jetStreamOf(ctx context.Context, nc *nats.Conn) (js jetstream.JetStream, services bool, err error) {
	if js, err = jetstream.New(nc); err != nil {
		return nil, false, err
	}
	_, err = js.AccountInfo(ctx)
	switch {
	case err == nil:
		return js, false, nil
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		js, err = jetstream.NewWithAPIPrefix(nc, events.ServicesAPIPrefix)
		return js, err == nil, err
	}
	return nil, false, err
}

// accountOf asks the server which account nc's user is in
// ($SYS.REQ.USER.INFO, which answers a user about itself alone).
func accountOf(ctx context.Context, nc *nats.Conn) (string, error) {
	m, err := nc.RequestWithContext(ctx, "$SYS.REQ.USER.INFO", nil)
	if err != nil {
		return "", fmt.Errorf("ask the bus who this connection is: %w", err)
	}
	var resp struct {
		Data *struct {
			Account string `json:"account"`
		} `json:"data"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Data == nil || resp.Data.Account == "" {
		return "", fmt.Errorf("the bus did not say who this connection is: %s", m.Data)
	}
	return resp.Data.Account, nil
}

// MayPublish says whether the bus lets this connection publish subject,
// as its user's permissions say ($SYS.REQ.USER.INFO, which answers a user
// about itself alone): a user the server gives no publish permissions may
// publish anything. A bus that does not say is an error.
func (b *Bus) MayPublish(ctx context.Context, subject string) (bool, error) {
	m, err := b.nc.RequestWithContext(ctx, "$SYS.REQ.USER.INFO", nil)
	if err != nil {
		return false, fmt.Errorf("ask the bus what this connection may publish: %w", err)
	}
	var resp struct {
		Data *struct {
			Permissions *struct {
				Publish *struct {
					Allow []string `json:"allow"`
					Deny  []string `json:"deny"`
				} `json:"publish"`
			} `json:"permissions"`
		} `json:"data"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Data == nil {
		return false, fmt.Errorf("the bus did not say what this connection may publish: %s", m.Data)
	}
	p := resp.Data.Permissions
	if p == nil || p.Publish == nil {
		return true, nil
	}
	for _, d := range p.Publish.Deny {
		if subjectMatches(subject, d) {
			return false, nil
		}
	}
	if len(p.Publish.Allow) == 0 {
		return true, nil
	}
	for _, a := range p.Publish.Allow {
		if subjectMatches(subject, a) {
			return true, nil
		}
	}
	return false, nil
}

// subjectMatches says whether the literal subject is one filter names
// (its tokens, * for any one, > for one or more at the end).
func subjectMatches(subject, filter string) bool {
	st, ft := strings.Split(subject, "."), strings.Split(filter, ".")
	for i, f := range ft {
		switch {
		case f == ">":
			return i < len(st)
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(st) == len(ft)
}
