// Package busnode runs the bus: an embedded nats-server with JetStream, on
// its own or as a node of a cluster, and the node's own connection to it
// (a bus.Bus that owns the server). cmd/bus, `toolbus up` and the tests
// all start it through Start; parts that only connect use bus.Connect and
// link no server.
package busnode

import (
	"context"
	"crypto/ed25519"
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

	"github.com/toolbus/toolbus/internal/audit/checkpoint"
	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/datadir"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
)

// Config describes the embedded server and the node's own connection.
type Config struct {
	// Listen is host:port for the embedded server; port 0 picks a free one.
	// Defaults to bus.DefaultListen.
	Listen string
	// DataDir holds the embedded server's JetStream files. Required;
	// created if missing. Start takes its lock (internal/datadir) before
	// it reads or writes anything there, and fails at once when another
	// process holds it; the node holds it until Close.
	DataDir string
	// DataDirLock is DataDir's lock when the caller took it already,
	// having things of its own to keep there before the node starts
	// (toolbus up: the identities). The caller keeps it, and releases it
	// after Close.
	DataDirLock *datadir.Lock
	// Name is the connection name other NATS tools show for this part.
	Name string
	// Logger receives the embedded server's log and connection events.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// AuditMaxAge is how long the audit stream keeps events; 0 keeps
	// them for good (bus.Config.AuditMaxAge).
	AuditMaxAge time.Duration
	// AuditMaxBytes caps the audit stream's size; 0 means
	// bus.DefaultAuditMaxBytes. Near it the fleet refuses recorded
	// calls; nothing is evicted.
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
	// CheckpointEvery is how often the node signs a checkpoint of the
	// audit stream (internal/audit/checkpoint) with the key it keeps in
	// DataDir, made on first use; 0 never does. Only the bus's owner
	// checkpoints: a node of a cluster is one, and so is each node.
	CheckpointEvery time.Duration
	// Identity is who signs the checkpoints; its ID defaults to
	// bus@HOST.
	Identity events.Identity
}

// withDefaults is cfg with every unset setting at its default.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Listen == "" {
		cfg.Listen = bus.DefaultListen
	}
	if cfg.Identity.ID == "" {
		host, _ := os.Hostname()
		cfg.Identity = events.Identity{ID: "bus@" + host, Role: "bus", Host: host, User: os.Getenv("USER")}
	}
	return cfg
}

// Validate reports what is missing or contradictory in cfg.
func (cfg Config) Validate() error {
	switch {
	case cfg.DataDir == "":
		return errors.New("embedded bus: no data directory given")
	case cfg.DataDirLock != nil && !cfg.DataDirLock.Holds(cfg.DataDir):
		return fmt.Errorf("embedded bus: the lock given is not held on %s", cfg.DataDir)
	case cfg.AuthConfig != "" && cfg.NkeyFile == "":
		return errors.New("embedded bus: with identities, the bus connects as one of them too: give its seed file (DIR/bus.nk)")
	case cfg.TLSClientCAFile != "" && (cfg.TLSCertFile == "" || cfg.TLSKeyFile == ""):
		return errors.New("embedded bus: a client CA needs the server's own certificate and key too")
	case cfg.AuditMaxAge < 0 || cfg.AuditMaxBytes < 0 || cfg.CheckpointEvery < 0:
		return errors.New("embedded bus: the audit stream's limits and the checkpoint interval cannot be negative")
	}
	return nil
}

// Node is a running bus: the embedded server and the node's own
// connection to it, which owns the server. Close it to stop both.
type Node struct {
	*bus.Bus
	srv *server.Server
	// opts are srv's options, and authConfig the file its members come
	// from (ReloadIdentities).
	opts        *server.Options
	authConfig  string
	reloadMu    sync.Mutex
	checkpoints *checkpoint.Checkpointer // nil when the node makes none
}

