package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// OpenAllowlistBucket opens the allowlist bucket, and creates it if it is
// missing. An existing bucket is only looked up: a reader of it (the
// console, an approver in a fleet with identities) may not change it.
func OpenAllowlistBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	return bus.OpenKeyValue(ctx, js, allowlistConfig)
}

// AwaitAllowlistBucket opens the allowlist bucket once an executor has
// made it: for a part whose identity may read the bucket but not make
// it (an approver in a fleet with identities), which starts before the
// executors do. It waits as long as ctx lets it.
func AwaitAllowlistBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	for {
		kv, err := js.KeyValue(ctx, events.AllowlistBucket)
		if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) && !bus.Transient(err) {
			return kv, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no executor has made the allowlist bucket yet: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// allowlistConfig is the allowlist bucket's; executors make or update it.
// Its changes are republished for readers that may not make a consumer
// of it (bus.Watch): an approver's console, in a fleet with identities.
var allowlistConfig = jetstream.KeyValueConfig{
	Bucket:      events.AllowlistBucket,
	Description: "toolbus allowlist: approvals remembered fleet-wide",
	History:     5,
	Storage:     jetstream.FileStorage,
	RePublish:   &jetstream.RePublish{Source: "$KV." + events.AllowlistBucket + ".>", Destination: events.AllowlistLiveSubject + ".>"},
}

// allowlist follows the bucket, so every executor of the fleet sees an
// approval as soon as one remembers it, and after any restart.
type allowlist struct {
	kv   jetstream.KeyValue
	w    jetstream.KeyWatcher
	stop context.CancelFunc
	log  *slog.Logger

	mu      sync.RWMutex
	records map[string]events.AllowRecord
	gen     atomic.Uint64 // changes with every record added or removed
	done    chan struct{}
}

func openAllowlist(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*allowlist, error) {
	kv, err := bus.EnsureKeyValue(ctx, js, allowlistConfig)
	if err != nil {
		return nil, fmt.Errorf("allowlist: %w", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		stop()
		return nil, fmt.Errorf("allowlist: %w", err)
	}
	a := &allowlist{kv: kv, w: w, stop: stop, log: log, records: make(map[string]events.AllowRecord), done: make(chan struct{})}
	// Read what is there before taking calls.
	for {
		select {
		case <-ctx.Done():
			w.Stop()
			stop()
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				stop()
				return nil, fmt.Errorf("allowlist: watcher closed")
			}
			if e == nil {
				go a.follow()
				return a, nil
			}
			a.apply(e)
		}
	}
}

func (a *allowlist) follow() {
	defer close(a.done)
	for e := range a.w.Updates() {
		if e != nil {
			a.apply(e)
		}
	}
}

func (a *allowlist) apply(e jetstream.KeyValueEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.gen.Add(1)
	if e.Operation() != jetstream.KeyValuePut {
		delete(a.records, e.Key())
		return
	}
	var r events.AllowRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		a.log.Warn("ignoring an allowlist record that does not decode", "key", e.Key(), "err", err)
		delete(a.records, e.Key())
		return
	}
	if r.Scope == "command" && len(r.Argv) == 0 {
		// A record from before argv: its prefix is read as the words of
		// a command's start, which the policy lets cover only commands
		// harmless with any arguments.
		r.Argv = strings.Fields(r.Prefix)
	}
	a.records[e.Key()] = r
}

func (a *allowlist) close() {
	a.w.Stop()
	a.stop()
	<-a.done
}

// entriesFor returns the records that may apply to a call of the tool
// named name: those of the tool, and those of its MCP server.
func (a *allowlist) entriesFor(name string, source events.Source, server string) []policy.AllowEntry {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []policy.AllowEntry
	for _, r := range a.records {
		if r.Tool == name || (r.Scope == "server" && source == events.SourceMCP && r.Server == server) {
			out = append(out, r.AllowEntry)
		}
	}
	slices.SortFunc(out, func(x, y policy.AllowEntry) int { return compareEntries(x, y) })
	return out
}

func compareEntries(x, y policy.AllowEntry) int {
	for _, p := range [][2]string{{x.Scope, y.Scope}, {x.Tool, y.Tool}, {x.Server, y.Server}, {strings.Join(x.Argv, "\x00"), strings.Join(y.Argv, "\x00")},
		{strconv.FormatBool(x.Exact), strconv.FormatBool(y.Exact)}, {x.Path, y.Path}} {
		if p[0] != p[1] {
			if p[0] < p[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// add remembers records; the bucket keeps them across restarts.
func (a *allowlist) add(ctx context.Context, records []events.AllowRecord) error {
	for _, r := range records {
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := a.kv.Put(ctx, r.Key(), data); err != nil {
			return fmt.Errorf("allowlist: %w", err)
		}
		a.apply(putEntry{key: r.Key(), value: data})
	}
	return nil
}

// putEntry lets add apply its own write at once, before the watcher
// delivers it, so the next call already sees it.
type putEntry struct {
	jetstream.KeyValueEntry
	key   string
	value []byte
}

func (p putEntry) Key() string                     { return p.key }
func (p putEntry) Value() []byte                   { return p.value }
func (p putEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
