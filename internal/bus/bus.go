// Package bus gives every toolbus part its NATS connection: it starts an
// embedded nats-server with JetStream, or connects to an existing NATS
// deployment, and makes sure the audit stream exists. cmd/bus, `toolbus up`
// and the tests all go through Open.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/events"
)

// DefaultListen is where an embedded bus listens unless told otherwise: the
// standard NATS port, on loopback only.
const DefaultListen = "127.0.0.1:4222"

// DefaultURL is where parts look for a bus when given no --nats flag.
const DefaultURL = "nats://" + DefaultListen

// Config says which bus to use. With URL empty, Open embeds a server.
type Config struct {
	// URL of an existing NATS deployment (comma-separated for a cluster).
	// Empty means: run an embedded server.
	URL string
	// Listen is host:port for the embedded server; port 0 picks a free one.
	// Defaults to DefaultListen.
	Listen string
	// DataDir holds the embedded server's JetStream files. Required when
	// embedding; created if missing.
	DataDir string
	// Name is the connection name other NATS tools show for this part.
	Name string
	// Logger receives the embedded server's log and connection events.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// AuditMaxAge bounds how long the audit stream keeps events; 0 keeps
	// them until AuditMaxBytes is reached.
	AuditMaxAge time.Duration
	// AuditMaxBytes bounds the audit stream's size; 0 means 1 GiB.
	AuditMaxBytes int64
	// StoreKey, when set, encrypts the embedded server's JetStream files
	// at rest (the audit stream and every bucket) with JetStream's own
	// encryption (ChaCha20-Poly1305, the key derived from this one). The
	// same key must be given at every start: a store written with another
	// key, or with none, cannot be read and the bus does not start.
	StoreKey string
	// Cluster, when its Name is set, makes the embedded server a node of
	// a NATS cluster with clustered JetStream.
	Cluster Cluster
	// Replicas is how many copies the cluster keeps of the audit stream
	// and, through EnsureKeyValue and EnsureObjectStore, of every bucket
	// the parts create. 0 means 3 in a cluster, else 1.
	Replicas int
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
	// TLSCertFile and TLSKeyFile, for an embedded server, make its client
	// port speak TLS only, with this certificate; with TLSClientCAFile,
	// clients must show a certificate that CA signed. Parts reach it with
	// CAFile (and CertFile, KeyFile).
	TLSCertFile, TLSKeyFile, TLSClientCAFile string
	// AuthConfig, for an embedded server, is the authorization config
	// of a fleet's identities (DIR/auth.conf of `toolbus init`): the
	// server admits only its members, each with its role's permissions.
	AuthConfig string
	// AnonymousKey, for an embedded server with AuthConfig, is the public
	// key of the member a client connecting with no identity is taken
	// as (`toolbus up`: the developer, on loopback); "" refuses such a
	// client.
	AnonymousKey string
	// AuditAllowDelete lets clients delete and purge messages of the
	// audit stream. By default the stream refuses both (JetStream's
	// deny-delete and deny-purge), which cannot be undone for the stream:
	// only its age and size limits remove events. For tests of tamper
	// evidence, which must be able to tamper.
	AuditAllowDelete bool
}

// Cluster makes the embedded server a node of a NATS cluster.
type Cluster struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Listen is host:port for the routes of the other nodes.
	Listen string
	// Routes are the other nodes' route URLs (nats-route://host:port);
	// a node may list itself.
	Routes []string
	// ServerName names this node, unique in the cluster; defaults to
	// the cluster name and Listen's port.
	ServerName string
	// Secret, when set, is what the nodes' routes authenticate with
	// (auth.RouteSecret): a node that does not show it cannot join.
	Secret string
	// TLSCertFile and TLSKeyFile, when set, make the routes speak TLS
	// only, this node showing that certificate (for both ends of a
	// route: server and client use), and TLSCAFile the CA whose
	// certificates the other nodes must show.
	TLSCertFile, TLSKeyFile, TLSCAFile string
}

// connectTimeout bounds the dial and handshake of a connection to the bus.
const connectTimeout = 10 * time.Second

// Bus is an open connection to the toolbus NATS, and the embedded server
// when it runs one. Close it to stop both.
type Bus struct {
	srv *server.Server // nil when connected to an existing deployment
	// opts are srv's options, and authConfig the file its members come
	// from (ReloadIdentities).
	opts       *server.Options
	authConfig string
	reloadMu   sync.Mutex
	nc         *nats.Conn
	js         jetstream.JetStream
	url        string
	log        *slog.Logger
	// principal is the member name of NkeyFile, "" without one.
	principal string
}

