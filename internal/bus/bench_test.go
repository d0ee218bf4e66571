package bus_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/testkit/natsserver"
)

// BenchmarkReadABucketOnTheOldestServer: what a part pays on nats-server
// 2.10, which answers a direct get one message at a time, to read a
// bucket of 500 keys whole (LastOfEach: the catalogue at a start), against
// the embedded 2.15's batches, timed in turn.
func BenchmarkReadABucketOnTheOldestServer(b *testing.B) {
	const keys = 500
	fill := func(js jetstream.JetStream) {
		ctx := context.Background()
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "BENCH", History: 1})
		if err != nil {
			b.Fatal(err)
		}
		for i := range keys {
			if _, err := kv.PutString(ctx, fmt.Sprintf("tool%d", i), `{"name":"a tool","description":"what it does"}`); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Both over TCP from this process, as a part of the fleet connects.
	newest := bustest.Connect(b, bustest.Start(b, ""))
	fill(newest.JetStream())
	srv := natsserver.Start(b, natsserver.V210)
	oldest, err := bus.Connect(context.Background(), bus.Config{URL: srv.URL, Name: b.Name(), Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer bustest.Stop(b, oldest)
	fill(oldest.JetStream())
	read := func(js jetstream.JetStream) func() {
		return func() {
			msgs, _, err := bus.LastOfEach(context.Background(), js, "KV_BENCH", "$KV.BENCH.>")
			if err != nil || len(msgs) != keys {
				b.Fatalf("read %d keys: %v", len(msgs), err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		lat := measure.Interleaved(100, read(newest.JetStream()), read(oldest.JetStream()))
		b.ReportMetric(float64(lat[0].P50.Microseconds())/1000, "ms-2.15")
		b.ReportMetric(float64(lat[1].P50.Microseconds())/1000, "ms-2.10")
		b.ReportMetric(float64(lat[1].P50)/float64(lat[0].P50), "x")
	}
}
