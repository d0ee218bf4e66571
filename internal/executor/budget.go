package executor

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// What a caller sends is kept: its invocations, their results and its own
// records of calls no executor ended all go into the audit stream, which
// keeps them for its whole retention and, full, takes no more (trail.go):
// a caller that could fill it would stop the fleet. So each principal has
// two budgets of recorded bytes on each executor, and a call that comes
// while its principal is over either is refused at once
// (events.ErrRateLimited), recorded nowhere, and counted in the
// executor's metrics:
//
//   - its share of the trail: at most RecordShare of the stream's cap at
//     once, refilled at that share over the stream's retention, divided
//     among the executors of the fleet (their budgets are their own). So
//     a principal records at most twice its share within one retention,
//     and one principal alone (with the default share of a quarter, half
//     the stream) cannot fill it; docs/audit.md has the arithmetic. It
//     follows the stream's cap and retention as they change;
//   - its pace: RecordRate a second with a burst of RecordBurst, so that
//     a flood grows the stream no faster than the executors look at its
//     fill, and no principal takes the bus's throughput from the others.
//
// It applies where identities are enforced: without them any client may
// publish into the stream directly, and there is no principal to charge.

// Defaults of Config.RecordRate, RecordBurst and RecordShare: a pace far
// above what an agent writing files sends and far below the bus's own
// rate; a share that takes four principals at once, or two at their
// whole budgets over a retention, to fill the stream.
const (
	DefaultRecordRate  = 4 << 20
	DefaultRecordBurst = 64 << 20
	DefaultRecordShare = 0.25
)

// recordBudget is two token buckets of bytes per principal: the pace and
// the share of the trail.
type recordBudget struct {
	mu    sync.Mutex
	pace  bucket
	share bucket // zero until the trail is first looked at: no bound
	by    map[string]*bytesInHand
}

// bucket is a rate in bytes a second and the bytes at most in hand.
type bucket struct{ rate, burst float64 }

type bytesInHand struct {
	pace, share float64
	at          time.Time
	// refused counts the refusals since the last one logged, told at
	// most every refusalLogEvery so that a flood does not flood the log.
	refused  int
	loggedAt time.Time
}

const refusalLogEvery = 10 * time.Second

func newRecordBudget(rate, burst int) *recordBudget {
	return &recordBudget{pace: bucket{float64(rate), float64(burst)}, by: map[string]*bytesInHand{}}
}

// shareOf is the share bucket of one principal on one of executors: share
// of maxBytes at once, refilled at that much per maxAge (a stream kept
// for good is reckoned kept for bus.DefaultAuditMaxAge). A stream with no
// cap gives no bound (0, 0).
func shareOf(maxBytes int64, maxAge time.Duration, share float64, executors int) (rate, burst float64) {
	if maxBytes <= 0 || share <= 0 {
		return 0, 0
	}
	if maxAge <= 0 {
		maxAge = bus.DefaultAuditMaxAge
	}
	burst = float64(maxBytes) * share / float64(max(executors, 1))
	return burst / maxAge.Seconds(), burst
}

// resizeShare sets the share bucket; what principals hold is kept, up to
// the new burst.
func (b *recordBudget) resizeShare(rate, burst float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.share == (bucket{rate, burst}) {
		return
	}
	unbounded := b.share.burst == 0
	b.share = bucket{rate, burst}
	for _, h := range b.by {
		if unbounded {
			h.share = burst
		}
		h.share = min(h.share, burst)
	}
}

// admit reports whether principal may have n more bytes recorded now, and
// spends them when it may. A principal in credit may overdraw by one
// message, so that a message larger than the burst still goes through
// once the bucket is full; it then waits until the debt is paid. retry is
// how long until it may again, when it may not.
func (b *recordBudget) admit(principal string, n int, now time.Time) (ok bool, retry time.Duration) {
	if b == nil {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.refill(principal, now)
	if h.pace <= 0 || (b.share.burst > 0 && h.share <= 0) {
		return false, b.wait(h)
	}
	h.pace -= float64(n)
	h.share -= float64(n)
	return true, 0
}

// wait is how long until h is in credit in both buckets; b.mu is held.
func (b *recordBudget) wait(h *bytesInHand) time.Duration {
	var d float64
	if h.pace <= 0 {
		d = -h.pace / b.pace.rate
	}
	if b.share.burst > 0 && h.share <= 0 {
		d = max(d, -h.share/b.share.rate)
	}
	return time.Duration(d*float64(time.Second)) + time.Millisecond
}

// refused counts a refusal of principal's and returns how many to log
// now (0 for none yet).
func (b *recordBudget) refused(principal string, now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.refill(principal, now)
	h.refused++
	if now.Sub(h.loggedAt) < refusalLogEvery {
		return 0
	}
	n := h.refused
	h.refused, h.loggedAt = 0, now
	return n
}

// spend takes n bytes recorded for principal, admitted or not (a call's
// result, whatever its size).
func (b *recordBudget) spend(principal string, n int, now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.refill(principal, now)
	h.pace -= float64(n)
	h.share -= float64(n)
}

// refill is principal's buckets as of now; b.mu is held. Buckets that are
// full again are forgotten once many are kept: full buckets are what a
// principal never seen gets.
func (b *recordBudget) refill(principal string, now time.Time) *bytesInHand {
	h := b.by[principal]
	if h == nil {
		if len(b.by) >= 1024 {
			for p, o := range b.by {
				if b.pace.full(o.pace, o.at, now) && (b.share.burst == 0 || b.share.full(o.share, o.at, now)) {
					delete(b.by, p)
				}
			}
		}
		h = &bytesInHand{pace: b.pace.burst, share: b.share.burst, at: now}
		b.by[principal] = h
		return h
	}
	elapsed := now.Sub(h.at).Seconds()
	h.pace = min(b.pace.burst, h.pace+elapsed*b.pace.rate)
	h.share = min(b.share.burst, h.share+elapsed*b.share.rate)
	h.at = now
	return h
}

// full says whether a bucket holding n at at is full again by now.
func (k bucket) full(n float64, at, now time.Time) bool {
	return n+now.Sub(at).Seconds()*k.rate >= k.burst
}

// rateLimited refuses invocation m of principal, over its budget: the
// caller hears why at once; nothing is recorded.
func (e *Executor) rateLimited(m *nats.Msg, principal string, retry time.Duration) {
	inv, err := events.Decode[events.Invocation](m.Data)
	if err != nil {
		inv = &events.Invocation{Header: events.Header{ID: "unknown"}}
	}
	msg := fmt.Sprintf("Refused: this caller had more recorded in the audit trail lately than one caller may (%d KiB a second with a burst of %d MiB, and its share of the trail over the trail's retention); the call was not run. Retry in %s.",
		e.cfg.RecordRate>>10, e.cfg.RecordBurst>>20, retry.Round(time.Second))
	e.observer.Finished("(rate limited)", "", string(events.ErrRateLimited))
	if n := e.budget.refused(principal, time.Now()); n > 0 {
		e.log.Warn("calls refused: the caller is over its recording budget", "principal", principal, "refused", n)
	}
	res := e.result(inv, inv.Tool, events.ErrRateLimited, msg)
	res.Error.RetryAfterMillis = max(retry.Milliseconds(), 1)
	e.respondRaw(m.Reply, res)
}
