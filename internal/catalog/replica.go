package catalog

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

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
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read catalogue: %w", err)
	}
	defer w.Stop()
	// Without deletes, the watcher delivers each live key once. Entries
	// are collected first and decoded afterwards: decoding in the receive
	// loop would hold up the watcher's flow control and stall the transfer.
	var raw []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read catalogue: %w", ctx.Err())
		case kve, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("read catalogue: watcher closed")
			}
			if kve == nil {
				return New(slices.DeleteFunc(decodeAll(raw, log), func(e *Entry) bool { return e == nil })), nil
			}
			raw = append(raw, kve)
		}
	}
}

// decodeAll decodes entries on every core. An entry that does not decode is
// reported and left nil.
func decodeAll(raw []jetstream.KeyValueEntry, log *slog.Logger) []*Entry {
	out := make([]*Entry, len(raw))
	workers := min(runtime.GOMAXPROCS(0), len(raw)/256+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(raw); i += workers {
				out[i] = decodeEntry(raw[i], log)
			}
		})
	}
	wg.Wait()
	return out
}

// readInitial collects the entries a new watcher delivers before its nil
// marker, keyed by KV key, and decodes them once all are in.
func readInitial(ctx context.Context, w jetstream.KeyWatcher, log *slog.Logger) (map[string]*Entry, error) {
	raw := make(map[string]jetstream.KeyValueEntry)
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read catalogue: %w", ctx.Err())
		case kve, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("read catalogue: watcher closed")
			}
			if kve == nil {
				list := make([]jetstream.KeyValueEntry, 0, len(raw))
				for _, e := range raw {
					list = append(list, e)
				}
				entries := make(map[string]*Entry, len(list))
				for i, e := range decodeAll(list, log) {
					if e != nil {
						entries[list[i].Key()] = e
					}
				}
				return entries, nil
			}
			if kve.Operation() == jetstream.KeyValuePut {
				raw[kve.Key()] = kve
			} else {
				delete(raw, kve.Key())
			}
		}
	}
}

func apply(entries map[string]*Entry, kve jetstream.KeyValueEntry, log *slog.Logger) {
	if kve.Operation() != jetstream.KeyValuePut {
		delete(entries, kve.Key())
		return
	}
	if e := decodeEntry(kve, log); e != nil {
		entries[kve.Key()] = e
	} else {
		delete(entries, kve.Key())
	}
}

// decodeEntry decodes one bucket entry, or reports it and returns nil.
func decodeEntry(kve jetstream.KeyValueEntry, log *slog.Logger) *Entry {
	t, err := events.DecodeTool(kve.Value())
	if err != nil {
		name, _ := base64.RawURLEncoding.DecodeString(kve.Key())
		log.Warn("skipping a catalogue entry that does not decode", "tool", string(name), "revision", kve.Revision(), "err", err)
		return nil
	}
	return NewEntry(t)
}

// Replica is a catalogue kept up to date from the bus: it reads the whole
// bucket once, then follows every change. Close stops it.
type Replica struct {
	log     *slog.Logger
	watcher jetstream.KeyWatcher
	done    chan struct{}

	mu      sync.Mutex
	entries map[string]*Entry
	snap    atomic.Pointer[Catalog] // nil after a change, rebuilt on demand
	changed chan struct{}           // closed and replaced on every change
}

// Follow starts a Replica of the catalogue on the bus, creating the bucket
// if no registry has yet. It returns once the whole catalogue is read.
func Follow(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Replica, error) {
	kv, err := EnsureBucket(ctx, js)
	if err != nil {
		return nil, err
	}
	// The watcher outlives ctx, which only bounds the initial read.
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return nil, fmt.Errorf("follow catalogue: %w", err)
	}
	entries, err := readInitial(ctx, w, log)
	if err != nil {
		w.Stop()
		return nil, err
	}
	r := &Replica{log: log, watcher: w, done: make(chan struct{}), entries: entries, changed: make(chan struct{})}
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
		r.snap.Store(nil)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// Catalog is the current snapshot.
func (r *Replica) Catalog() *Catalog {
	if c := r.snap.Load(); c != nil {
		return c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.snap.Load(); c != nil {
		return c
	}
	list := make([]*Entry, 0, len(r.entries))
	for _, e := range r.entries {
		list = append(list, e)
	}
	c := New(list)
	r.snap.Store(c)
	return c
}

// Changed returns a channel closed at the next change after the call.
func (r *Replica) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Close stops following and waits for the follower goroutine to end.
func (r *Replica) Close() error {
	err := r.watcher.Stop()
	<-r.done
	return err
}
