// Package bustest starts a real embedded bus for tests: a nats-server with
// JetStream on a free loopback port and a temporary store.
package bustest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// Start runs an embedded bus for the length of the test, on a free port,
// with its store in dir (a fresh temporary directory when dir is empty).
func Start(tb testing.TB, dir string) *bus.Bus {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	n, err := busnode.Start(context.Background(), busnode.Config{
		Listen:  "127.0.0.1:0",
		DataDir: dir,
		Name:    tb.Name(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatalf("start bus: %v", err)
	}
	tb.Cleanup(func() { Stop(tb, n.Bus) })
	return n.Bus
}

// Stop closes b (a bus.Bus or a busnode.Node), failing the test if that
// does not finish in ten seconds.
func Stop(tb testing.TB, b interface{ Close(context.Context) error }) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		tb.Errorf("close bus: %v", err)
	}
}

// Connect opens another connection to b over TCP, as a separate process
// would, closed when the test ends.
func Connect(tb testing.TB, b *bus.Bus) *bus.Bus {
	tb.Helper()
	c, err := bus.Connect(context.Background(), bus.Config{URL: b.URL(), Name: tb.Name() + "-client",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatalf("connect to bus: %v", err)
	}
	tb.Cleanup(func() { Stop(tb, c) })
	return c
}

// Quiet is a logger that drops everything, for parts under test.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// StartCluster runs n embedded buses as the nodes of one NATS cluster with
// clustered JetStream (the fleet's stores kept in replicas copies), each
// on free loopback ports with a store of its own, for the length of the
// test. It returns once every node is up and the cluster's JetStream
// answers.
func StartCluster(tb testing.TB, n, replicas int) []*bus.Bus {
	tb.Helper()
	return StartClusterWith(tb, n, replicas, nil)
}

// StartClusterWith is StartCluster with configure applied to each node's
// config (identities, say) before it starts.
func StartClusterWith(tb testing.TB, n, replicas int, configure func(*busnode.Config)) []*bus.Bus {
	tb.Helper()
	testkit.Heavy(tb, fmt.Sprintf("a %d-node cluster", n))
	routes := make([]string, n)
	listens := make([]string, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		listens[i] = l.Addr().String()
		routes[i] = "nats-route://" + listens[i]
		l.Close()
	}
	nodes := make([]*bus.Bus, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := busnode.Config{
				Listen: "127.0.0.1:0", DataDir: tb.TempDir(), Name: fmt.Sprintf("%s-node%d", tb.Name(), i+1),
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
				Cluster:  busnode.Cluster{Name: "toolbus-test", Listen: listens[i], Routes: routes, ServerName: fmt.Sprintf("node%d", i+1)},
				Replicas: replicas,
			}
			if configure != nil {
				configure(&cfg)
			}
			n, err := busnode.Start(ctx, cfg)
			if err == nil {
				nodes[i] = n.Bus
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, b := range nodes {
		if b != nil {
			tb.Cleanup(func() { Stop(tb, b) })
		}
		if errs[i] != nil {
			tb.Fatalf("start node %d of the cluster: %v", i+1, errs[i])
		}
	}
	return nodes
}

// URLs is the client URLs of nodes, comma-separated, as a part of a fleet
// is given them: it connects to one and moves to another when that one
// goes.
func URLs(nodes []*bus.Bus) string {
	urls := make([]string, len(nodes))
	for i, b := range nodes {
		urls[i] = b.URL()
	}
	return strings.Join(urls, ",")
}

// ConnectURL opens a connection to the bus at url (several URLs,
// comma-separated), closed when the test ends.
func ConnectURL(tb testing.TB, url string) *bus.Bus {
	tb.Helper()
	c, err := bus.Connect(context.Background(), bus.Config{URL: url, Name: tb.Name() + "-client", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatalf("connect to bus: %v", err)
	}
	tb.Cleanup(func() { Stop(tb, c) })
	return c
}

// Recorded returns the data of the last message the audit stream holds
// on subject, failing the test when it holds none within 10 s (a record
// is stored a moment after the event it records may be seen).
func Recorded(tb testing.TB, b *bus.Bus, subject string) []byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := b.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		tb.Fatalf("the audit stream: %v", err)
	}
	var m *jetstream.RawStreamMsg
	if !testkit.Poll(10*time.Second, func() bool {
		m, err = stream.GetLastMsgForSubject(ctx, subject)
		return err == nil
	}) {
		tb.Fatalf("nothing recorded on %s in 10 s: %v", subject, err)
	}
	return m.Data
}
