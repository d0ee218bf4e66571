// Command bus runs the toolbus bus alone: an embedded nats-server with
// JetStream and the audit stream, for a fleet whose other parts connect to
// it with --nats.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/identity"
)

func main() { cli.Main("bus", run) }

// flags are the command line of bus.
type flags struct {
	dataDir, listen, logLevel, metricsAddr                     *string
	clusterName, clusterListen, routes, serverName             *string
	identities, nkey                                           *string
	tlsCert, tlsKey, tlsClientCA, routeCert, routeKey, routeCA *string
	replicas                                                   *int
	audit                                                      *busnode.AuditOptions
}

func newFlags(fs *flag.FlagSet) *flags {
	return &flags{
		dataDir:       fs.String("data", cli.DefaultDataDir(), "directory for the bus's data (created if missing)"),
		listen:        fs.String("listen", bus.DefaultListen, "address to listen on"),
		logLevel:      cli.LogFlag(fs),
		audit:         busnode.AuditFlags(fs),
		clusterName:   fs.String("cluster-name", "", "join a NATS cluster of this name, with clustered JetStream (the same on every node)"),
		clusterListen: fs.String("cluster-listen", "", "with --cluster-name: address for the other nodes' routes (a fixed port)"),
		routes:        fs.String("routes", "", "with --cluster-name: the nodes' route URLs, comma-separated (nats-route://host:port); a node may list itself"),
		serverName:    fs.String("server-name", "", "with --cluster-name: this node's name, unique in the cluster and the same at every start (default: the cluster name and the route port)"),
		replicas:      fs.Int("replicas", 0, "copies the cluster keeps of the audit stream and every bucket (default 3 in a cluster, 1 alone)"),
		identities:    fs.String("identities", "", "directory of the fleet's identities (`toolbus init`): admit only its members, each with its role's permissions; the bus connects as DIR/bus.nk unless --nkey says otherwise"),
		metricsAddr:   cli.MetricsFlag(fs),
		tlsCert:       fs.String("tls-cert", "", "certificate (PEM) of the client port, which then speaks TLS only; parts connect with TOOLBUS_NATS_CA"),
		tlsKey:        fs.String("tls-key", "", "with --tls-cert: its private key (PEM)"),
		tlsClientCA:   fs.String("tls-client-ca", "", "with --tls-cert: CA (PEM) whose certificates clients must show (TOOLBUS_NATS_CERT, TOOLBUS_NATS_KEY)"),
		routeCert:     fs.String("cluster-tls-cert", "", "certificate (PEM) this node shows on its routes, which then speak TLS only (for server and client use)"),
		routeKey:      fs.String("cluster-tls-key", "", "with --cluster-tls-cert: its private key (PEM)"),
		routeCA:       fs.String("cluster-tls-ca", "", "with --cluster-tls-cert: CA (PEM) whose certificates the other nodes must show"),
		nkey:          fs.String("nkey", "", "with --identities: the bus's own seed file (default DIR/bus.nk)"),
	}
}

// config is the bus node the flags describe.
func (f *flags) config(log *slog.Logger) (busnode.Config, error) {
	cfg := busnode.Config{Listen: *f.listen, DataDir: *f.dataDir, Name: "toolbus-bus", Logger: log, Replicas: *f.replicas,
		TLSCertFile: *f.tlsCert, TLSKeyFile: *f.tlsKey, TLSClientCAFile: *f.tlsClientCA, Identity: cli.Identity("bus")}
	if *f.clusterName != "" {
		cfg.Cluster = busnode.Cluster{Name: *f.clusterName, Listen: *f.clusterListen, ServerName: *f.serverName,
			TLSCertFile: *f.routeCert, TLSKeyFile: *f.routeKey, TLSCAFile: *f.routeCA}
		for _, r := range strings.Split(*f.routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				cfg.Cluster.Routes = append(cfg.Cluster.Routes, r)
			}
		}
	} else if *f.clusterListen != "" || *f.routes != "" || *f.serverName != "" || *f.routeCert != "" || *f.routeKey != "" || *f.routeCA != "" {
		return cfg, errors.New("--cluster-listen, --routes, --server-name and --cluster-tls-* need --cluster-name")
	}
	if *f.identities != "" {
		cfg.AuthConfig = filepath.Join(*f.identities, auth.ServerConfigFile)
		cfg.NkeyFile = *f.nkey
		if cfg.NkeyFile == "" {
			cfg.NkeyFile = identity.SeedFile(*f.identities, string(auth.RoleBus))
		}
		if cfg.Cluster.Name != "" {
			// The routes are members' business too: a node that
			// does not have the fleet's secret cannot join.
			secret, err := auth.RouteSecret(*f.identities)
			if err != nil {
				return cfg, err
			}
			cfg.Cluster.Secret = secret
		}
	} else if *f.nkey != "" {
		return cfg, errors.New("--nkey needs --identities")
	}
	return cfg, f.audit.Apply(&cfg)
}

func run(args []string) error {
	fs := flag.NewFlagSet("bus", flag.ContinueOnError)
	f := newFlags(fs)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return cli.UsageError{Err: err}
	}
	log, err := cli.Logger(*f.logLevel)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	cfg, err := f.config(log)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	// SIGHUP reads the identities again, as nats-server reloads its
	// config: members added since (toolbus init --add) may connect.
	// Caught from the start: one that comes while the node waits for its
	// cluster is applied once it is up, and neither kills it nor is lost.
	hup := make(chan os.Signal, 1)
	if cfg.AuthConfig != "" {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	// Served before the node joins its cluster: /healthz answers and
	// /readyz says why not while it waits for the other nodes.
	m, stopMetrics, err := cli.ServeMetrics(*f.metricsAddr, "bus", log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	node, err := busnode.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			// Told to stop while it waited for its cluster: a stop, not
			// a failure.
			log.Info("bus stopped before its cluster was up", "err", err)
			return nil
		}
		return err
	}
	cli.WatchBus(m, node.Bus)
	log.Info("bus listening", "url", node.URL(), "data", cfg.DataDir)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-hup:
			if n, err := node.ReloadIdentities(); err != nil {
				log.Error("identities not reloaded; the members in force stay", "err", err)
			} else {
				log.Info("identities reloaded", "members", n)
			}
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := node.Close(closeCtx); err != nil {
		return fmt.Errorf("did not stop cleanly: %w", err)
	}
	return nil
}