// Open starts or connects to the bus described by cfg and ensures the audit
// stream. The returned Bus owns its connection (and server); Close it.
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &Bus{url: cfg.URL, log: log}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		// A loaded server may take more than nats.go's 2 s to accept and
		// greet a connection (a full run failed one of 64 commands
		// started at once so); nothing listening still fails at once.
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
		name, as, err := auth.Connect(cfg.NkeyFile)
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
	if cfg.URL == "" && cfg.AuthConfig != "" && cfg.NkeyFile == "" {
		return nil, errors.New("embedded bus: with identities, the bus connects as one of them too: give its seed file (DIR/bus.nk)")
	}
	if cfg.URL == "" {
		srv, srvOpts, err := startServer(cfg, log)
		if err != nil {
			return nil, err
		}
		b.srv, b.opts, b.authConfig = srv, srvOpts, cfg.AuthConfig
		b.url = srv.ClientURL()
		// The embedding process talks to its own server without TCP.
		opts = append(opts, nats.InProcessServer(srv))
	}
	connectTo := b.url
	if b.srv != nil {
		// The process's own connection is in-process, where the server
		// takes plain NATS even when its port speaks only TLS.
		connectTo = "nats://" + strings.TrimPrefix(b.url, "tls://")
	}
	nc, err := nats.Connect(connectTo, opts...)
	if err != nil {
		b.shutdownServer()
		return nil, fmt.Errorf("connect to bus %s: %w", b.url, err)
	}
	b.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		b.Close(ctx)
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b.js = js
	// A node of a cluster leaves its streams to the cluster's meta layer,
	// which may not have a leader yet at this point (every node restarted
	// at once); only a lone server's store is checked here.
	if b.srv != nil && cfg.Cluster.Name == "" {
		if err := checkLoaded(ctx, js, cfg.DataDir); err != nil {
			b.Close(ctx)
			return nil, err
		}
	}
	// A node of a cluster, and a part connecting to one, waits for the
	// cluster's JetStream: until a quorum of nodes is up, nothing can be
	// stored. (A part cannot tell a cluster from a single server: it
	// waits as long as ctx lets it.)
	if b.principal != "" && b.srv == nil {
		// A member of a fleet leaves the audit stream to the bus: its
		// identity may not even look at it. It waits for the cluster's
		// JetStream all the same, asking what every identity may ask.
		err := untilJetStream(ctx, log, true, func(ctx context.Context) error {
			_, err := js.AccountInfo(ctx)
			return err
		})
		if err != nil {
			b.Close(ctx)
			return nil, err
		}
		return b, nil
	}
	err = untilJetStream(ctx, log, cfg.Cluster.Name != "" || b.srv == nil, func(ctx context.Context) error { return ensureAudit(ctx, js, cfg, b.srv != nil) })
	if err != nil {
		b.Close(ctx)
		return nil, err
	}
	return b, nil
}

// checkLoaded fails when the embedded server did not load a stream its
// store holds (written with another store key, or damaged): creating the
// audit stream or a bucket anew would then write over it.
func checkLoaded(ctx context.Context, js jetstream.JetStream, dir string) error {
	dirs, err := filepath.Glob(filepath.Join(dir, "jetstream", "$G", "streams", "*"))
	if err != nil {
		return err
	}
	for _, d := range dirs {
		name := filepath.Base(d)
		if _, err := js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("embedded bus: the store in %s holds stream %s, which the server could not read (was it written with another store key?); nothing was changed", dir, name)
		} else if err != nil {
			return fmt.Errorf("embedded bus: stream %s: %w", name, err)
		}
	}
	return nil
}

// storeIsEncrypted reports whether a JetStream store in dir was written
// encrypted: its streams keep their keys in meta.key files.
func storeIsEncrypted(dir string) (bool, error) {
	keys, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "*", "meta.key"))
	return len(keys) > 0, err
}

func startServer(cfg Config, log *slog.Logger) (*server.Server, *server.Options, error) {
	if cfg.DataDir == "" {
		return nil, nil, errors.New("embedded bus: no data directory given")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("embedded bus: %w", err)
	}
	listen := cfg.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("embedded bus: listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, nil, fmt.Errorf("embedded bus: listen address %q: bad port", listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "toolbus",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		NoSigs:     true, // the owning process handles signals
	}
	if c := cfg.Cluster; c.Name != "" {
		if err := clusterOptions(opts, c); err != nil {
			return nil, nil, fmt.Errorf("embedded bus: %w", err)
		}
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile,
			CaFile: cfg.TLSClientCAFile, Verify: cfg.TLSClientCAFile != ""})
		if err != nil {
			return nil, nil, fmt.Errorf("embedded bus: TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, cfg.TLSClientCAFile != ""
		opts.TLSTimeout = 2
	} else if cfg.TLSClientCAFile != "" {
		return nil, nil, errors.New("embedded bus: a client CA needs the server's own certificate and key too")
	}
	if cfg.AuthConfig != "" {
		users, err := auth.ServerUsers(cfg.AuthConfig)
		if err != nil {
			return nil, nil, fmt.Errorf("embedded bus: %w", err)
		}
		opts.Nkeys = users
		opts.NoAuthUser = cfg.AnonymousKey
	}
	if cfg.StoreKey != "" {
		opts.JetStreamKey, opts.JetStreamCipher = cfg.StoreKey, server.ChaCha
	} else if encrypted, err := storeIsEncrypted(cfg.DataDir); err != nil {
		return nil, nil, fmt.Errorf("embedded bus: %w", err)
	} else if encrypted {
		// Started without its key, the server would not read the store
		// and the parts would make empty streams and buckets over it.
		return nil, nil, fmt.Errorf("embedded bus: the store in %s is encrypted: give its key", cfg.DataDir)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("embedded bus: %w", err)
	}
	logger := serverLog{log: log.With("part", "nats-server"), fatal: make(chan string, 1)}
	srv.SetLoggerV2(logger, false, false, false)
	go srv.Start()
	// Poll readiness in short steps so that a fatal start error, such as a
	// taken port, is reported at once instead of after the timeout.
	deadline := time.Now().Add(10 * time.Second)
	for !srv.ReadyForConnections(20 * time.Millisecond) {
		fail := ""
		select {
		case fail = <-logger.fatal:
		default:
			if time.Now().After(deadline) {
				fail = "not ready to accept connections after 10s"
			}
		}
		if fail != "" {
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, nil, fmt.Errorf("embedded bus on %s: %s", listen, fail)
		}
	}
	return srv, opts, nil
}

