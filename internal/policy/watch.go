package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// Watcher keeps an executor's policy current: it follows what the fleet
// enforces (the policy bucket's active key) and, when given one, a policy
// directory, compiling each new revision once. The latest change wins. A
// revision that is not signed by a trusted key, fails to compile or whose
// tests fail is rejected: the policy in force stays, and the rejection
// is reported.
type Watcher struct {
	apply   func(*Enforced)
	shadow  func(*Policy)
	report  func(status, revision, source string, err error)
	log     *slog.Logger
	dir     string
	signers *Signers
	kv      jetstream.KeyValue

	mu sync.Mutex
	// own is the host's policy (its directory's, else the one it
	// started with): what a rollout with no stable revision means.
	own     *Policy
	current *Enforced
	// rejected is the last set offered that did not load, until a later
	// one does (Health).
	rejected *rejection

	stop chan struct{}
	wg   sync.WaitGroup
	w    jetstream.KeyWatcher
}

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// Dir is a policy directory to follow; empty for none.
	Dir string
	// Own is the policy in force when watching starts: the host's own.
	Own *Policy
	// Apply puts what is to be enforced in force.
	Apply func(*Enforced)
	// Shadow, when set, is given the candidate in shadow (a signed
	// revision to evaluate beside the policy in force, enforcing
	// nothing), and nil when the shadow ends.
	Shadow func(*Policy)
	// Report is told of every applied or rejected revision.
	Report func(status, revision, source string, err error)
	// Signers are the keys a pushed revision must be signed by to be
	// enforced (sign.go). Without them, no pushed revision is: a set in
	// Dir, the host's own files, is not held to them.
	Signers *Signers
	Logger  *slog.Logger
	// PollEvery is how often Dir is checked; default 250 ms.
	PollEvery time.Duration
}

// ErrNoTrustList is why a host with no list of signers enforces no
// pushed policy.
var ErrNoTrustList = errors.New("this host has no list of policy signers (--policy-signers, or policy-signers beside its identity): it enforces no pushed policy")

// Watch starts following. What the fleet enforces, if anything was
// pushed, is applied before Watch returns. Stop the Watcher with Stop.
func Watch(ctx context.Context, js jetstream.JetStream, cfg WatchConfig) (*Watcher, error) {
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Own == nil {
		return nil, errors.New("policy: watch needs the host's own policy")
	}
	w := &Watcher{apply: cfg.Apply, shadow: cfg.Shadow, report: cfg.Report, log: cfg.Logger, dir: cfg.Dir, signers: cfg.Signers,
		own: cfg.Own, current: Only(cfg.Own), stop: make(chan struct{})}
	kv, err := Bucket(ctx, js)
	if err != nil {
		return nil, err
	}
	w.kv = kv
	// By direct get and the republished changes, not a consumer: the
	// facade of an agent follows it too (bus.Watch).
	watcher, err := bus.Watch(ctx, js, events.PolicyBucket, events.PolicyLiveSubject, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	w.w = watcher
	// What is in the bucket comes first, then the nil marker.
	var active, shadow jetstream.KeyValueEntry
	for initial := true; initial; {
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, ctx.Err()
		case e := <-watcher.Updates():
			switch {
			case e == nil:
				initial = false
			case e.Key() == activeKey:
				active = e
			case e.Key() == shadowKey:
				shadow = e
			}
		}
	}
	if active != nil && !w.fromBucket(ctx, active) {
		// What the fleet enforces was refused here; the rest of the
		// fleet may run it, or an older one: this host joins the newest
		// it can enforce.
		w.fromHistory(ctx)
	}
	if shadow != nil {
		w.fromShadow(ctx, shadow)
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
	w.wg.Wait()
}

// rejection is a policy set that did not load.
type rejection struct {
	revision, source string
	err              error
}

// Health reports that the last policy offered (pushed to the fleet, or
// saved in the followed directory) did not load, and the policy in force
// is an older one; nil once a later one has loaded.
func (w *Watcher) Health() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.rejected; r != nil {
		set := "the policy set"
		if r.revision != "" {
			set = "policy " + r.revision
		}
		return fmt.Errorf("%s from %s did not load (%v); %s stays in force", set, r.source, r.err, w.current.Revisions())
	}
	return nil
}

// Current is the revision in force for every call outside a rollout's
// share.
func (w *Watcher) Current() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current.Stable.Revision()
}

