package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// allowEntry is one remembered approval as the console shows it.
type allowEntry struct {
	Key string `json:"key"`
	events.AllowRecord
	rev uint64 // the bucket's revision of the entry
}

// allowWatch follows the allowlist bucket, so the page shows an approval
// as soon as any executor remembers it and drops it when anyone revokes it.
type allowWatch struct {
	w    jetstream.KeyWatcher
	done chan struct{}

	mu      sync.Mutex
	records map[string]allowEntry
	changed chan struct{}
}

// watchAllowlist reads the bucket by direct get and follows the changes
// it republishes (bus.Watch): the console's approver may live in an
// account of its own, where it may not make a consumer of the bucket.
func watchAllowlist(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, log *slog.Logger) (*allowWatch, error) {
	w, err := bus.Watch(ctx, js, kv.Bucket(), events.AllowlistLiveSubject, log)
	if err != nil {
		return nil, fmt.Errorf("console: follow the allowlist: %w", err)
	}
	a := &allowWatch{w: w, done: make(chan struct{}), records: map[string]allowEntry{}, changed: make(chan struct{})}
	// The initial values end with a nil entry; reading them first means
	// the first page shows the whole list.
	for initial := true; initial; {
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				w.Stop()
				return nil, fmt.Errorf("console: the allowlist watch ended at start")
			}
			if e == nil {
				initial = false
				continue
			}
			a.apply(e, log)
		}
	}
	go a.follow(log)
	return a, nil
}

func (a *allowWatch) follow(log *slog.Logger) {
	defer close(a.done)
	for e := range a.w.Updates() {
		if e != nil {
			a.apply(e, log)
		}
	}
}

func (a *allowWatch) apply(e jetstream.KeyValueEntry, log *slog.Logger) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch e.Operation() {
	case jetstream.KeyValuePut:
		var r events.AllowRecord
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			log.Warn("console: an allowlist record does not decode", "key", e.Key(), "err", err)
			return
		}
		a.records[e.Key()] = allowEntry{Key: e.Key(), AllowRecord: r, rev: e.Revision()}
	default: // delete, purge
		delete(a.records, e.Key())
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// snapshot returns the records, oldest first, and a channel closed at the
// next change.
func (a *allowWatch) snapshot() ([]allowEntry, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]allowEntry, 0, len(a.records))
	for _, r := range a.records {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y allowEntry) int {
		if c := x.AddedAt.Compare(y.AddedAt); c != 0 {
			return c
		}
		return cmp.Compare(x.Key, y.Key)
	})
	return out, a.changed
}

func (a *allowWatch) stop() {
	a.w.Stop()
	<-a.done
}
