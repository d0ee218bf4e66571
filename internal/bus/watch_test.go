package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// setWatchTimes sets how often watches check their bucket and how long
// they may be out of step, for the length of the test.
func setWatchTimes(t *testing.T, catchUp, grace time.Duration) {
	t.Helper()
	oldCatchUp, oldGrace := bus.WatchCatchUp, bus.WatchGrace
	bus.WatchCatchUp, bus.WatchGrace = catchUp, grace
	t.Cleanup(func() { bus.WatchCatchUp, bus.WatchGrace = oldCatchUp, oldGrace })
}

// signal sends on ch unless a signal waits there already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// republishing makes a bucket of one value per key that republishes its
// changes on live.
func republishing(t *testing.T, js jetstream.JetStream, bucket, live string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bucket, History: 1,
		RePublish: &jetstream.RePublish{Source: "$KV." + bucket + ".>", Destination: live + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// keys follows a watch's updates into what each key holds ("" once
// deleted).
type keys struct {
	t *testing.T
	w *bus.Watcher
	m map[string]string
}

// initial reads the values a watch starts with, up to its nil entry.
func initial(t *testing.T, w *bus.Watcher) *keys {
	t.Helper()
	k := &keys{t: t, w: w, m: map[string]string{}}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return k
			}
			k.apply(e)
		case <-time.After(testkit.DefaultWait):
			t.Fatal("no end of the initial values")
		}
	}
}

func (k *keys) apply(e jetstream.KeyValueEntry) {
	if e.Operation() == jetstream.KeyValuePut {
		k.m[e.Key()] = string(e.Value())
	} else {
		k.m[e.Key()] = ""
	}
}

// until applies updates until want holds, failing the test if it does
// not within testkit.DefaultWait.
func (k *keys) until(what string, want func(map[string]string) bool) {
	k.t.Helper()
	deadline := time.After(testkit.DefaultWait)
	for !want(k.m) {
		select {
		case e := <-k.w.Updates():
			if e != nil {
				k.apply(e)
			}
		case <-deadline:
			k.t.Fatalf("never: %s; the watch holds %v", what, k.m)
		}
	}
}

