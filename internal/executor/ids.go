package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// A call is named in the trail by the id the executor that accepts it
// mints for it (call.id, events.Header.Call): 128 bits from crypto/rand,
// so two calls never share one, with nothing written and nothing waited
// for. The invocation's record carries it (events.CallHeader), and so
// does every event the executor records about the call: the audit joins
// a call's events by it, whatever id its caller chose.
//
// The caller's own id stays the caller's key for the call, scoped to its
// principal: it cancels the call, watches it and matches a retry by it.
// The executor that accepts a call remembers the keys of the calls it
// accepted lately (recentIDs: the last idWindow, at most idWindowKeys
// keys) and refuses a key it remembers with events.ErrInvocationIDReused:
// the same request sent again (the same bytes) is told apart from
// another call under a used key in the refusal's words, as a client's
// own retry, which must not repeat the call's effects. A key reused past
// the window, or on another executor, names a new call with an id of its
// own: it can neither hide the first in the trail nor take its place in
// front of an approver (answers are bound to tokens, confirm.go).
//
// A retry of a lost call (an attempt past the first) must be the first
// attempt's call, of the same caller, and each attempt is made once,
// fleet-wide: that is checked in the bucket of retry tickets. The first
// attempt's ticket is written when the call first tells its caller that
// it may be retried (beat, progress), which a call still running a beat
// into its run does; the calls that end sooner, nearly all, write none.

// DefaultIDTTL is how long a retry ticket is kept: far longer than a
// call can live (a ten-minute deadline after rounds of five-minute
// confirmations).
const DefaultIDTTL = 24 * time.Hour

// The window of keys an executor remembers (recentIDs): the duplicate
// window JetStream keeps by default, and a bound on the memory it takes
// (a key and a sum, about a hundred bytes each).
const (
	idWindow     = 2 * time.Minute
	idWindowKeys = 1 << 18
)

// idWait bounds the wait for the bucket of retry tickets: a cluster
// electing a leader answers within seconds.
const idWait = 15 * time.Second

// IDKey is the key of principal's id in the bucket of taken ids: the
// principal token and the id's SHA-256, each base64url-encoded (ids may
// hold any bytes and principal tokens any a subject may, keys may not),
// so that two principals may use the same id.
func IDKey(principal, id string) string {
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString([]byte(principal)) + "." + base64.RawURLEncoding.EncodeToString(sum[:])
}

// takenIDs is the bucket of retry tickets: the first attempts of calls
// that said they may be retried, and the attempts made since.
type takenIDs struct {
	kv jetstream.KeyValue
}

func openTakenIDs(ctx context.Context, js jetstream.JetStream, ttl time.Duration) (*takenIDs, error) {
	kv, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      events.InvocationIDBucket,
		Description: "toolbus: retry tickets, by principal and invocation id: the first attempt's call, and each attempt made",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("taken ids: %w", err)
	}
	return &takenIDs{kv: kv}, nil
}

// The refusals of take.
var (
	errIDReused = errors.New("id reused")
	errIDCopy   = errors.New("request sent again")
	// A retry (an attempt past the first) refused: past MaxAttempts, of
	// an id whose first attempt this principal never made (or made in
	// an older build, which kept no sum of the call), or of another
	// call than its first attempt's.
	errTooManyAttempts = errors.New("too many attempts")
	errNoFirstAttempt  = errors.New("no first attempt")
	errNotSameCall     = errors.New("not the first attempt's call")
)

