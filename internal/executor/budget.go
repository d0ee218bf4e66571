package executor

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// What a caller sends is kept: its invocations, their results and its own
// records of calls no executor ended all go into the audit stream, which
// keeps so many bytes and lets the oldest go. A caller that could put
// bytes in as fast as the bus takes them would push everyone's history
// out in seconds. So each principal may have an executor record so many
// bytes a second, with a burst: a call that comes while its principal is
// over is refused at once (events.ErrRateLimited), recorded nowhere, and
// counted in the executor's metrics. audit verify reports whatever
// history is gone all the same; the budget makes it slow and costly to
// push out.
//
// It applies where identities are enforced: without them any client may
// publish into the stream directly, and there is no principal to charge.

// Defaults of Config.RecordRate and RecordBurst: far above what an agent
// writing files sends, and far below the bus's own rate.
const (
	DefaultRecordRate  = 4 << 20
	DefaultRecordBurst = 64 << 20
)

// recordBudget is a token bucket of bytes per principal.
type recordBudget struct {
	rate, burst float64 // bytes a second, and bytes at most in hand
	mu          sync.Mutex
	by          map[string]*bytesInHand
}

type bytesInHand struct {
	n  float64
	at time.Time
	// refused counts the refusals since the last one logged, told at
	// most every refusalLogEvery so that a flood does not flood the log.
	refused  int
	loggedAt time.Time
}

const refusalLogEvery = 10 * time.Second

func newRecordBudget(rate, burst int) *recordBudget {
	return &recordBudget{rate: float64(rate), burst: float64(burst), by: map[string]*bytesInHand{}}
}

// admit reports whether principal may have n more bytes recorded now, and
// spends them when it may. A principal in credit may overdraw by one
// message, so that a message larger than the burst still goes through
// once the bucket is full; it then waits until the debt is paid.
func (b *recordBudget) admit(principal string, n int, now time.Time) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.refill(principal, now)
	if h.n <= 0 {
		return false
	}
	h.n -= float64(n)
	return true
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
	b.refill(principal, now).n -= float64(n)
}

// refill is principal's bucket as of now; b.mu is held. Buckets that are
// full again are forgotten once many are kept: a full bucket is what a
// principal never seen gets.
func (b *recordBudget) refill(principal string, now time.Time) *bytesInHand {
	h := b.by[principal]
	if h == nil {
		if len(b.by) >= 1024 {
			for p, o := range b.by {
				if o.n+now.Sub(o.at).Seconds()*b.rate >= b.burst {
					delete(b.by, p)
				}
			}
		}
		h = &bytesInHand{n: b.burst, at: now}
		b.by[principal] = h
		return h
	}
	h.n = min(b.burst, h.n+now.Sub(h.at).Seconds()*b.rate)
	h.at = now
	return h
}

// rateLimited refuses invocation m of principal, over its budget: the
// caller hears why at once; nothing is recorded.
func (e *Executor) rateLimited(m *nats.Msg, principal string) {
	inv, err := events.Decode[events.Invocation](m.Data)
	if err != nil {
		inv = &events.Invocation{Header: events.Header{ID: "unknown"}}
	}
	msg := fmt.Sprintf("Refused: this caller had more than %d KiB a second recorded in the audit trail lately (a burst of %d MiB); the call was not run. Retry later.", e.cfg.RecordRate>>10, e.cfg.RecordBurst>>20)
	e.observer.Finished("(rate limited)", "", string(events.ErrRateLimited))
	if n := e.budget.refused(principal, time.Now()); n > 0 {
		e.log.Warn("calls refused: the caller is over its recording budget", "principal", principal, "refused", n)
	}
	e.respondRaw(m.Reply, e.result(inv, inv.Tool, events.ErrRateLimited, msg))
}
