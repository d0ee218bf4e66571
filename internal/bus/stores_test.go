package bus

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
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
