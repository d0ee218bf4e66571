package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// activeKey is the policy bucket's one key: the pushed policy set.
const activeKey = "active"

// Pushed is a policy set as the bucket holds it.
type Pushed struct {
	Revision string    `json:"revision"`
	Files    Files     `json:"files"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	// Signature is the pusher's of Files (sign.go); nil on a set pushed
	// unsigned.
	Signature *Signature `json:"signature,omitempty"`
}

// bucketConfig is the policy bucket's config. Its changes are
// republished (events.PolicyLiveSubject) for those that follow it without
// a consumer (bus.Watch).
var bucketConfig = jetstream.KeyValueConfig{
	Bucket:      events.PolicyBucket,
	Description: "toolbus policy: the set pushed to the fleet, with its history",
	History:     16,
	Storage:     jetstream.FileStorage,
	RePublish:   &jetstream.RePublish{Source: "$KV." + events.PolicyBucket + ".>", Destination: events.PolicyLiveSubject + ".>"},
}

// Bucket opens the policy bucket, and creates it if it is missing.
func Bucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := bus.OpenKeyValue(ctx, js, bucketConfig)
	if err != nil {
		return nil, fmt.Errorf("policy bucket: %w", err)
	}
	return kv, nil
}

// EnsureBucket makes the policy bucket, or brings one made before to its
// config (the republishing of its changes): an executor does at start.
func EnsureBucket(ctx context.Context, js jetstream.JetStream) error {
	if _, err := bus.EnsureKeyValue(ctx, js, bucketConfig); err != nil {
		return fmt.Errorf("policy bucket: %w", err)
	}
	return nil
}

// ActiveSubject is the subject a push publishes the active set on: the
// bus lets only admins publish it.
func ActiveSubject() string { return "$KV." + events.PolicyBucket + "." + activeKey }

// Push compiles files and runs their Rego tests, and only if both pass
// publishes them to every executor of the fleet. The error of a refused
// set goes back to the caller; nothing is published.
//
// key, when it is not nil, signs the set (the pusher's nkey): executors
// that hold a list of signers enforce only a set one of them signed.
func Push(ctx context.Context, js jetstream.JetStream, files Files, by string, key nkeys.KeyPair) (*Pushed, error) {
	p, err := Compile(ctx, files)
	if err != nil {
		return nil, err
	}
	var sig *Signature
	if key != nil {
		if sig, err = Sign(files, key); err != nil {
			return nil, err
		}
	}
	kv, err := Bucket(ctx, js)
	if err != nil {
		return nil, err
	}
	pushed := &Pushed{Revision: p.Revision(), Files: files, By: by, At: time.Now().UTC(), Signature: sig}
	data, err := json.Marshal(pushed)
	if err != nil {
		return nil, err
	}
	if _, err := kv.Put(ctx, activeKey, data); err != nil {
		return nil, fmt.Errorf("push policy: %w", err)
	}
	return pushed, nil
}

// Active returns the pushed policy set, or nil when none was pushed.
func Active(ctx context.Context, js jetstream.JetStream) (*Pushed, error) {
	kv, err := js.KeyValue(ctx, events.PolicyBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, activeKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p Pushed
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, fmt.Errorf("the pushed policy does not decode: %w", err)
	}
	return &p, nil
}

// Watcher keeps an executor's policy current: it follows the policy bucket
// and, when given one, a policy directory, compiling each new set once.
// The latest change wins. A set that fails to compile or whose tests fail
// is rejected: the policy in force stays, and the rejection is reported.
type Watcher struct {
	apply  func(*Policy)
	report func(status, revision, source string, err error)
	log    *slog.Logger
	dir    string
	// signers hold pushed sets to their signatures (WatchConfig.Signers).
	signers *Signers

	mu      sync.Mutex
	current string // revision in force
	// rejected is the last set offered that did not load, until a later
	// one does (Health).
	rejected *rejection

	stop chan struct{}
	wg   sync.WaitGroup
	w    jetstream.KeyWatcher
	end  context.CancelFunc
}

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// Dir is a policy directory to follow; empty for none.
	Dir string
	// Current is the revision in force when watching starts.
	Current string
	// Apply puts a compiled policy in force.
	Apply func(*Policy)
	// Report is told of every applied or rejected set.
	Report func(status, revision, source string, err error)
	// Signers, when set, are the keys a pushed set must be signed by to
	// be enforced (sign.go); a set in Dir, the host's own files, is not
	// held to them.
	Signers *Signers
	Logger  *slog.Logger
	// PollEvery is how often Dir is checked; default 250 ms.
	PollEvery time.Duration
}

// Watch starts following. A set already pushed to the bucket is applied
// before Watch returns. Stop the Watcher with Stop.
func Watch(ctx context.Context, js jetstream.JetStream, cfg WatchConfig) (*Watcher, error) {
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{apply: cfg.Apply, report: cfg.Report, log: cfg.Logger, dir: cfg.Dir, current: cfg.Current, signers: cfg.Signers, stop: make(chan struct{})}
	kv, err := Bucket(ctx, js)
	if err != nil {
		return nil, err
	}
	end := func() {}
	// By direct get and the republished changes, not a consumer: the
	// facade of an agent follows it too (bus.Watch).
	watcher, err := bus.Watch(ctx, js, events.PolicyBucket, events.PolicyLiveSubject, cfg.Logger)
	if err != nil {
		end()
		return nil, fmt.Errorf("policy: %w", err)
	}
	w.w, w.end = watcher, end
	// The pushed set, if any, comes first, then the nil marker.
	pushed := false
	for initial := true; initial; {
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, ctx.Err()
		case e := <-watcher.Updates():
			if e == nil {
				initial = false
				break
			}
			pushed = true
			w.fromBucket(ctx, e)
		}
	}
	if pushed && w.Current() == cfg.Current {
		// The newest pushed set was refused here; the rest of the fleet
		// runs the newest good one, so this executor joins it.
		w.fromHistory(ctx, kv)
	}
	w.wg.Add(1)
	go w.followBucket()
	if cfg.Dir != "" {
		w.wg.Add(1)
		go w.followDir(cfg.PollEvery)
	}
	return w, nil
}

// Stop ends the watching.
func (w *Watcher) Stop() {
	select {
	case <-w.stop:
		return
	default:
		close(w.stop)
	}
	w.w.Stop()
	w.end()
	w.wg.Wait()
}

// rejection is a policy set that did not load.
type rejection struct {
	revision, source string
	err              error
}

// Health reports that the last policy set offered (pushed to the bucket,
// or saved in the followed directory) did not load, and the policy in
// force is an older one; nil once a later set has loaded.
func (w *Watcher) Health() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.rejected; r != nil {
		set := "the policy set"
		if r.revision != "" {
			set = "policy " + r.revision
		}
		return fmt.Errorf("%s from %s did not load (%v); %s stays in force", set, r.source, r.err, w.current)
	}
	return nil
}

// Current is the revision in force.
func (w *Watcher) Current() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

func (w *Watcher) followBucket() {
	defer w.wg.Done()
	for e := range w.w.Updates() {
		if e != nil {
			w.fromBucket(context.Background(), e)
		}
	}
}

func (w *Watcher) fromBucket(ctx context.Context, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var p Pushed
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		w.reject("", "bucket", fmt.Errorf("the pushed policy does not decode: %w", err))
		return
	}
	if err := w.signed(&p); err != nil {
		w.reject(p.Files.Revision(), "bucket", err)
		return
	}
	w.try(ctx, p.Files, "bucket")
}

// signed says why p may not be enforced here, nil when it may: a Watcher
// given signers enforces only a set one of them signed.
func (w *Watcher) signed(p *Pushed) error {
	if w.signers == nil {
		return nil
	}
	return w.signers.Verify(p.Files, p.Signature)
}

// fromHistory applies the newest pushed set that compiles.
func (w *Watcher) fromHistory(ctx context.Context, kv jetstream.KeyValue) {
	history, err := kv.History(ctx, activeKey)
	if err != nil {
		return
	}
	for i := len(history) - 1; i >= 0; i-- {
		var p Pushed
		if history[i].Operation() != jetstream.KeyValuePut || json.Unmarshal(history[i].Value(), &p) != nil || w.signed(&p) != nil {
			continue
		}
		if compiled, err := Compile(ctx, p.Files); err == nil {
			w.mu.Lock()
			w.current = compiled.Revision()
			w.mu.Unlock()
			w.apply(compiled)
			w.log.Info("policy applied from the bucket's history", "revision", compiled.Revision())
			if w.report != nil {
				w.report("applied", compiled.Revision(), "bucket", nil)
			}
			return
		}
	}
}

func (w *Watcher) followDir(every time.Duration) {
	defer w.wg.Done()
	seen := ""
	if files, err := LoadDir(w.dir); err == nil {
		seen = files.Revision() // what is there at start is already known
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		files, err := LoadDir(w.dir)
		if err != nil {
			continue // a directory in the middle of an edit
		}
		if rev := files.Revision(); rev != seen {
			seen = rev
			w.try(context.Background(), files, w.dir)
		}
	}
}

// try compiles files and applies them, or rejects them and keeps the
// policy in force.
func (w *Watcher) try(ctx context.Context, files Files, source string) {
	rev := files.Revision()
	w.mu.Lock()
	same := rev == w.current
	if same {
		w.rejected = nil // the set offered is the one in force
	}
	w.mu.Unlock()
	if same {
		return
	}
	p, err := Compile(ctx, files)
	if err != nil {
		w.reject(rev, source, err)
		return
	}
	w.mu.Lock()
	w.current, w.rejected = rev, nil
	w.mu.Unlock()
	w.apply(p)
	w.log.Info("policy applied", "revision", rev, "source", source)
	if w.report != nil {
		w.report("applied", rev, source, nil)
	}
}

func (w *Watcher) reject(rev, source string, err error) {
	w.mu.Lock()
	w.rejected = &rejection{revision: rev, source: source, err: err}
	w.mu.Unlock()
	w.log.Error("policy rejected; the policy in force stays", "revision", rev, "source", source, "err", err)
	if w.report != nil {
		w.report("rejected", rev, source, err)
	}
}

// DirFiles reads dir when it is set, else returns def: how a command picks
// its starting policy.
func DirFiles(dir string, def Files) (Files, error) {
	if dir == "" {
		return def, nil
	}
	if _, err := os.Stat(filepath.Clean(dir)); err != nil {
		return nil, fmt.Errorf("policy directory: %w", err)
	}
	return LoadDir(dir)
}
