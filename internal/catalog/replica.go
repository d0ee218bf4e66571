package catalog

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

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
		Description: "toolbus tool catalogue: one entry per tool, written by the registry",
		History:     1,
		Storage:     jetstream.FileStorage,
	}
}

// EnsureBucket creates the catalogue bucket if it is missing.
func EnsureBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, BucketConfig())
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
	entries, w, err := start(ctx, wctx, js, kv, log, false)
	if err != nil {
		return nil, err
	}
	w.Stop()
	return New(values(entries)), nil
}

// start reads the whole catalogue: from the latest snapshot when there is a
// usable one, then from the bucket from the snapshot's revision on, or the
// whole bucket when there is none. It returns the entries, keyed by bucket
// key, and the watcher, which goes on delivering changes after them until
// wctx ends; ctx bounds only the initial read.
func start(ctx, wctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, log *slog.Logger, follow bool) (map[string]*Entry, jetstream.KeyWatcher, error) {
	entries, rev, err := readSnapshot(ctx, js, kv, log)
	if err != nil {
		if !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrObjectNotFound) {
			log.Warn("catalogue snapshot not used; reading the whole bucket", "err", err)
		}
		entries, rev = make(map[string]*Entry), 0
	}
	var opts []jetstream.WatchOpt
	switch {
	case rev > 0:
		opts = append(opts, jetstream.ResumeFromRevision(rev+1))
	case !follow:
		opts = append(opts, jetstream.IgnoreDeletes())
	}
	w, err := kv.WatchAll(wctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("read catalogue: %w", err)
	}
	// Entries are collected first and decoded once all are in: decoding in
	// the receive loop would hold up the watcher's flow control.
	pending := make(map[string]jetstream.KeyValueEntry)
	for {
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, nil, fmt.Errorf("read catalogue: %w", ctx.Err())
		case kve, ok := <-w.Updates():
			if !ok {
				return nil, nil, errors.New("read catalogue: watcher closed")
			}
			if kve == nil {
				keys := make([]string, 0, len(pending))
				raw := make([][]byte, 0, len(pending))
				for k, e := range pending {
					keys = append(keys, k)
					raw = append(raw, e.Value())
				}
				for i, e := range decodeAll(raw, func(i int) string { return toolNameOf(keys[i]) }, log) {
					if e != nil {
						entries[keys[i]] = e
					} else {
						delete(entries, keys[i])
					}
				}
				return entries, w, nil
			}
			if kve.Operation() == jetstream.KeyValuePut {
				pending[kve.Key()] = kve
			} else {
				delete(pending, kve.Key())
				delete(entries, kve.Key())
			}
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

// decodeAll decodes entries on every core. An entry that does not decode is
// reported, under the name what gives it, and left nil.
func decodeAll(raw [][]byte, what func(int) string, log *slog.Logger) []*Entry {
	out := make([]*Entry, len(raw))
	workers := min(runtime.GOMAXPROCS(0), len(raw)/256+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(raw); i += workers {
				t, err := events.DecodeTool(raw[i])
				if err != nil {
					log.Warn("skipping a catalogue entry that does not decode", "entry", what(i), "err", err)
					continue
				}
				out[i] = NewEntry(t)
			}
		})
	}
	wg.Wait()
	return out
}

func toolNameOf(key string) string {
	name, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return key
	}
	return string(name)
}

func apply(entries map[string]*Entry, kve jetstream.KeyValueEntry, log *slog.Logger) {
	if kve.Operation() != jetstream.KeyValuePut {
		delete(entries, kve.Key())
		return
	}
	t, err := events.DecodeTool(kve.Value())
	if err != nil {
		log.Warn("skipping a catalogue entry that does not decode", "entry", toolNameOf(kve.Key()), "revision", kve.Revision(), "err", err)
		delete(entries, kve.Key())
		return
	}
	entries[kve.Key()] = NewEntry(t)
}

// Replica is a catalogue kept up to date from the bus: it reads the whole
// bucket once, then follows every change. Close stops it.
type Replica struct {
	log     *slog.Logger
	watcher jetstream.KeyWatcher
	stop    context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	entries map[string]*Entry
	snaps   Snapshots
	changed chan struct{} // closed at the next change, then replaced
}

// Follow starts a Replica of the catalogue on the bus, creating the bucket
// if no registry has yet. It returns once the whole catalogue is read.
func Follow(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Replica, error) {
	kv, err := EnsureBucket(ctx, js)
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(context.Background())
	entries, w, err := start(ctx, wctx, js, kv, log, true)
	if err != nil {
		stop()
		return nil, err
	}
	r := &Replica{log: log, watcher: w, stop: stop, done: make(chan struct{}), entries: entries, changed: make(chan struct{})}
	go r.follow()
	return r, nil
}

func (r *Replica) follow() {
	defer close(r.done)
	for kve := range r.watcher.Updates() {
		if kve == nil {
			continue
		}
		r.mu.Lock()
		apply(r.entries, kve, r.log)
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
func (r *Replica) Catalog() *Catalog { return r.snaps.Get(&r.mu, r.entries) }

// Close stops following and waits for the follower goroutine to end.
func (r *Replica) Close() error {
	err := r.watcher.Stop()
	r.stop()
	<-r.done
	return err
}