// A change whose republished copy a watcher's connection missed (the
// server dropped it, and it was reconnecting) is not passed over when
// the next change comes: that one shows the hole, and the watch reads
// what the hole held from the bucket before it gives the next. Here the
// watch never reads on its own (its tick is an hour away), so only the
// hole can bring the missed change.
func TestAChangeMissedBeforeAnotherIsNotPassedOver(t *testing.T) {
	setWatchTimes(t, time.Hour, time.Hour)
	// A server of the test's own, which it can have drop a client.
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(testkit.DefaultWait) {
		t.Fatal("the server did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.DefaultWait)
	defer cancel()
	writer, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	wjs, err := jetstream.New(writer)
	if err != nil {
		t.Fatal(err)
	}
	kv := republishing(t, wjs, "HOLE", "live.hole")
	if _, err := kv.PutString(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}

	// The watcher's connection reconnects only when the test lets it.
	disconnected, reconnected, release := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	nc, err := nats.Connect(srv.ClientURL(),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { signal(disconnected) }),
		nats.ReconnectHandler(func(*nats.Conn) { signal(reconnected) }),
		nats.CustomReconnectDelay(func(int) time.Duration { <-release; return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := bus.Watch(ctx, js, "HOLE", "live.hole", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	k := initial(t, w)
	if k.m["a"] != "1" {
		t.Fatalf("initial values %v", k.m)
	}

	id, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	<-disconnected
	if _, err := kv.PutString(ctx, "b", "missed"); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-reconnected
	if err := nc.Flush(); err != nil { // the server has the subscription again
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "c", "heard"); err != nil {
		t.Fatal(err)
	}
	k.until("the missed change and the heard one", func(m map[string]string) bool { return m["b"] == "missed" && m["c"] == "heard" })
	if err := w.Health(); err != nil {
		t.Errorf("Health: %v", err)
	}
}

// A bucket made anew numbers its messages from 1 again: a watch that had
// seen later numbers would take every new change for one it had given
// and stay as it was for good. It reads the bucket whole again instead,
// and lets go of the keys the new bucket does not hold.
func TestAWatchOfABucketMadeAnewReadsItWhole(t *testing.T) {
	setWatchTimes(t, 20*time.Millisecond, time.Hour)
	b := bustest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), testkit.DefaultWait)
	defer cancel()
	js := b.JetStream()
	kv := republishing(t, js, "AGAIN", "live.again")
	for i, kv1 := range []string{"a", "b", "c", "a", "a", "a"} {
		if _, err := kv.PutString(ctx, kv1, "old"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	reader := bustest.Connect(t, b)
	w, err := bus.Watch(ctx, reader.JetStream(), "AGAIN", "live.again", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	k := initial(t, w)
	if len(k.m) != 3 {
		t.Fatalf("initial values %v", k.m)
	}
	if err := js.DeleteKeyValue(ctx, "AGAIN"); err != nil {
		t.Fatal(err)
	}
	kv = republishing(t, js, "AGAIN", "live.again")
	if _, err := kv.PutString(ctx, "a", "new"); err != nil {
		t.Fatal(err)
	}
	k.until("the new bucket's values alone", func(m map[string]string) bool {
		return m["a"] == "new" && m["b"] == "" && m["c"] == ""
	})
	if _, err := kv.PutString(ctx, "d", "later"); err != nil {
		t.Fatal(err)
	}
	k.until("a change after it", func(m map[string]string) bool { return m["d"] == "later" })
}

// A bucket purged whole holds no keys, and no marker says each one went:
// the watch sees it holds fewer keys than it gave, and lets them go.
func TestAWatchOfAPurgedBucketLetsItsKeysGo(t *testing.T) {
	setWatchTimes(t, 20*time.Millisecond, time.Hour)
	b := bustest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), testkit.DefaultWait)
	defer cancel()
	js := b.JetStream()
	kv := republishing(t, js, "PURGED", "live.purged")
	for _, key := range []string{"a", "b"} {
		if _, err := kv.PutString(ctx, key, "v"); err != nil {
			t.Fatal(err)
		}
	}
	w, err := bus.Watch(ctx, bustest.Connect(t, b).JetStream(), "PURGED", "live.purged", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	k := initial(t, w)
	s, err := js.Stream(ctx, "KV_PURGED")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	k.until("no keys", func(m map[string]string) bool { return m["a"] == "" && m["b"] == "" })
}

// Health says when a watch cannot read its bucket past the grace, and
// stops saying it once it can again.
func TestWatchHealthSaysWhenItCannotReadItsBucket(t *testing.T) {
	setWatchTimes(t, 20*time.Millisecond, 0)
	b := bustest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), testkit.DefaultWait)
	defer cancel()
	js := b.JetStream()
	kv := republishing(t, js, "GONE", "live.gone")
	if _, err := kv.PutString(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	w, err := bus.Watch(ctx, bustest.Connect(t, b).JetStream(), "GONE", "live.gone", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	k := initial(t, w)
	if err := w.Health(); err != nil {
		t.Errorf("Health of a watch in step: %v", err)
	}
	if err := js.DeleteKeyValue(ctx, "GONE"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "Health says the bucket is not read", func() bool { return w.Health() != nil })
	t.Logf("Health: %v", w.Health())
	kv = republishing(t, js, "GONE", "live.gone")
	if _, err := kv.PutString(ctx, "a", "2"); err != nil {
		t.Fatal(err)
	}
	k.until("the bucket's new value", func(m map[string]string) bool { return m["a"] == "2" })
	testkit.Eventually(t, "Health is nil again", func() bool { return w.Health() == nil })
	w.Stop()
	if err := w.Health(); err == nil {
		t.Error("Health of a stopped watch is nil")
	}
}