// Start starts the embedded server cfg describes, connects to it
// in-process, ensures the audit stream and starts its checkpoints. On
// failure nothing it started is left running.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var lock *datadir.Lock
	if cfg.DataDirLock == nil {
		if lock, err = datadir.Acquire(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("embedded bus: %w", err)
		}
		defer func() {
			if err != nil {
				lock.Close()
			}
		}()
	}
	var key ed25519.PrivateKey
	if cfg.CheckpointEvery > 0 {
		if key, err = checkpoint.LoadOrCreateKey(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	srv, opts, err := startServer(cfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	// A node of a cluster leaves its streams to the cluster's meta layer,
	// which may not have a leader yet at this point (every node restarted
	// at once); only a lone server's store is checked, before anything
	// could write over what it failed to load.
	if cfg.Cluster.Name == "" {
		if err := checkStore(ctx, srv, cfg); err != nil {
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, err
		}
	}
	var owned bus.Server = srv
	if lock != nil {
		owned = lockedServer{Server: srv, lock: lock}
	}
	b, err := bus.Connect(ctx, bus.Config{Server: owned, Clustered: cfg.Cluster.Name != "", Name: cfg.Name, Logger: cfg.Logger,
		AuditMaxAge: cfg.AuditMaxAge, AuditMaxBytes: cfg.AuditMaxBytes, Replicas: cfg.Replicas, AuditAllowDelete: cfg.AuditAllowDelete,
		NkeyFile: cfg.NkeyFile})
	if err != nil {
		return nil, err // Connect shut the server down
	}
	n := &Node{Bus: b, srv: srv, opts: opts, authConfig: cfg.AuthConfig}
	if key != nil {
		// The chain's ends are kept beside the stream from the start:
		// verify tells a bus that keeps them from one from before they
		// were kept by the bucket being there.
		if _, err := checkpoint.EnsureChainBucket(ctx, b.JetStream()); err != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b.Close(closeCtx) // and with it the server
			return nil, err
		}
		n.checkpoints = checkpoint.Start(b.Conn(), b.JetStream(), key, cfg.Identity, cfg.CheckpointEvery, cfg.Logger)
	}
	return n, nil
}

// Close stops the checkpoints, drains the node's connection, so handlers
// finish what they were given, and stops the server (and with it
// releases the data dir's lock, when the node took it). It is safe to
// call more than once.
func (n *Node) Close(ctx context.Context) error {
	if n.checkpoints != nil {
		n.checkpoints.Stop()
	}
	return n.Bus.Close(ctx)
}

// lockedServer is an embedded server that holds its data dir's lock
// until it has shut down. The Bus that owns the server stops it, whether
// its owner closes the Node or only the Bus (as many tests do), so the
// lock goes with the server and the next start on the dir finds it free.
type lockedServer struct {
	*server.Server
	lock *datadir.Lock
}

// WaitForShutdown waits for the server to stop, then releases the lock.
func (s lockedServer) WaitForShutdown() {
	s.Server.WaitForShutdown()
	s.lock.Close()
}

// checkStore runs checkLoaded on a connection of its own, as whom the
// node connects.
func checkStore(ctx context.Context, srv *server.Server, cfg Config) error {
	opts := []nats.Option{nats.InProcessServer(srv), nats.Name(cfg.Name + " (store check)")}
	if cfg.NkeyFile != "" {
		_, as, err := identity.Connect(cfg.NkeyFile)
		if err != nil {
			return err
		}
		opts = append(opts, as...)
	}
	// In-process, the server takes plain NATS even when its port speaks
	// only TLS.
	nc, err := nats.Connect("nats://"+strings.TrimPrefix(srv.ClientURL(), "tls://"), opts...)
	if err != nil {
		return fmt.Errorf("embedded bus: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return checkLoaded(ctx, js, cfg.DataDir)
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

// listen is where the server listens: Listen, or bus.DefaultListen.
func (cfg Config) listen() string {
	if cfg.Listen == "" {
		return bus.DefaultListen
	}
	return cfg.Listen
}

// serverOptions are the nats-server options of cfg's embedded server.
func serverOptions(cfg Config) (*server.Options, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded bus: %w", err)
	}
	listen := cfg.listen()
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("embedded bus: listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("embedded bus: listen address %q: bad port", listen)
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
			return nil, fmt.Errorf("embedded bus: %w", err)
		}
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile,
			CaFile: cfg.TLSClientCAFile, Verify: cfg.TLSClientCAFile != ""})
		if err != nil {
			return nil, fmt.Errorf("embedded bus: TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, cfg.TLSClientCAFile != ""
		opts.TLSTimeout = 2
	}
	if cfg.AuthConfig != "" {
		accounts, users, err := auth.ServerAccounts(cfg.AuthConfig)
		if err != nil {
			return nil, fmt.Errorf("embedded bus: %w", err)
		}
		opts.Accounts, opts.Nkeys = accounts, users
		opts.NoAuthUser = cfg.AnonymousKey
	}
	if cfg.StoreKey != "" {
		opts.JetStreamKey, opts.JetStreamCipher = cfg.StoreKey, server.ChaCha
	} else if encrypted, err := storeIsEncrypted(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("embedded bus: %w", err)
	} else if encrypted {
		// Started without its key, the server would not read the store
		// and the parts would make empty streams and buckets over it.
		return nil, fmt.Errorf("embedded bus: the store in %s is encrypted: give its key", cfg.DataDir)
	}
	return opts, nil
}

// startServer starts the embedded server cfg describes and returns once
// it takes connections, with its options.
func startServer(cfg Config, log *slog.Logger) (*server.Server, *server.Options, error) {
	opts, err := serverOptions(cfg)
	if err != nil {
		return nil, nil, err
	}
	listen := cfg.listen()
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

// ReloadIdentities reads the members of an embedded server's
// authorization config again and puts them in force without a restart:
// a member added since (toolbus init --add) may connect, and every
// connection is held to its member's permissions as they are now. It
// returns how many members the config names. A config that does not
// read leaves the members in force as they were.
func (n *Node) ReloadIdentities() (int, error) {
	if n.authConfig == "" {
		return 0, errors.New("bus: not a server with identities")
	}
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	// Twice: nats-server wires the service imports of an account that a
	// reload adds only when a later reload finds it there (the imports
	// of the accounts it had are wired at once). Each pass reads the
	// file anew, since the server keeps what it is given.
	var members int
	for range 2 {
		accounts, users, err := auth.ServerAccounts(n.authConfig)
		if err != nil {
			return 0, fmt.Errorf("bus: reload identities: %w", err)
		}
		next := *n.opts
		next.Accounts, next.Nkeys = accounts, users
		if err := n.srv.ReloadOptions(&next); err != nil {
			return 0, fmt.Errorf("bus: reload identities: %w", err)
		}
		n.opts, members = &next, len(users)
	}
	return members, nil
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
