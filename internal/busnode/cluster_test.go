package busnode_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestClusterKeepsThreeCopies: three nodes make one cluster whose audit
// stream and buckets keep three copies; a bucket made by a part that
// knows nothing of the cluster gets them too, and a part's defaults never
// shrink one. With a node gone, what a client publishes is still kept,
// and the client moves to another node.
func TestClusterKeepsThreeCopies(t *testing.T) {
	nodes := bustest.StartCluster(t, 3, 0)
	ctx := context.Background()
	client := bustest.ConnectURL(t, bustest.URLs(nodes))
	stream, err := client.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if info := stream.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("audit stream: %d replicas, cluster %+v", info.Config.Replicas, info.Cluster)
	}
	kv, err := bus.EnsureKeyValue(ctx, client.JetStream(), jetstream.KeyValueConfig{Bucket: "TEST_FLEET", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := kv.Status(ctx); st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
		t.Errorf("a new bucket keeps %d copies", st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas)
	}
	obj, err := bus.EnsureObjectStore(ctx, client.JetStream(), jetstream.ObjectStoreConfig{Bucket: "TEST_OBJECTS"})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := obj.Status(ctx); st.Replicas() != 3 {
		t.Errorf("a new object store keeps %d copies", st.Replicas())
	}
	// The bucket's config applied again by a part keeps its copies.
	if _, err := bus.EnsureKeyValue(ctx, client.JetStream(), jetstream.KeyValueConfig{Bucket: "TEST_FLEET", History: 2, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if st, _ := kv.Status(ctx); st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 || st.History() != 2 {
		t.Errorf("after a part applied its config: %d copies, history %d", st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas, st.History())
	}

	// The node the client talks to goes; the client moves, and what it
	// publishes is kept.
	var gone int
	for i, n := range nodes {
		if n.URL() == client.Conn().ConnectedUrl() {
			gone = i
		}
	}
	bustest.Stop(t, nodes[gone])
	tries := 0
	testkit.Eventually(t, "something is kept with one node of three gone", func() bool {
		subject := fmt.Sprintf("tool.test.%d", tries)
		tries++
		if err := client.Conn().Publish(subject, []byte("after")); err != nil {
			return false
		}
		client.Conn().Flush()
		s, err := client.JetStream().Stream(ctx, events.AuditStream)
		if err != nil {
			return false
		}
		m, err := s.GetLastMsgForSubject(ctx, subject)
		return err == nil && string(m.Data) == "after"
	})
	if client.Conn().ConnectedUrl() == nodes[gone].URL() {
		t.Error("the client is still on the node that went")
	}
}

// TestABucketMadeBeforeTheAuditStreamKeepsThreeCopies: a part that makes
// a bucket in a cluster whose audit stream is not there yet (it came
// before the nodes made it) gives it as many copies as the nodes will give
// the audit stream, not 1: a bucket kept on one node goes offline with it.
func TestABucketMadeBeforeTheAuditStreamKeepsThreeCopies(t *testing.T) {
	nodes := bustest.StartCluster(t, 3, 0)
	ctx := context.Background()
	client := bustest.ConnectURL(t, bustest.URLs(nodes))
	js := client.JetStream()
	for _, s := range []string{events.ConfirmStream, events.AuditStream} {
		if err := js.DeleteStream(ctx, s); err != nil {
			t.Fatalf("delete %s: %v", s, err)
		}
	}
	kv, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "TEST_EARLY", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; got != 3 {
		t.Errorf("a bucket made before the audit stream keeps %d copies, want 3", got)
	}
}

// TestClusterConfigErrors: a node needs a fixed route port.
func TestClusterConfigErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []busnode.Cluster{{Name: "c"}, {Name: "c", Listen: "127.0.0.1:0"}, {Name: "c", Listen: "nonsense"}, {Name: "c", Listen: "127.0.0.1:7000", Routes: []string{"::::"}}} {
		if b, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Cluster: c, Logger: bustest.Quiet()}); err == nil {
			b.Close(ctx)
			t.Errorf("%+v: started", c)
		}
	}
}

// lines is a slog handler that hands every message to a channel.
type lines chan string

func (l lines) Enabled(context.Context, slog.Level) bool { return true }
func (l lines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l lines) WithGroup(string) slog.Handler            { return l }
func (l lines) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}

// TestANodeWithoutTheRouteSecretCannotJoin: the nodes of a fleet with
// identities show each other its route secret; a node that does not
// have it, even knowing every route and the cluster's name, is refused
// on the routes and never gets the cluster's JetStream.
func TestANodeWithoutTheRouteSecretCannotJoin(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.Init(dir, auth.DefaultMembers()); err != nil {
		t.Fatal(err)
	}
	secret, err := auth.RouteSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex // the nodes are configured at once
		routes []string
	)
	bustest.StartClusterWith(t, 3, 0, func(cfg *busnode.Config) {
		cfg.Cluster.Secret = secret
		mu.Lock()
		routes = cfg.Cluster.Routes
		mu.Unlock()
	})
	for _, wrong := range []string{"", strings.Repeat("x", 43)} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen := l.Addr().String()
		l.Close()
		said := make(lines, 1000)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rogue, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Name: "rogue", Logger: slog.New(said),
			Cluster: busnode.Cluster{Name: "toolbus-test", Listen: listen, Routes: routes, ServerName: "rogue", Secret: wrong}})
		cancel()
		if err == nil {
			bustest.Stop(t, rogue)
			t.Fatalf("a node with the secret %q joined the cluster", wrong)
		}
		refused := false
		for len(said) > 0 && !refused {
			refused = strings.Contains(strings.ToLower(<-said), "authorization violation")
		}
		if !refused {
			t.Errorf("a node with the secret %q was not refused on the routes (it failed with %v)", wrong, err)
		}
	}
}
