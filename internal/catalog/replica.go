package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// ErrNoCatalog means the bus has no catalogue bucket: no registry has run
// against it yet.
var ErrNoCatalog = errors.New("no tool catalogue on this bus (has a registry run against it?)")

// BucketConfig is the catalogue bucket's configuration; the registry creates
// the bucket with it and readers expect it.
func BucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      events.CatalogBucket,
		Description: "toolbus tool catalogue in shards of catalogue entries, written by the registry",
		History:     1,
		Storage:     jetstream.FileStorage,
		RePublish:   &jetstream.RePublish{Source: "$KV." + events.CatalogBucket + ".>", Destination: events.CatalogLiveSubject + ".>"},
	}
}

// EnsureBucket creates the catalogue bucket if it is missing.
func EnsureBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := bus.EnsureKeyValue(ctx, js, BucketConfig())
	if err != nil {
		return nil, fmt.Errorf("catalogue bucket: %w", err)
	}
	return kv, nil
}

func openBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, events.CatalogBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoCatalog
	}
	if err != nil {
		return nil, fmt.Errorf("catalogue bucket: %w", err)
	}
	return kv, nil
}

// Load reads the whole catalogue from the bus once. Entries that do not
// decode are skipped and reported to log; they never stop the read.
func Load(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Catalog, error) {
	kv, err := openBucket(ctx, js)
	if err != nil {
		return nil, err
	}
	// The watcher's context must end with the read: nats.go keeps a
	// goroutine waiting on it.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	set, w, err := start(ctx, wctx, js, kv, log)
	if err != nil {
		return nil, err
	}
	w.Stop()
	return New(values(set.entries)), nil
}

// start reads every shard of the catalogue. It returns them and the
// watcher, which goes on delivering changes after them until wctx ends;
// ctx bounds only the initial read. The watcher is bus.Watch's, which
// makes no consumer: an agent may read the catalogue but not make
// consumers in the account that holds it.
func start(ctx, wctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, log *slog.Logger) (*shardSet, *bus.Watcher, error) {
	w, err := bus.Watch(ctx, js, kv.Bucket(), events.CatalogLiveSubject, log)
	if err != nil {
		return nil, nil, fmt.Errorf("read catalogue: %w", err)
	}
	context.AfterFunc(wctx, func() { w.Stop() })
	// Shards are decoded as they arrive, by workers beside the receive
	// loop (decoding in the loop would hold up the watcher's flow
	// control). A shard that comes again before the end is decoded again;
	// only the decoding of its last value counts.
	type job struct {
		raw     rawShard
		version int
	}
	type done struct {
		sh      *shard
		version int
	}
	var (
		latest  = make(map[string]int) // key -> version of its last value; 0: deleted
		version int
		mu      sync.Mutex
		decoded = make(map[string]done)
		jobs    = make(chan job, 64)
		wg      sync.WaitGroup
		empty   = newShardSet() // decode reads it: nothing to reuse
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range jobs {
				sh := empty.decode([]rawShard{j.raw}, log)[0]
				mu.Lock()
				if decoded[j.raw.key].version < j.version {
					decoded[j.raw.key] = done{sh: sh, version: j.version}
				}
				mu.Unlock()
			}
		})
	}
	finish := func() { close(jobs); wg.Wait() }
	for {
		select {
		case <-ctx.Done():
			finish()
			w.Stop()
			return nil, nil, fmt.Errorf("read catalogue: %w", ctx.Err())
		case kve, ok := <-w.Updates():
			if !ok {
				finish()
				return nil, nil, errors.New("read catalogue: watcher closed")
			}
			if kve == nil {
				finish()
				tools := 0
				for _, d := range decoded {
					tools += len(d.sh.names)
				}
				set := newShardSetFor(tools, len(latest))
				for key, v := range latest {
					if d := decoded[key]; v > 0 && d.version == v {
						set.put(key, d.sh)
					}
				}
				return set, w, nil
			}
			if !IsShardKey(kve.Key()) {
				continue
			}
			if kve.Operation() != jetstream.KeyValuePut {
				latest[kve.Key()] = 0
				continue
			}
			version++
			latest[kve.Key()] = version
			jobs <- job{raw: rawShard{key: kve.Key(), data: kve.Value()}, version: version}
		}
	}
}

