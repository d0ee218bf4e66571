package bus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// settlingJetStream is a cluster's JetStream as a part sees it while the
// cluster elects its leaders: each stream's first lookup times out, the
// next ones answer. The audit stream keeps 3 copies; the bucket's stream
// does not exist yet. Every other method is left unimplemented.
type settlingJetStream struct {
	jetstream.JetStream
	asked   map[string]int
	created []jetstream.KeyValueConfig
}

type streamOf struct {
	jetstream.Stream
	info *jetstream.StreamInfo
}

func (s streamOf) CachedInfo() *jetstream.StreamInfo { return s.info }

func (js *settlingJetStream) Stream(_ context.Context, name string) (jetstream.Stream, error) {
	js.asked[name]++
	switch {
	case js.asked[name] == 1:
		return nil, nats.ErrTimeout
	case name == events.AuditStream:
		return streamOf{info: &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: name, Replicas: 3}}}, nil
	}
	return nil, jetstream.ErrStreamNotFound
}

func (js *settlingJetStream) CreateOrUpdateKeyValue(_ context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	js.created = append(js.created, cfg)
	return nil, nil
}

// TestEnsureKeyValueWaitsForTheClusterToAnswer: a bucket made while the
// cluster's lookups time out is not taken for a single server's, with 1
// copy, which the loss of the node holding it would take offline: the
// lookup is tried again, and the bucket gets the audit stream's 3 copies.
func TestEnsureKeyValueWaitsForTheClusterToAnswer(t *testing.T) {
	js := &settlingJetStream{asked: map[string]int{}}
	if _, err := EnsureKeyValue(context.Background(), js, jetstream.KeyValueConfig{Bucket: "TEST_SETTLING"}); err != nil {
		t.Fatal(err)
	}
	if len(js.created) != 1 || js.created[0].Replicas != 3 {
		t.Errorf("made %+v, want one bucket with 3 replicas", js.created)
	}
}

// Owners that make the fleet's stores at once (a bus node, and a daemon
// that connected as the node started) all succeed: the one whose update
// found nothing, and whose create then found another's stream, updates
// it instead of failing with "stream name already in use". Each round
// starts from a server with no stores, and lets eight owners race.
func TestOwnersThatMakeTheStoresAtOnceAllSucceed(t *testing.T) {
	for round := range 6 {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(testkit.DefaultWait) {
			t.Fatal("the server did not start")
		}
		// On a loaded host, a reply to one of the owners' requests
		// sometimes never came: each try is bounded (ensureTry), and the
		// owner tries again.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		const owners = 8
		errs := make(chan error, 2*owners)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range owners {
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				defer nc.Close()
				<-start
				if err := EnsureAudit(ctx, js, Config{}); err != nil {
					errs <- fmt.Errorf("the audit stores: %w", err)
				}
				if _, err := EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "raced"}); err != nil {
					errs <- fmt.Errorf("a bucket: %w", err)
				}
			})
		}
		close(start)
		wg.Wait()
		cancel()
		srv.Shutdown()
		srv.WaitForShutdown()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
	}
}
