package policy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// The policy bucket holds the fleet's policy in two kinds of keys:
//
//   - rev.<revision>: every revision ever pushed (Pushed), with its files,
//     pusher, time, message, tests and signature. A revision is written
//     once per push and never deleted: the history, and what a rollback
//     returns to.
//   - active: what the fleet enforces (Rollout): a revision for every
//     call and, during a staged rollout, a second one for a share of the
//     callers. Executors follow this key, and fetch the revisions it
//     names.
//
// A push writes the revision, then points active at it; a rollback points
// active at an older revision. Only admins may write either (the bus's
// permissions), and an executor enforces a revision only when a key on
// its trust list signed it (sign.go).
const (
	activeKey   = "active"
	revisionKey = "rev."
)

// Pushed is a revision as the bucket holds it.
type Pushed struct {
	Revision string    `json:"revision"`
	Files    Files     `json:"files"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	// Message says why, as the pusher wrote it (--message).
	Message string `json:"message,omitempty"`
	// Tests is how many of the set's Rego tests passed at the push.
	Tests int `json:"tests"`
	// Signatures are the pushers' of Files (sign.go): a revision's files
	// never change, and each push of them adds its pusher's signature,
	// so that a push signed by a key executors do not trust cannot take
	// away one they do. None on a set only ever pushed unsigned, which no
	// executor with a trust list enforces.
	Signatures []*Signature `json:"signatures,omitempty"`
	// Signature is this push's, when it was signed (not stored: see
	// Signatures).
	Signature *Signature `json:"-"`
}

// Rollout is what the fleet enforces (the bucket's active key).
type Rollout struct {
	// Stable is the revision every call not in Share is decided by;
	// empty for the executors' own policy (their --policy, else the
	// built-in one).
	Stable string `json:"stable"`
	// Next is the revision being rolled out, to the calls in Share.
	Next  string    `json:"next,omitempty"`
	Share Share     `json:"share,omitzero"`
	By    string    `json:"by"`
	At    time.Time `json:"at"`
	// Message is the pusher's, or says what a rollback returned to.
	Message string `json:"message,omitempty"`
}

// bucketConfig is the policy bucket's config. Its changes are
// republished (events.PolicyLiveSubject) for those that follow it without
// a consumer (bus.Watch).
var bucketConfig = jetstream.KeyValueConfig{
	Bucket:      events.PolicyBucket,
	Description: "toolbus policy: every revision pushed (rev.*), and what the fleet enforces (active)",
	History:     64,
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

// ActiveSubject is the subject that changes what the fleet enforces: the
// bus lets only admins publish it.
func ActiveSubject() string { return "$KV." + events.PolicyBucket + "." + activeKey }

// revisionKeyOf is the bucket key of a revision ("sha256:" and 16 hex digits).
func revisionKeyOf(revision string) (string, error) {
	h, ok := strings.CutPrefix(revision, "sha256:")
	if !ok || len(h) != 16 {
		return "", fmt.Errorf("%q is not a policy revision (sha256: and 16 hex digits)", revision)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%q is not a policy revision (sha256: and 16 hex digits)", revision)
	}
	return revisionKey + h, nil
}

// PushOptions say how a push is made.
type PushOptions struct {
	// By is the pusher, as the bus proved it.
	By string
	// Key signs the revision; nil pushes it unsigned.
	Key     nkeys.KeyPair
	Message string
	// Share, when it is not the whole fleet, rolls the revision out to
	// that share only; the stable revision stays for the rest.
	Share Share
}

// Push compiles files and runs their Rego tests, and only if both pass
// writes the revision and puts it in force: for the whole fleet, or for
// the share opts name (a staged rollout). The error of a refused set goes
// back to the caller; nothing is written.
func Push(ctx context.Context, js jetstream.JetStream, files Files, opts PushOptions) (*Pushed, *Rollout, error) {
	if err := opts.Share.valid(); err != nil {
		return nil, nil, err
	}
	pushed, kv, err := writeRevision(ctx, js, files, opts)
	if err != nil {
		return nil, nil, err
	}
	r, err := setActive(ctx, kv, func(cur *Rollout) (*Rollout, error) {
		next := &Rollout{Stable: pushed.Revision, By: opts.By, Message: opts.Message}
		if !opts.Share.Whole() {
			next = &Rollout{Next: pushed.Revision, Share: opts.Share, By: opts.By, Message: opts.Message}
			if cur != nil {
				next.Stable = cur.Stable
			}
			if next.Stable == next.Next {
				return nil, fmt.Errorf("%s is already the stable revision: push it with --to 100, or roll back to another", next.Next)
			}
		}
		return next, nil
	})
	if err != nil {
		return nil, nil, err
	}
	endShadow(ctx, kv)
	return pushed, r, nil
}

// writeRevision compiles files, runs their tests, signs them with
// opts.Key and writes the revision; it changes nothing the fleet
// enforces.
//
// A revision pushed before keeps its record (its first pusher, time and
// message): this push adds its signature to it.
func writeRevision(ctx context.Context, js jetstream.JetStream, files Files, opts PushOptions) (*Pushed, jetstream.KeyValue, error) {
	p, err := Compile(ctx, files)
	if err != nil {
		return nil, nil, err
	}
	var sig *Signature
	if opts.Key != nil {
		if sig, err = Sign(files, opts.Key); err != nil {
			return nil, nil, err
		}
	}
	kv, err := Bucket(ctx, js)
	if err != nil {
		return nil, nil, err
	}
	key, err := revisionKeyOf(p.Revision())
	if err != nil {
		return nil, nil, err
	}
	for range 5 {
		rec, last, err := readRevision(ctx, kv, key, p.Revision())
		if err != nil {
			return nil, nil, err
		}
		switch {
		case rec == nil:
			rec = &Pushed{Revision: p.Revision(), Files: files, By: opts.By, At: time.Now().UTC(), Message: opts.Message, Tests: p.TestsPassed()}
			if sig != nil {
				rec.Signatures = []*Signature{sig}
			}
		case sig == nil || slices.ContainsFunc(rec.Signatures, func(s *Signature) bool { return *s == *sig }):
			rec.Signature = sig // nothing to add
			return rec, kv, nil
		default:
			rec.Signatures = append(rec.Signatures, sig)
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return nil, nil, err
		}
		if last == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, last)
		}
		if err == nil {
			rec.Signature = sig
			return rec, kv, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !strings.Contains(err.Error(), "wrong last sequence") {
			return nil, nil, fmt.Errorf("push policy: %w", err)
		}
		// Another push of the same files meanwhile: read it again.
	}
	return nil, nil, errors.New("push policy: the revision kept changing under this push; run it again")
}

// readRevision reads the record at key, and its bucket revision; nil and 0
// when there is none. A record whose files are not revision's (planted
// by hand) is not kept: the push writes the right one over it.
func readRevision(ctx context.Context, kv jetstream.KeyValue, key, revision string) (*Pushed, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("push policy: %w", err)
	}
	var rec Pushed
	if json.Unmarshal(e.Value(), &rec) != nil || rec.Files.Revision() != revision {
		return nil, e.Revision(), nil
	}
	return &rec, e.Revision(), nil
}

// Rollback returns the fleet to revision, or, when revision is empty, to
// the one before: a staged rollout is ended (its stable revision stays
// for every call), else the stable revision in force before this one is
// put back (which may be the executors' own policy). A named revision
// must have been pushed.
func Rollback(ctx context.Context, js jetstream.JetStream, revision, by string) (*Rollout, error) {
	kv, err := Bucket(ctx, js)
	if err != nil {
		return nil, err
	}
	r, err := setActive(ctx, kv, func(cur *Rollout) (*Rollout, error) {
		switch {
		case revision != "":
			if _, err := Revision(ctx, kv, revision); err != nil {
				return nil, err
			}
		case cur == nil:
			return nil, errors.New("nothing was pushed: there is nothing to roll back")
		case cur.Next != "":
			return &Rollout{Stable: cur.Stable, By: by, Message: "rollback: the rollout of " + cur.Next + " ended"}, nil
		default:
			prev, err := previousStable(ctx, kv, cur.Stable)
			if err != nil {
				return nil, err
			}
			revision = prev
		}
		return &Rollout{Stable: revision, By: by, Message: "rollback to " + RevisionOrOwn(revision)}, nil
	})
	if err != nil {
		return nil, err
	}
	endShadow(ctx, kv)
	return r, nil
}

// RevisionOrOwn names a rollout's revision: "" is the executors' own
// policy.
func RevisionOrOwn(revision string) string {
	if revision == "" {
		return "the executors' own policy"
	}
	return revision
}

// previousStable is the stable revision in force before stable, from the
// active key's history: "" for the executors' own policy.
func previousStable(ctx context.Context, kv jetstream.KeyValue, stable string) (string, error) {
	history, err := kv.History(ctx, activeKey)
	if err != nil {
		return "", fmt.Errorf("policy history: %w", err)
	}
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Operation() != jetstream.KeyValuePut {
			continue
		}
		if r, err := decodeActive(history[i].Value()); err == nil && r.Stable != stable {
			return r.Stable, nil
		}
	}
	if len(history) < int(bucketConfig.History) {
		// The whole history is there: before its first push, the fleet
		// enforced the executors' own.
		return "", nil
	}
	return "", fmt.Errorf("no revision before %s in the last %d changes: name one (policy history)", stable, len(history))
}

// setActive changes the active key with change, which is given the
// rollout in force (nil when none). A change made by someone else in
// between fails it, rather than losing one of the two.
func setActive(ctx context.Context, kv jetstream.KeyValue, change func(*Rollout) (*Rollout, error)) (*Rollout, error) {
	var (
		cur  *Rollout
		last uint64
	)
	e, err := kv.Get(ctx, activeKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("policy bucket: %w", err)
	default:
		last = e.Revision()
		if cur, err = decodeActive(e.Value()); err != nil {
			cur = nil // what is there does not read: it is replaced
		}
	}
	next, err := change(cur)
	if err != nil {
		return nil, err
	}
	next.At = time.Now().UTC()
	data, err := json.Marshal(next)
	if err != nil {
		return nil, err
	}
	if last == 0 {
		_, err = kv.Create(ctx, activeKey, data)
	} else {
		_, err = kv.Update(ctx, activeKey, data, last)
	}
	if err != nil {
		return nil, fmt.Errorf("the fleet's policy changed while this ran (another push or rollback?); nothing changed, run it again: %w", err)
	}
	return next, nil
}

// decodeActive reads the active key: a Rollout, or a set pushed whole
// before revisions had keys of their own (its revision is then Stable,
// and the set itself is in legacy).
func decodeActive(data []byte) (*Rollout, error) {
	var r struct {
		Rollout
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("the fleet's active policy does not decode: %w", err)
	}
	if r.Stable == "" && r.Next == "" && r.Revision != "" {
		r.Stable = r.Revision
	}
	if err := r.Share.valid(); err != nil {
		return nil, fmt.Errorf("the fleet's active policy: %w", err)
	}
	return &r.Rollout, nil
}

// pushedBucket is the policy bucket, nil when it is missing (nothing was
// ever pushed): a reader does not make it.
func pushedBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, events.PolicyBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	return kv, err
}

// Active returns what the fleet enforces, or nil when nothing was pushed.
func Active(ctx context.Context, js jetstream.JetStream) (*Rollout, error) {
	kv, err := pushedBucket(ctx, js)
	if err != nil || kv == nil {
		return nil, err
	}
	e, err := kv.Get(ctx, activeKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeActive(e.Value())
}

// ActiveStable is the stable revision the fleet enforces, nil when none
// was pushed (the executors enforce their own).
func ActiveStable(ctx context.Context, js jetstream.JetStream) (*Pushed, error) {
	r, err := Active(ctx, js)
	if err != nil || r == nil || r.Stable == "" {
		return nil, err
	}
	kv, err := pushedBucket(ctx, js)
	if err != nil || kv == nil {
		return nil, err
	}
	return Revision(ctx, kv, r.Stable)
}

// Revision reads a pushed revision from the bucket.
func Revision(ctx context.Context, kv jetstream.KeyValue, revision string) (*Pushed, error) {
	key, err := revisionKeyOf(revision)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return legacyRevision(ctx, kv, revision)
	}
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", revision, err)
	}
	var p Pushed
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, fmt.Errorf("policy %s does not decode: %w", revision, err)
	}
	if got := p.Files.Revision(); got != revision {
		return nil, fmt.Errorf("policy %s: the bucket's files are revision %s, not the one their key names", revision, got)
	}
	return &p, nil
}

// legacyRevision finds a revision pushed whole into the active key
// before revisions had keys of their own.
func legacyRevision(ctx context.Context, kv jetstream.KeyValue, revision string) (*Pushed, error) {
	history, err := kv.History(ctx, activeKey)
	if err == nil {
		for i := len(history) - 1; i >= 0; i-- {
			var p Pushed
			if json.Unmarshal(history[i].Value(), &p) == nil && len(p.Files) > 0 && p.Files.Revision() == revision {
				return &p, nil
			}
		}
	}
	return nil, fmt.Errorf("policy %s was never pushed (policy history lists those that were)", revision)
}

// History is every revision pushed, the newest first.
func History(ctx context.Context, js jetstream.JetStream) ([]*Pushed, error) {
	kv, err := pushedBucket(ctx, js)
	if err != nil || kv == nil {
		return nil, err
	}
	keys, err := kv.ListKeysFiltered(ctx, revisionKey+"*")
	if err != nil {
		return nil, fmt.Errorf("policy history: %w", err)
	}
	var out []*Pushed
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("policy history, %s: %w", key, err)
		}
		var p Pushed
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			return nil, fmt.Errorf("policy history: %s does not decode: %w", key, err)
		}
		out = append(out, &p)
	}
	slices.SortFunc(out, func(a, b *Pushed) int { return b.At.Compare(a.At) })
	return out, nil
}

// shadowKey names the candidate in shadow: a pushed revision every
// executor evaluates beside the policy in force, on every call, and
// enforces on none.
const shadowKey = "shadow"

// Shadow is the candidate in shadow (the bucket's shadow key).
type Shadow struct {
	Revision string    `json:"revision"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	Message  string    `json:"message,omitempty"`
}

