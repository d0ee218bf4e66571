package bus_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// A bucket of more keys than one multi-last get answers (the server
// refuses past 1024 subjects, however paged) is read whole all the same,
// the last value of each key once, in stream order.
func TestLastOfEachBeyondWhatOneGetAnswers(t *testing.T) {
	b := bustest.Start(t, "")
	ctx := context.Background()
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MANY", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 1500
	for i := range keys {
		if _, err := kv.PutString(ctx, fmt.Sprintf("k%d", i), "first"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 { // ten keys changed: only their last value counts
		if _, err := kv.PutString(ctx, fmt.Sprintf("k%d", i), "second"); err != nil {
			t.Fatal(err)
		}
	}
	msgs, upTo, err := bus.LastOfEach(ctx, b.JetStream(), "KV_MANY", "$KV.MANY.>")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != keys || upTo != keys+10 {
		t.Fatalf("%d messages up to #%d, want %d up to #%d", len(msgs), upTo, keys, keys+10)
	}
	seen := map[string]bool{}
	for i, m := range msgs {
		if seen[m.Subject] || i > 0 && m.Sequence <= msgs[i-1].Sequence {
			t.Fatalf("message %d (%s #%d) repeats a key or is out of order", i, m.Subject, m.Sequence)
		}
		seen[m.Subject] = true
		if want := map[bool]string{true: "second", false: "first"}[m.Sequence > keys]; string(m.Data) != want {
			t.Errorf("%s holds %q, want %q", m.Subject, m.Data, want)
		}
	}
}