func values(entries map[string]*Entry) []*Entry {
	list := make([]*Entry, 0, len(entries))
	for _, e := range entries {
		list = append(list, e)
	}
	return list
}

// maxBatch bounds the changes a follower takes together.
const maxBatch = 1024

// Replica is a catalogue kept up to date from the bus: it reads every
// shard once, then follows every change. Close stops it.
type Replica struct {
	log     *slog.Logger
	watcher *bus.Watcher
	stop    context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	set     *shardSet
	snaps   Snapshots
	changed chan struct{} // closed at the next change, then replaced
}

// Follow starts a Replica of the catalogue on the bus, creating the bucket
// if no registry has yet. It returns once the whole catalogue is read. An
// existing bucket is only looked up: a reader (an agent, in a fleet with
// identities) may not change it.
func Follow(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Replica, error) {
	kv, err := bus.OpenKeyValue(ctx, js, BucketConfig())
	if err != nil {
		return nil, fmt.Errorf("catalogue bucket: %w", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	set, w, err := start(ctx, wctx, js, kv, log)
	if err != nil {
		stop()
		return nil, err
	}
	r := &Replica{log: log, watcher: w, stop: stop, done: make(chan struct{}), set: set, changed: make(chan struct{})}
	go r.follow()
	return r, nil
}

// follow applies the bucket's changes as they come. The changes waiting
// are taken together, decoded outside the lock and applied as one, so a
// set of many tools rewritten in every shard reaches readers as few
// changes, not hundreds.
func (r *Replica) follow() {
	defer close(r.done)
	updates := r.watcher.Updates()
	for kve := range updates {
		batch := []jetstream.KeyValueEntry{kve}
	more:
		for len(batch) < maxBatch {
			select {
			case next, ok := <-updates:
				if !ok {
					break more
				}
				batch = append(batch, next)
			default:
				break more
			}
		}
		// The last change of each shard in the batch is what it holds.
		last := make(map[string]jetstream.KeyValueEntry)
		var touched []string
		for _, e := range batch {
			if e == nil || !IsShardKey(e.Key()) {
				continue
			}
			if _, ok := last[e.Key()]; !ok {
				touched = append(touched, e.Key())
			}
			last[e.Key()] = e
		}
		if len(touched) == 0 {
			continue
		}
		var raw []rawShard
		for _, key := range touched {
			if last[key].Operation() == jetstream.KeyValuePut {
				raw = append(raw, rawShard{key: key, data: last[key].Value()})
			}
		}
		// Only this goroutine changes the set: it may read it unlocked.
		decoded := r.set.decode(raw, r.log)
		r.mu.Lock()
		for _, key := range touched {
			if last[key].Operation() != jetstream.KeyValuePut {
				r.set.put(key, nil)
			}
		}
		for i, sh := range decoded {
			r.set.put(raw[i].key, sh)
		}
		r.snaps.Invalidate()
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// Changed returns a channel that is closed when the catalogue changes
// next, for followers that act on changes (the MCP facade's list_changed).
func (r *Replica) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Catalog is the current snapshot.
func (r *Replica) Catalog() *Catalog { return r.snaps.Get(&r.mu, r.set.entries) }

// Health reports how the replica is out of step with the catalogue
// bucket, nil when it is not (bus.Watcher.Health: the watch mends what
// it can, and this says what it could not mend within its grace).
func (r *Replica) Health() error {
	if err := r.watcher.Health(); err != nil {
		return fmt.Errorf("catalogue replica: %w", err)
	}
	return nil
}

// Close stops following and waits for the follower goroutine to end.
func (r *Replica) Close() error {
	err := r.watcher.Stop()
	r.stop()
	<-r.done
	return err
}
