// Command bus runs the toolbus bus alone: an embedded nats-server with
// JetStream and the audit stream, for a fleet whose other parts connect to
// it with --nats.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/identity"
)

func main() {
	fs := flag.NewFlagSet("bus", flag.ExitOnError)
	dataDir := fs.String("data", cli.DefaultDataDir(), "directory for the bus's data (created if missing)")
	listen := fs.String("listen", bus.DefaultListen, "address to listen on")
	logLevel := cli.LogFlag(fs)
	auditOpts := cli.AuditFlags(fs)
	clusterName := fs.String("cluster-name", "", "join a NATS cluster of this name, with clustered JetStream (the same on every node)")
	clusterListen := fs.String("cluster-listen", "", "with --cluster-name: address for the other nodes' routes (a fixed port)")
	routes := fs.String("routes", "", "with --cluster-name: the nodes' route URLs, comma-separated (nats-route://host:port); a node may list itself")
	serverName := fs.String("server-name", "", "with --cluster-name: this node's name, unique in the cluster and the same at every start (default: the cluster name and the route port)")
	replicas := fs.Int("replicas", 0, "copies the cluster keeps of the audit stream and every bucket (default 3 in a cluster, 1 alone)")
	identities := fs.String("identities", "", "directory of the fleet's identities (`toolbus init`): admit only its members, each with its role's permissions; the bus connects as DIR/bus.nk unless --nkey says otherwise")
	metricsAddr := cli.MetricsFlag(fs)
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) of the client port, which then speaks TLS only; parts connect with TOOLBUS_NATS_CA")
	tlsKey := fs.String("tls-key", "", "with --tls-cert: its private key (PEM)")
	tlsClientCA := fs.String("tls-client-ca", "", "with --tls-cert: CA (PEM) whose certificates clients must show (TOOLBUS_NATS_CERT, TOOLBUS_NATS_KEY)")
	routeCert := fs.String("cluster-tls-cert", "", "certificate (PEM) this node shows on its routes, which then speak TLS only (for server and client use)")
	routeKey := fs.String("cluster-tls-key", "", "with --cluster-tls-cert: its private key (PEM)")
	routeCA := fs.String("cluster-tls-ca", "", "with --cluster-tls-cert: CA (PEM) whose certificates the other nodes must show")
	nkey := fs.String("nkey", "", "with --identities: the bus's own seed file (default DIR/bus.nk)")
	fs.Parse(os.Args[1:])
	log, err := cli.Logger(*logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		os.Exit(2)
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	cfg := busnode.Config{Listen: *listen, DataDir: *dataDir, Name: "toolbus-bus", Logger: log, Replicas: *replicas,
		TLSCertFile: *tlsCert, TLSKeyFile: *tlsKey, TLSClientCAFile: *tlsClientCA}
	if *clusterName != "" {
		cfg.Cluster = busnode.Cluster{Name: *clusterName, Listen: *clusterListen, ServerName: *serverName,
			TLSCertFile: *routeCert, TLSKeyFile: *routeKey, TLSCAFile: *routeCA}
		for _, r := range strings.Split(*routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				cfg.Cluster.Routes = append(cfg.Cluster.Routes, r)
			}
		}
	} else if *clusterListen != "" || *routes != "" || *serverName != "" || *routeCert != "" || *routeKey != "" || *routeCA != "" {
		fmt.Fprintln(os.Stderr, "bus: --cluster-listen, --routes, --server-name and --cluster-tls-* need --cluster-name")
		os.Exit(2)
	}
	if *identities != "" {
		cfg.AuthConfig = filepath.Join(*identities, auth.ServerConfigFile)
		cfg.NkeyFile = *nkey
		if cfg.NkeyFile == "" {
			cfg.NkeyFile = identity.SeedFile(*identities, string(auth.RoleBus))
		}
		if cfg.Cluster.Name != "" {
			// The routes are members' business too: a node that
			// does not have the fleet's secret cannot join.
			secret, err := auth.RouteSecret(*identities)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bus:", err)
				os.Exit(2)
			}
			cfg.Cluster.Secret = secret
		}
	} else if *nkey != "" {
		fmt.Fprintln(os.Stderr, "bus: --nkey needs --identities")
		os.Exit(2)
	}
	if err := auditOpts.Apply(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		os.Exit(2)
	}
	// SIGHUP reads the identities again, as nats-server reloads its
	// config: members added since (toolbus init --add) may connect.
	// Caught from the start: one that comes while the node waits for its
	// cluster is applied once it is up, and neither kills it nor is lost.
	hup := make(chan os.Signal, 1)
	if *identities != "" {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	// Served before the node joins its cluster: /healthz answers and
	// /readyz says why not while it waits for the other nodes.
	m, stopMetrics, err := cli.ServeMetrics(*metricsAddr, "bus", log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		os.Exit(1)
	}
	defer stopMetrics()
	node, err := busnode.Start(ctx, cfg)
	if err != nil {
		stopMetrics()
		if ctx.Err() != nil {
			// Told to stop while it waited for its cluster: a stop, not
			// a failure.
			log.Info("bus stopped before its cluster was up", "err", err)
			return
		}
		fmt.Fprintln(os.Stderr, "bus:", err)
		os.Exit(1)
	}
	b := node.Bus
	cli.WatchBus(m, b)
	stopCheckpoints, err := auditOpts.StartCheckpoints(b, *dataDir, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		cli.Close(b)
		os.Exit(1)
	}
	log.Info("bus listening", "url", b.URL(), "data", *dataDir)
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
	stopCheckpoints()
	if err := cli.Close(b); err != nil {
		log.Error("bus did not stop cleanly", "err", err)
		os.Exit(1)
	}
}
