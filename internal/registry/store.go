package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
)

const stateKey = "state"

// store keeps the catalogue, in shards (catalog.NumShards), and the
// registry state in KV buckets on the bus.
type store struct {
	js      jetstream.JetStream
	catalog jetstream.KeyValue
	state   jetstream.KeyValue
}

func openStore(ctx context.Context, js jetstream.JetStream) (*store, error) {
	cat, err := catalog.EnsureBucket(ctx, js)
	if err != nil {
		return nil, err
	}
	st, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      events.RegistryStateBucket,
		Description: "toolbus registry state: sequence counter and run-time toggles",
		History:     5,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("registry state bucket: %w", err)
	}
	return &store{js: js, catalog: cat, state: st}, nil
}

// load reads what an earlier registry left on the bus.
func (s *store) load(ctx context.Context, log *slog.Logger) ([]*events.Tool, State, error) {
	var st State
	// A bucket just made in a cluster answers once its copies are
	// placed: until then a read finds no responder, which is tried again.
	var cat *catalog.Catalog
	err := bus.RetryWhile(ctx, bus.Transient, func() (err error) {
		cat, err = catalog.Load(ctx, s.js, log)
		return err
	})
	if err != nil {
		return nil, st, err
	}
	var e jetstream.KeyValueEntry
	err = bus.RetryWhile(ctx, bus.Transient, func() (err error) {
		e, err = s.state.Get(ctx, stateKey)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, st, fmt.Errorf("registry state: %w", err)
	default:
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			// Refuse to start rather than forget the toggles silently.
			return nil, st, fmt.Errorf("registry state in %s/%s does not decode: %w", events.RegistryStateBucket, stateKey, err)
		}
	}
	if err := s.dropOldFormat(ctx, log); err != nil {
		return nil, st, err
	}
	return cat.All(), st, nil
}

// dropOldFormat purges the keys of the catalogue bucket that are not
// shards: what an older toolbus kept there, one key per tool, or anything
// another writer put there. Readers ignore such keys; purging them one by
// one leaves the shards, and so the catalogue, as they are. It also
// deletes the older toolbus's snapshot store.
func (s *store) dropOldFormat(ctx context.Context, log *slog.Logger) error {
	lister, err := s.catalog.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("catalogue bucket: %w", err)
	}
	var stray []string
	for key := range lister.Keys() {
		if !catalog.IsShardKey(key) {
			stray = append(stray, key)
		}
	}
	if len(stray) > 0 {
		log.Info("purging catalogue keys that are not shards (an older format, or another writer)", "keys", len(stray))
	}
	for _, key := range stray {
		if err := s.catalog.Purge(ctx, key); err != nil {
			return fmt.Errorf("catalogue bucket: purge %s: %w", key, err)
		}
	}
	if err := s.js.DeleteObjectStore(ctx, oldSnapshotStore); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("delete the old catalogue snapshot store: %w", err)
	}
	return nil
}

// oldSnapshotStore is the object store where an older toolbus cached the
// catalogue.
const oldSnapshotStore = "TOOLBUS_CATALOG_SNAPSHOT"

// inFlight bounds the publishes waiting for their acknowledgement while
// saving. Synchronous publishes from a few goroutines pipeline as well as
// PublishAsync does here, without its per-connection goroutine, which
// nats.go can leave behind when a connection closes right after its first
// asynchronous publish.
const inFlight = 32

// save writes the shards given (a nil value deletes the shard) and the
// state.
func (s *store) save(ctx context.Context, shards map[string][]byte, st *State) error {
	prefix := "$KV." + events.CatalogBucket + "."
	msgs := make([]*nats.Msg, 0, len(shards))
	for key, data := range shards {
		m := nats.NewMsg(prefix + key)
		if data == nil {
			m.Header.Set("KV-Operation", "DEL") // the KV protocol's delete marker
		} else {
			m.Data = data
		}
		msgs = append(msgs, m)
	}
	var (
		mu   sync.Mutex
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(inFlight, len(msgs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) || ctx.Err() != nil {
					return
				}
				if _, err := s.js.PublishMsg(ctx, msgs[i]); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s (%d bytes): %w", msgs[i].Subject, len(msgs[i].Data), err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if st != nil {
		data, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if _, err := s.state.Put(ctx, stateKey, data); err != nil {
			return fmt.Errorf("registry state: %w", err)
		}
	}
	return nil
}

// flush writes every shard with a change not yet saved. A failure leaves
// the changes marked, so the next flush tries them again.
func (r *Registry) flush(ctx context.Context, s *store) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.dirty) == 0 && !r.stateDirty {
		return nil
	}
	shards, err := r.dirtyShards()
	if err != nil {
		return err
	}
	var st *State
	if r.stateDirty {
		c := r.state
		st = &c
	}
	if err := s.save(ctx, shards, st); err != nil {
		return err
	}
	for name := range r.dirty {
		if key, ok := r.shardOf[name]; ok {
			r.savedIn[name] = key
		} else {
			delete(r.savedIn, name)
		}
	}
	clear(r.dirty)
	r.stateDirty = false
	return nil
}

// dirtyShards builds the value of every shard with a changed name, where
// it is now and where the bucket has it: the shard's tools' entries
// (r.lines, encoded once per version of a tool by encodeMissing), sorted
// by name; nil for a shard
// left empty. The caller holds mu.
func (r *Registry) dirtyShards() (map[string][]byte, error) {
	members := make(map[string][]string)
	for name := range r.dirty {
		if key, ok := r.savedIn[name]; ok {
			members[key] = nil
		}
		if key, ok := r.shardOf[name]; ok {
			members[key] = nil
		}
	}
	for name, key := range r.shardOf {
		if names, ok := members[key]; ok {
			members[key] = append(names, name)
		}
	}
	if err := r.encodeMissing(members); err != nil {
		return nil, err
	}
	shards := make(map[string][]byte, len(members))
	for key, names := range members {
		if len(names) == 0 {
			shards[key] = nil
			continue
		}
		slices.Sort(names)
		lines := make([][]byte, len(names))
		size := 0
		for i, name := range names {
			lines[i] = r.lines[name]
			size += len(lines[i]) + 1
		}
		shards[key] = catalog.AppendShard(make([]byte, 0, size), lines)
	}
	return shards, nil
}

// encodeMissing encodes, on every core, the entries of members's tools
// that changed since they were last encoded. The caller holds mu.
func (r *Registry) encodeMissing(members map[string][]string) error {
	var todo []string
	for _, names := range members {
		for _, name := range names {
			if _, ok := r.lines[name]; !ok {
				todo = append(todo, name)
			}
		}
	}
	lines := make([][]byte, len(todo))
	errs := make([]error, len(todo))
	workers := min(runtime.GOMAXPROCS(0), len(todo)/256+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(todo); i += workers {
				lines[i], errs[i] = events.EncodeTool(r.tools[todo[i]].Tool())
			}
		})
	}
	wg.Wait()
	for i, name := range todo {
		if errs[i] != nil {
			return fmt.Errorf("encode %q: %w", name, errs[i])
		}
		r.lines[name] = lines[i]
	}
	return nil
}