// take marks principal's id as taken by the request body, for attempt
// (events.Invocation.Attempt) of the call whose sum is call (callSum).
// It fails with errIDReused when another request took it, errIDCopy when
// this same request did, with a retry's refusal, or with why the bucket
// could not say.
//
// The key's value is the request's SHA-256, the call's and a nonce of
// this take: a create whose acknowledgement was lost (a node lost, a
// leader being elected) is tried again, and then finds its own value,
// which is no copy. A retry has a key of its own beside the first
// attempt's (so it is taken once, like an id), and is taken only as the
// first attempt's call: the first attempt's key names the principal, so
// nobody retries another's call, and holds the call's sum, which the
// retry's must equal.
func (t *takenIDs) take(ctx context.Context, principal, id string, body []byte, attempt int, call [sha256.Size]byte) error {
	attempt = events.AttemptOf(attempt)
	if attempt > events.MaxAttempts {
		return errTooManyAttempts
	}
	key := IDKey(principal, id)
	sum := sha256.Sum256(body)
	value := make([]byte, 0, 2*sha256.Size+takeNonce)
	value = append(value, sum[:]...)
	value = append(value, call[:]...)
	value = append(value, make([]byte, takeNonce)...)
	_, _ = rand.Read(value[2*sha256.Size:]) // crypto/rand.Read never fails (Go 1.24)
	ctx, cancel := context.WithTimeout(ctx, idWait)
	defer cancel()
	if attempt > 1 {
		first, err := t.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return errNoFirstAttempt
		case err != nil:
			return fmt.Errorf("the first attempt is not readable: %w", err)
		case len(first.Value()) < 2*sha256.Size:
			return errNoFirstAttempt
		case !bytes.Equal(first.Value()[sha256.Size:2*sha256.Size], call[:]):
			return errNotSameCall
		}
		key = attemptKey(key, attempt)
	}
	err := bus.RetryWhile(ctx, bus.Transient, func() error {
		_, err := t.kv.Create(ctx, key, value)
		return err
	})
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	e, gerr := t.kv.Get(ctx, key)
	switch {
	case gerr != nil:
		return fmt.Errorf("taken, but not readable: %w", gerr)
	case bytes.Equal(e.Value(), value):
		return nil // this take's own create, acknowledged late
	case bytes.HasPrefix(e.Value(), sum[:]):
		return errIDCopy
	}
	return errIDReused
}

// attemptKey is the key of a retry of the call whose first attempt took
// key: a suffix no IDKey has, as ".caller" (callerrecord.go).
func attemptKey(key string, attempt int) string {
	return key + ".attempt" + strconv.Itoa(attempt)
}