// ensureAudit creates the stream that keeps every event, or, for the bus's
// owner (the process that runs the server), updates it to cfg's retention.
// A part that only connects leaves an existing stream as it is: its own
// defaults must not undo the owner's --audit-max-age; it only turns on
// the acknowledgements of a stream made before records were acknowledged
// (Recorder), which would otherwise never get one. No request is sent on
// a captured subject (events.Request), so acknowledgements go only to
// recorders.
func ensureAudit(ctx context.Context, js jetstream.JetStream, cfg Config, owner bool) error {
	copies := replicas(cfg)
	if !owner {
		// A part that makes the stream for a deployment with no bus
		// owner (or before the owner got to it) keeps as many copies as
		// the owner would: 3 when the connection knows of 3 servers.
		if cfg.Replicas == 0 && len(js.Conn().Servers()) >= 3 {
			copies = 3
		}
		if s, err := js.Stream(ctx, events.AuditStream); err == nil {
			cfg := s.CachedInfo().Config
			if !cfg.NoAck {
				return nil
			}
			cfg.NoAck = false
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return fmt.Errorf("audit stream %s does not acknowledge records, and could not be changed to: %w", events.AuditStream, err)
			}
			return nil
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
		}
	}
	maxBytes := cfg.AuditMaxBytes
	if maxBytes == 0 {
		maxBytes = 1 << 30
	}
	deny := !cfg.AuditAllowDelete
	if s, err := js.Stream(ctx, events.AuditStream); err == nil && s.CachedInfo().Config.DenyDelete {
		deny = true // once refused, for good: JetStream cannot take it back
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        events.AuditStream,
		Description: "toolbus audit trail: every event under tool.>",
		Subjects:    []string{events.SubjectAll},
		Storage:     jetstream.FileStorage,
		MaxAge:      cfg.AuditMaxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardOld,
		DenyDelete:  deny,
		DenyPurge:   deny,
		Replicas:    copies,
	})
	if err != nil {
		return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	return nil
}

// Conn is the bus connection. It stays owned by the Bus.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the JetStream context of Conn.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// URL is where other processes reach this bus.
func (b *Bus) URL() string { return b.url }

// Principal is the member name this part connects as in a fleet with
// identities, "" when it connects without one.
func (b *Bus) Principal() string { return b.principal }

// Embedded reports whether this Bus runs its own server.
func (b *Bus) Embedded() bool { return b.srv != nil }

// ReloadIdentities reads the members of an embedded server's
// authorization config again and puts them in force without a restart:
// a member added since (toolbus init --add) may connect, and every
// connection is held to its member's permissions as they are now. It
// returns how many members the config names. A config that does not
// read leaves the members in force as they were.
func (b *Bus) ReloadIdentities() (int, error) {
	if b.srv == nil || b.authConfig == "" {
		return 0, errors.New("bus: not an embedded server with identities")
	}
	users, err := auth.ServerUsers(b.authConfig)
	if err != nil {
		return 0, fmt.Errorf("bus: reload identities: %w", err)
	}
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	next := *b.opts
	next.Nkeys = users
	if err := b.srv.ReloadOptions(&next); err != nil {
		return 0, fmt.Errorf("bus: reload identities: %w", err)
	}
	b.opts = &next
	return len(users), nil
}

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

// serverLog sends nats-server's log to slog, and its fatal errors to the
// goroutine waiting for the server to start.
type serverLog struct {
	log   *slog.Logger
	fatal chan string
}

func (l serverLog) Noticef(f string, v ...any) { l.log.Debug(fmt.Sprintf(f, v...)) }
func (l serverLog) Warnf(f string, v ...any)   { l.log.Warn(fmt.Sprintf(f, v...)) }
func (l serverLog) Fatalf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	select {
	case l.fatal <- msg:
	default:
		l.log.Error(msg)
	}
}
func (l serverLog) Errorf(f string, v ...any) { l.log.Error(fmt.Sprintf(f, v...)) }
func (l serverLog) Debugf(f string, v ...any) { l.log.Debug(fmt.Sprintf(f, v...)) }
func (l serverLog) Tracef(f string, v ...any) {}
