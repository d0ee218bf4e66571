package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
)

const stateKey = "state"

// store keeps the catalogue and the registry state in KV buckets on the bus.
type store struct {
	js      jetstream.JetStream
	catalog jetstream.KeyValue
	state   jetstream.KeyValue
	// lastSeq is the catalogue bucket's revision after the last save.
	// The registry is the bucket's only writer, so the bucket then holds
	// exactly the registry's catalogue.
	lastSeq uint64
}

func openStore(ctx context.Context, js jetstream.JetStream) (*store, error) {
	cat, err := catalog.EnsureBucket(ctx, js)
	if err != nil {
		return nil, err
	}
	st, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
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
	cat, err := catalog.Load(ctx, s.js, log)
	if err != nil {
		return nil, st, err
	}
	e, err := s.state.Get(ctx, stateKey)
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
	status, err := s.catalog.Status(ctx)
	if err != nil {
		return nil, st, fmt.Errorf("catalogue bucket: %w", err)
	}
	s.lastSeq = status.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	return cat.All(), st, nil
}

// inFlight bounds the publishes waiting for their acknowledgement while
// saving. Synchronous publishes from a few goroutines pipeline as well as
// PublishAsync does here, without its per-connection goroutine, which
// nats.go can leave behind when a connection closes right after its first
// asynchronous publish.
const inFlight = 32

// save writes changed entries, deletes removed ones, and writes the state.
func (s *store) save(ctx context.Context, puts []*events.Tool, deletes []string, st *State) error {
	prefix := "$KV." + events.CatalogBucket + "."
	msgs := make([]*nats.Msg, 0, len(puts)+len(deletes))
	for _, t := range puts {
		data, err := events.EncodeTool(t)
		if err != nil {
			return fmt.Errorf("encode %q: %w", t.Name, err)
		}
		msgs = append(msgs, &nats.Msg{Subject: prefix + events.CatalogKey(t.Name), Data: data})
	}
	for _, name := range deletes {
		m := nats.NewMsg(prefix + events.CatalogKey(name))
		m.Header.Set("KV-Operation", "DEL") // the KV protocol's delete marker
		msgs = append(msgs, m)
	}
	var (
		mu   sync.Mutex
		errs []error
		last uint64
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
				ack, err := s.js.PublishMsg(ctx, msgs[i])
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", msgs[i].Subject, err))
				} else {
					last = max(last, ack.Sequence)
				}
				mu.Unlock()
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
	s.lastSeq = max(s.lastSeq, last)
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

// flush writes every change not yet saved. A failure leaves the changes
// marked, so the next flush tries them again.
func (r *Registry) flush(ctx context.Context, s *store) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.dirty) == 0 && !r.stateDirty {
		return nil
	}
	var puts []*events.Tool
	var deletes []string
	for name := range r.dirty {
		if e, ok := r.tools[name]; ok {
			puts = append(puts, e.Tool())
		} else {
			deletes = append(deletes, name)
		}
	}
	var st *State
	if r.stateDirty {
		c := r.state
		st = &c
	}
	if err := s.save(ctx, puts, deletes, st); err != nil {
		return err
	}
	clear(r.dirty)
	r.stateDirty = false
	return nil
}

// saved returns the catalogue as the bucket holds it at revision rev, or
// ok=false while changes are not yet saved.
func (r *Registry) saved(s *store) (tools []*events.Tool, rev uint64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.dirty) > 0 {
		return nil, 0, false
	}
	tools = make([]*events.Tool, 0, len(r.tools))
	for _, e := range r.tools {
		tools = append(tools, e.Tool())
	}
	return tools, s.lastSeq, true
}
