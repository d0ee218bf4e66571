package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/auth"
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
	if c.Secret != "" {
		// Incoming routes must show it; outgoing ones show it.
		opts.Cluster.Username, opts.Cluster.Password = auth.RouteUser, c.Secret
	}
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile != "" && c.TLSCAFile != "":
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, CaFile: c.TLSCAFile, Verify: true})
		if err != nil {
			return fmt.Errorf("cluster routes: TLS: %w", err)
		}
		// As nats-server's own config does for routes: strict, and a
		// node is a client of the others too, checked against the CA.
		tc.ClientAuth, tc.RootCAs = tls.RequireAndVerifyClientCert, tc.ClientCAs
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 2
	case c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != "":
		return errors.New("cluster routes: TLS needs the node's certificate, its key and the CA of the nodes' certificates")
	}
	for _, r := range c.Routes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Scheme != "nats-route" || u.Hostname() == "" || u.Port() == "" {
			return fmt.Errorf("cluster route %q: want nats-route://host:port", r)
		}
		if c.Secret != "" {
			u.User = url.UserPassword(auth.RouteUser, c.Secret)
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
//
// A cluster that has just started, or lost a node, may take longer than
// one request's timeout to place a new bucket's copies: such a failure is
// tried again, for up to a minute while ctx lasts.
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := retryTransient(ctx, func() (err error) {
		cfg.Replicas = fleetReplicas(ctx, js, "KV_"+cfg.Bucket)
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	})
	return kv, err
}

// OpenKeyValue opens the bucket cfg names, and makes it (EnsureKeyValue)
// only when it is missing: a part that reads a bucket of the fleet must
// not need the permission to change it (an agent, an approver, in a fleet
// with identities).
//
// A cluster that is still electing its leaders answers the lookup late:
// it is tried again too, as EnsureKeyValue's creation is (a fleet's
// executor once exited at start on one such timeout).
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := retryTransient(ctx, func() (err error) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return EnsureKeyValue(ctx, js, cfg)
	}
	return kv, err
}

// EnsureObjectStore is EnsureKeyValue for an object store.
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	var obj jetstream.ObjectStore
	err := retryTransient(ctx, func() (err error) {
		cfg.Replicas = fleetReplicas(ctx, js, "OBJ_"+cfg.Bucket)
		obj, err = js.CreateOrUpdateObjectStore(ctx, cfg)
		return err
	})
	return obj, err
}

// retryTransient runs f until it succeeds, fails for good, ctx ends or a
// minute has passed.
func retryTransient(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil || !transient(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Transient reports an error a cluster gives while it settles: a request
// no leader answered in time, or JetStream saying it is not available yet
// (API error 10008). Such a request is worth sending again.
func Transient(err error) bool { return transient(err) }

func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == 10008 {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		strings.Contains(err.Error(), "temporarily unavailable")
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
