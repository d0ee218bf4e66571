package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// clusterOptions makes opts a node of cluster c.
func clusterOptions(opts *server.Options, c Cluster) error {
	if c.Listen == "" {
		return errors.New("cluster: no listen address for routes")
	}
	host, portText, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("cluster listen address %q: %w", c.Listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return fmt.Errorf("cluster listen address %q: the other nodes need a fixed port", c.Listen)
	}
	opts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port}
	for _, r := range c.Routes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Scheme != "nats-route" || u.Hostname() == "" || u.Port() == "" {
			return fmt.Errorf("cluster route %q: want nats-route://host:port", r)
		}
		opts.Routes = append(opts.Routes, u)
	}
	opts.ServerName = c.ServerName
	if opts.ServerName == "" {
		// Unique per node, and the same at every start of it: JetStream
		// knows its peers by name.
		opts.ServerName = c.Name + "-" + portText
	}
	return nil
}

// replicas is how many copies the stores of cfg's fleet keep.
func replicas(cfg Config) int {
	switch {
	case cfg.Replicas > 0:
		return cfg.Replicas
	case cfg.Cluster.Name != "":
		return 3
	}
	return 1
}

// untilJetStream runs f, and when wait is set runs it again until it
// works or ctx ends: a node's JetStream answers only once a quorum of the
// cluster is up and has chosen a leader.
func untilJetStream(ctx context.Context, log *slog.Logger, wait bool, f func(context.Context) error) error {
	if !wait {
		return f(ctx)
	}
	// Each try is bounded: a request no leader answers would wait for
	// ctx's whole deadline.
	try := func() error {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return f(tctx)
	}
	err := try()
	for last := time.Now(); err != nil; err = try() {
		if time.Since(last) > 5*time.Second {
			log.Warn("waiting for the cluster's JetStream (are the other nodes up?)", "err", err)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster's JetStream: %w (last: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// EnsureKeyValue creates or updates a bucket of the fleet: an existing
// one keeps its number of replicas, a new one gets the fleet's (those of
// the audit stream, which the bus's owner made). A part's own defaults
// must neither leave a cluster's bucket with one copy nor shrink one.
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	cfg.Replicas = fleetReplicas(ctx, js, "KV_"+cfg.Bucket)
	return js.CreateOrUpdateKeyValue(ctx, cfg)
}

// EnsureObjectStore is EnsureKeyValue for an object store.
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	cfg.Replicas = fleetReplicas(ctx, js, "OBJ_"+cfg.Bucket)
	return js.CreateOrUpdateObjectStore(ctx, cfg)
}

// fleetReplicas is the number of replicas of stream when it exists, else
// the audit stream's, else 1.
func fleetReplicas(ctx context.Context, js jetstream.JetStream, stream string) int {
	for _, name := range []string{stream, events.AuditStream} {
		if s, err := js.Stream(ctx, name); err == nil {
			return max(1, s.CachedInfo().Config.Replicas)
		}
	}
	return 1
}