// Enforced is what is in force.
func (w *Watcher) Enforced() *Enforced {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

func (w *Watcher) followBucket() {
	defer w.wg.Done()
	for e := range w.w.Updates() {
		switch {
		case e == nil:
		case e.Key() == activeKey:
			w.fromBucket(context.Background(), e)
		case e.Key() == shadowKey:
			w.fromShadow(context.Background(), e)
		}
	}
}

// fromShadow gives the candidate in shadow of a shadow key's entry to
// the host, or nil when the shadow ended. A candidate that is not
// signed by a trusted key, or does not compile, is rejected: evaluating
// it on every call would run code no trusted key vouched for.
func (w *Watcher) fromShadow(ctx context.Context, e jetstream.KeyValueEntry) {
	if w.shadow == nil {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		w.shadow(nil)
		w.log.Info("the shadow ended")
		return
	}
	s, err := decodeShadow(e.Value())
	if err != nil {
		w.shadow(nil)
		w.rejectShadow("", err)
		return
	}
	p, err := w.load(ctx, s.Revision)
	if err != nil {
		w.shadow(nil)
		w.rejectShadow(s.Revision, err)
		return
	}
	w.shadow(p)
	w.log.Info("policy in shadow", "revision", s.Revision)
	if w.report != nil {
		w.report("shadowed", s.Revision, "shadow", nil)
	}
}

// fromBucket enforces the rollout of an active key's entry, and says
// whether it could.
func (w *Watcher) fromBucket(ctx context.Context, e jetstream.KeyValueEntry) bool {
	if e.Operation() != jetstream.KeyValuePut {
		return true
	}
	r, err := decodeActive(e.Value())
	if err != nil {
		w.reject("", "bucket", err)
		return false
	}
	return w.enforce(ctx, r)
}

// enforce resolves a rollout's revisions, and puts them in force; or
// rejects it, and keeps what is in force.
func (w *Watcher) enforce(ctx context.Context, r *Rollout) bool {
	en, failed, err := w.resolve(ctx, r)
	if err != nil {
		w.reject(failed, "bucket", err)
		return false
	}
	w.put(en, "bucket", nil)
	return true
}

// resolve loads a rollout's revisions. When one does not load, it says
// which and why, with what could be had: the stable revision alone when
// the rollout's own failed, nil when the stable one did.
func (w *Watcher) resolve(ctx context.Context, r *Rollout) (en *Enforced, failed string, err error) {
	stable, err := w.load(ctx, r.Stable)
	if err != nil {
		return nil, r.Stable, err
	}
	if r.Next == "" {
		return Only(stable), "", nil
	}
	next, err := w.load(ctx, r.Next)
	if err != nil {
		return Only(stable), r.Next, err
	}
	return &Enforced{Stable: stable, Next: next, Share: r.Share}, "", nil
}

// load is the compiled policy of a pushed revision, "" for the host's
// own, once its signature is checked.
func (w *Watcher) load(ctx context.Context, revision string) (*Policy, error) {
	w.mu.Lock()
	cur, own := w.current, w.own
	w.mu.Unlock()
	switch {
	case revision == "":
		return own, nil
	case w.signers == nil:
		return nil, ErrNoTrustList
	}
	pushed, err := Revision(ctx, w.kv, revision)
	if err != nil {
		return nil, err
	}
	if err := w.signers.VerifyAny(pushed.Files, pushed.Signatures); err != nil {
		return nil, err
	}
	// A revision in force is not compiled again (a rollout widened).
	for _, p := range []*Policy{cur.Stable, cur.Next} {
		if p != nil && p.Revision() == revision {
			return p, nil
		}
	}
	return Compile(ctx, pushed.Files)
}

// put puts en in force, and reports the revisions it brings; rejected is
// what is still refused (nil once en is what was offered).
func (w *Watcher) put(en *Enforced, source string, rejected *rejection) {
	w.mu.Lock()
	before := w.current
	w.current, w.rejected = en, rejected
	w.mu.Unlock()
	w.apply(en)
	for _, p := range []*Policy{en.Stable, en.Next} {
		if p == nil || p == before.Stable || p == before.Next {
			continue
		}
		w.log.Info("policy applied", "revision", p.Revision(), "source", source, "enforced", en.Revisions())
		if w.report != nil {
			w.report("applied", p.Revision(), source, nil)
		}
	}
}

// fromHistory enforces the newest rollout in the active key's history
// that this host can.
func (w *Watcher) fromHistory(ctx context.Context) {
	history, err := w.kv.History(ctx, activeKey)
	if err != nil {
		return
	}
	for i := len(history) - 2; i >= 0; i-- {
		if history[i].Operation() != jetstream.KeyValuePut {
			continue
		}
		r, err := decodeActive(history[i].Value())
		if err != nil {
			continue
		}
		en, _, _ := w.resolve(ctx, r)
		if en == nil {
			continue
		}
		// What the fleet enforces now still did not load here.
		w.mu.Lock()
		rejected := w.rejected
		w.mu.Unlock()
		w.put(en, "bucket", rejected)
		w.log.Info("policy applied from the bucket's history", "enforced", en.Revisions())
		return
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

// try compiles a directory's files and puts them in force for every
// call, or rejects them and keeps the policy in force.
func (w *Watcher) try(ctx context.Context, files Files, source string) {
	rev := files.Revision()
	w.mu.Lock()
	same := w.current.Next == nil && rev == w.current.Stable.Revision()
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
	w.own = p
	w.mu.Unlock()
	w.put(Only(p), source, nil)
}

// rejectShadow reports a candidate in shadow this host will not
// evaluate. The policy in force is not touched, and the host stays ready.
func (w *Watcher) rejectShadow(rev string, err error) {
	w.log.Error("the candidate in shadow is rejected; none is evaluated", "revision", rev, "err", err)
	if w.report != nil {
		w.report("rejected", rev, "shadow", err)
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