// callSum is what makes two attempts one call: the tool as named, the
// operation, the workspace and the arguments as sent.
func callSum(inv *events.Invocation) [sha256.Size]byte {
	h := sha256.New()
	for _, part := range []string{inv.Tool, string(inv.Op), inv.Workspace} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	h.Write(inv.Args)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// takeNonce is the bytes of a take's nonce.
const takeNonce = 16

// recentIDs is the keys of the calls an executor accepted lately: the
// last idWindow of them, at most idWindowKeys, the oldest let go first.
type recentIDs struct {
	mu    sync.Mutex
	byKey map[[sha256.Size]byte]recentID
	order []recentKey // in the order taken, from head on
	head  int
}

type recentID struct {
	body [sha256.Size]byte // the request's SHA-256: a copy has the same
	at   time.Time
}

type recentKey struct {
	key [sha256.Size]byte
	at  time.Time
}

func newRecentIDs() *recentIDs {
	return &recentIDs{byKey: make(map[[sha256.Size]byte]recentID)}
}

// take remembers principal's id as the key of the request body, taken
// at now, or fails with errIDCopy when this same request took it within
// the window, or errIDReused when another did.
func (r *recentIDs) take(principal, id string, body []byte, now time.Time) error {
	h := sha256.New()
	// The principal's length first: no two pairs hash alike.
	h.Write(binary.AppendUvarint(nil, uint64(len(principal))))
	h.Write([]byte(principal))
	h.Write([]byte(id))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	sum := sha256.Sum256(body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now, 0)
	if old, ok := r.byKey[key]; ok {
		if old.body == sum {
			return errIDCopy
		}
		return errIDReused
	}
	r.byKey[key] = recentID{body: sum, at: now}
	r.order = append(r.order, recentKey{key: key, at: now})
	r.expire(now, idWindowKeys)
	return nil
}

// expire lets go of the keys taken before the window and, when room is
// not 0, of the oldest past room; r.mu is held.
func (r *recentIDs) expire(now time.Time, room int) {
	for r.head < len(r.order) {
		k := r.order[r.head]
		if (room == 0 || len(r.order)-r.head <= room) && now.Sub(k.at) < idWindow {
			break
		}
		if r.byKey[k.key].at.Equal(k.at) {
			delete(r.byKey, k.key)
		}
		r.order[r.head] = recentKey{}
		r.head++
	}
	if r.head > 1024 && r.head*2 > len(r.order) {
		r.order = append(r.order[:0], r.order[r.head:]...)
		r.head = 0
	}
}

// takeKey takes the caller's key for the call this executor accepts, or
// returns the stop that refuses it: a key taken within the window. A
// retry's attempt is taken fleet-wide (takeAttempt) instead.
func (e *Executor) takeKey(principal string, inv *events.Invocation, body []byte) *stop {
	if events.AttemptOf(inv.Attempt) > 1 {
		return nil
	}
	if err := e.recent.take(principal, inv.ID, body, time.Now()); err != nil {
		return idRefusal(err, inv)
	}
	return nil
}

// takeAttempt takes a retry's attempt of the call's id in the bucket of
// retry tickets, or returns the stop that refuses it: not a retry of
// this caller's first attempt, of its call, or an attempt made before,
// or one that could not be checked (never run unchecked).
func (c *call) takeAttempt() *stop {
	c.sum = callSum(c.inv)
	err := c.e.ids.take(c.ctx, c.principal, c.inv.ID, c.body, c.inv.Attempt, c.sum)
	switch {
	case err == nil:
		return nil
	case c.ctx.Err() != nil: // cancelled by id, or the executor stopping
		return &stop{events.ErrCancelled, fmt.Sprintf("The call was cancelled before it ran (%v); it was not run.", context.Cause(c.ctx))}
	}
	return idRefusal(err, c.inv)
}

// ticket writes the retry ticket of the call's first attempt, once, when
// the call may be retried (call.retryable), before its caller is told so:
// it reports whether the caller may be told. A key whose ticket another
// call of the caller wrote (a key reused on another executor) gets none.
func (c *call) ticket() bool {
	// c.attempt, not c.inv.Attempt: the executor's own retry
	// (retryOnServer) changes the latter while beats and progress run.
	if !c.retryable.Load() || c.attempt > 1 {
		return false
	}
	c.ticketOnce.Do(func() {
		c.sum = callSum(c.inv)
		err := c.e.ids.take(c.ctx, c.principal, c.inv.ID, c.body, 1, c.sum)
		if err != nil {
			c.e.log.Warn("a call may not be retried: its retry ticket was not written", "invocation", c.inv.ID, "err", err)
			c.retryable.Store(false)
			return
		}
		c.ticketed.Store(true)
	})
	return c.ticketed.Load()
}

// idRefusal is the stop that refuses inv for err, a refusal of take.
func idRefusal(err error, inv *events.Invocation) *stop {
	attempt := events.AttemptOf(inv.Attempt)
	switch {
	case errors.Is(err, errTooManyAttempts):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q is refused: a call is tried at most %d times. Use a fresh id for a new call.", attempt, inv.ID, events.MaxAttempts)}
	case errors.Is(err, errNoFirstAttempt):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q is refused: this caller made no first attempt under that id that a retry can repeat. Use a fresh id for a new call.", attempt, inv.ID)}
	case errors.Is(err, errNotSameCall):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q is refused: a retry repeats its first attempt's call, and this one names another tool, operation, workspace or arguments. Use a fresh id for a new call.", attempt, inv.ID)}
	case errors.Is(err, errIDCopy):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Invocation id %q was taken by this same request before; a request is run once, and its result went to the first one. Use a fresh id for a new call.", inv.ID)}
	case errors.Is(err, errIDReused) && attempt > 1:
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q was made before; each attempt is made once. Use a fresh id for a new call.", attempt, inv.ID)}
	case errors.Is(err, errIDReused):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Invocation id %q names another call of this caller; an id names one call. Use a fresh id.", inv.ID)}
	}
	return &stop{events.ErrExecutionFailed, fmt.Sprintf("The executor could not check invocation id %q, so the call was not run: %v", inv.ID, err)}
}
