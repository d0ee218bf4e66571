package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// Invocation ids are the caller's choice, and the audit trail, the
// approvers and the give-up protocol name a call by its principal and id.
// A second call under an id its principal used could hide the first in
// the trail, or take its place in front of an approver; so an id names
// one call of a principal, fleet-wide: the executor that takes a call
// creates the key of its principal and id in the bucket of taken ids
// (kv.Create fails when the key exists), and refuses a call whose key
// exists with events.ErrInvocationIDReused, whichever executor took the
// first.
//
// The same request sent again (the same bytes) is refused too, not run a
// second time: nothing in the invoke protocol sends an invocation twice
// (a caller that lost its result gives the call up, and the executor
// that finished it sends the result again; see claims.go), so a copy is
// a client's own retry, and running it again would repeat the call's
// effects. It is told apart from a reused id in the refusal's words.

// DefaultIDTTL is how long an id stays taken: far longer than a call can
// live (a ten-minute deadline after rounds of five-minute confirmations),
// and a day, so that the audit reads of a day never see one id twice.
const DefaultIDTTL = 24 * time.Hour

// idWait bounds the wait for the bucket of taken ids on the way of one
// call: a cluster electing a leader answers within seconds.
const idWait = 15 * time.Second

// IDKey is the key of principal's id in the bucket of taken ids: the
// principal token and the id's SHA-256, each base64url-encoded (ids may
// hold any bytes and principal tokens any a subject may, keys may not),
// so that two principals may use the same id.
func IDKey(principal, id string) string {
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString([]byte(principal)) + "." + base64.RawURLEncoding.EncodeToString(sum[:])
}

// takenIDs is the bucket of taken ids.
type takenIDs struct {
	kv jetstream.KeyValue
}

func openTakenIDs(ctx context.Context, js jetstream.JetStream, ttl time.Duration) (*takenIDs, error) {
	kv, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      events.InvocationIDBucket,
		Description: "toolbus: invocation ids taken, by principal, so that no id names two calls",
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

// takeID takes the call's id for it, or returns the stop that refuses the
// call: the id is taken, or could not be checked (never run unchecked).
func (c *call) takeID() *stop {
	c.sum = callSum(c.inv)
	err := c.e.ids.take(c.ctx, c.principal, c.inv.ID, c.body, c.inv.Attempt, c.sum)
	attempt := events.AttemptOf(c.inv.Attempt)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errTooManyAttempts):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q is refused: a call is tried at most %d times. Use a fresh id for a new call.", attempt, c.inv.ID, events.MaxAttempts)}
	case errors.Is(err, errNoFirstAttempt):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q is refused: this caller made no first attempt under that id that a retry can repeat. Use a fresh id for a new call.", attempt, c.inv.ID)}
	case errors.Is(err, errNotSameCall):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q is refused: a retry repeats its first attempt's call, and this one names another tool, operation, workspace or arguments. Use a fresh id for a new call.", attempt, c.inv.ID)}
	case errors.Is(err, errIDCopy):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Invocation id %q was taken by this same request before; a request is run once, and its result went to the first one. Use a fresh id for a new call.", c.inv.ID)}
	case errors.Is(err, errIDReused) && attempt > 1:
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q was made before; each attempt is made once. Use a fresh id for a new call.", attempt, c.inv.ID)}
	case errors.Is(err, errIDReused):
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("Invocation id %q names another call of this caller; an id names one call. Use a fresh id.", c.inv.ID)}
	case c.ctx.Err() != nil: // cancelled by id, or the executor stopping
		return &stop{events.ErrCancelled, fmt.Sprintf("The call was cancelled before it ran (%v); it was not run.", context.Cause(c.ctx))}
	}
	return &stop{events.ErrExecutionFailed, fmt.Sprintf("The executor could not check that invocation id %q is unused, so the call was not run: %v", c.inv.ID, err)}
}