// ShadowSubject is the subject that changes the candidate in shadow: the
// bus lets only admins publish it.
func ShadowSubject() string { return "$KV." + events.PolicyBucket + "." + shadowKey }

// PushShadow compiles files and runs their Rego tests, and only if both
// pass writes the revision and makes it the candidate in shadow, in place
// of any other: executors evaluate it beside the policy in force and
// record where it disagrees; it decides nothing.
func PushShadow(ctx context.Context, js jetstream.JetStream, files Files, opts PushOptions) (*Pushed, error) {
	pushed, kv, err := writeRevision(ctx, js, files, opts)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(&Shadow{Revision: pushed.Revision, By: opts.By, At: time.Now().UTC(), Message: opts.Message})
	if err != nil {
		return nil, err
	}
	if _, err := kv.Put(ctx, shadowKey, data); err != nil {
		return nil, fmt.Errorf("shadow policy: %w", err)
	}
	return pushed, nil
}

// StopShadow ends the shadow, and says which candidate it ended ("" when
// there was none).
func StopShadow(ctx context.Context, js jetstream.JetStream) (string, error) {
	kv, err := Bucket(ctx, js)
	if err != nil {
		return "", err
	}
	s, err := shadowIn(ctx, kv)
	if err != nil || s == nil {
		return "", err
	}
	if err := kv.Delete(ctx, shadowKey); err != nil {
		return "", fmt.Errorf("stop the shadow: %w", err)
	}
	return s.Revision, nil
}

// ActiveShadow is the candidate in shadow, nil when there is none.
func ActiveShadow(ctx context.Context, js jetstream.JetStream) (*Shadow, error) {
	kv, err := pushedBucket(ctx, js)
	if err != nil || kv == nil {
		return nil, err
	}
	return shadowIn(ctx, kv)
}

func shadowIn(ctx context.Context, kv jetstream.KeyValue) (*Shadow, error) {
	e, err := kv.Get(ctx, shadowKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeShadow(e.Value())
}

func decodeShadow(data []byte) (*Shadow, error) {
	var s Shadow
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("the candidate in shadow does not decode: %w", err)
	}
	if _, err := revisionKeyOf(s.Revision); err != nil {
		return nil, fmt.Errorf("the candidate in shadow: %w", err)
	}
	return &s, nil
}

// endShadow ends the shadow when the fleet's policy changes: a candidate
// is judged against the policy in force, and that policy is another now.
func endShadow(ctx context.Context, kv jetstream.KeyValue) {
	if s, err := shadowIn(ctx, kv); err == nil && s != nil {
		kv.Delete(ctx, shadowKey)
	}
}
