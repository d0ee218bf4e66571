package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// A stream that does not answer is said to be missing (bus.ErrNoStream),
// and the error is one to wait out (bus.Transient): in a cluster a bucket
// just made has no direct-get responder for a while, and a console that
// took it for gone stopped.
func TestLastOfEachOfAMissingStream(t *testing.T) {
	b := bustest.Start(t, "")
	_, _, err := bus.LastOfEach(context.Background(), b.JetStream(), "KV_NONE", "$KV.NONE.>")
	if !errors.Is(err, bus.ErrNoStream) || !bus.Transient(err) {
		t.Fatalf("got %v (transient: %v), want %v, transient", err, bus.Transient(err), bus.ErrNoStream)
	}
}

// A bucket of more keys than one multi-last get answers (the server
// refuses past 1024 subjects, however paged) is read whole all the same,
// the last value of each key once, in stream order.
func TestLastOfEachBeyondWhatOneGetAnswers(t *testing.T) {
	b := bustest.Start(t, "")
	const keys = 1500
	fillMany(t, b.JetStream(), keys)
	checkLastOfEach(t, b.JetStream(), keys)
}

// fillMany makes the bucket MANY with keys keys, each "first", then sets
// the first ten to "second", and returns a time between the two.
func fillMany(t *testing.T, js jetstream.JetStream, keys int) time.Time {
	t.Helper()
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MANY", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if _, err := kv.PutString(ctx, fmt.Sprintf("k%d", i), "first"); err != nil {
			t.Fatal(err)
		}
	}
	middle := time.Now()
	for i := range 10 { // ten keys changed: only their last value counts
		if _, err := kv.PutString(ctx, fmt.Sprintf("k%d", i), "second"); err != nil {
			t.Fatal(err)
		}
	}
	return middle
}

// checkLastOfEach reads fillMany's bucket with LastOfEach: every key once,
// in stream order, with its last value, up to the bucket's last change.
func checkLastOfEach(t *testing.T, js jetstream.JetStream, keys int) {
	t.Helper()
	msgs, upTo, err := bus.LastOfEach(context.Background(), js, "KV_MANY", "$KV.MANY.>")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != keys || upTo != uint64(keys)+10 {
		t.Fatalf("%d messages up to #%d, want %d up to #%d", len(msgs), upTo, keys, keys+10)
	}
	seen := map[string]bool{}
	for i, m := range msgs {
		if seen[m.Subject] || i > 0 && m.Sequence <= msgs[i-1].Sequence {
			t.Fatalf("message %d (%s #%d) repeats a key or is out of order", i, m.Subject, m.Sequence)
		}
		seen[m.Subject] = true
		if want := map[bool]string{true: "second", false: "first"}[m.Sequence > uint64(keys)]; string(m.Data) != want {
			t.Errorf("%s holds %q, want %q", m.Subject, m.Data, want)
		}
	}
}

// A change whose republished copy never reaches a watcher (sent while
// its connection reconnected, say) reaches it all the same: the watch
// reads what the bucket holds after the last change it gave. Here the
// watcher listens where nothing is republished, so only that read can
// bring the changes: a put, and a delete.
func TestWatchCatchesUpWithWhatItMissed(t *testing.T) {
	defer func(d time.Duration) { bus.WatchCatchUp = d }(bus.WatchCatchUp)
	bus.WatchCatchUp = 50 * time.Millisecond
	b := bustest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MISSED", History: 1,
		RePublish: &jetstream.RePublish{Source: "$KV.MISSED.>", Destination: "live.missed.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	reader := bustest.Connect(t, b)
	w, err := bus.Watch(ctx, reader.JetStream(), "MISSED", "nowhere", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e := <-w.Updates():
			return e
		case <-ctx.Done():
			t.Fatal("no update")
			return nil
		}
	}
	if e := next(); e == nil || e.Key() != "a" || string(e.Value()) != "1" {
		t.Fatalf("first entry %v", e)
	}
	if e := next(); e != nil {
		t.Fatalf("want the end of the initial values, got %v", e)
	}
	if _, err := kv.PutString(ctx, "b", "2"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.Key() != "b" || string(e.Value()) != "2" || e.Operation() != jetstream.KeyValuePut {
		t.Errorf("the missed put: %s %q %v", e.Key(), e.Value(), e.Operation())
	}
	if e := next(); e.Key() != "a" || e.Operation() != jetstream.KeyValueDelete {
		t.Errorf("the missed delete: %s %v", e.Key(), e.Operation())
	}
	// Given once: a later read brings nothing again.
	select {
	case e := <-w.Updates():
		t.Errorf("a change given twice: %s %v", e.Key(), e.Operation())
	case <-time.After(10 * bus.WatchCatchUp):
	}
}
