package executor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/counters"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/tool"
)

// The policy names the limits a call is held to with its decision
// (policy.Limit): calls or bytes of arguments per interval, and calls at
// once. They hold across the fleet:
//
//   - a rate counts in fixed windows (the Unix time divided by the
//     interval), in the executor's counters.Fleet: the call (1, or its
//     arguments' bytes) is added there at once, and told to the other
//     executors, unless it would take the count past the limit: then it
//     is refused, told when the window ends, and nothing is counted. The
//     count holds what the other executors counted once their messages
//     have come, so the fleet may let a few calls more than the limit
//     through (docs/fleet.md bounds them);
//   - a rate the policy asks to be exact is a counter of the LimitsStream
//     instead (counters.Exact), one subject per limit and window: the
//     call is added with one request, and the server's acknowledgement
//     gives the fleet's count. Over the limit, the call is taken out
//     again and refused;
//   - calls at once are slots of a key of the LimitSlotsBucket per limit
//     (counters.Slots), taken by compare-and-set, each held under a
//     lease its executor renews while the call lives.
//
// The limits apply once a call may run (the policy allowed it, or a
// person said yes) and before its tool starts: a denied call spends
// nothing. Only an exact rate and calls at once cost a round trip.

// Defaults of the limits' timing.
const (
	// DefaultLimitLease is how long a slot, or a place in a queue, stays
	// an executor's without it renewing it: how long the slots of an
	// executor that died stay taken.
	DefaultLimitLease = 15 * time.Second
	// concurrencyRetry is the retry-after of a call refused for being
	// over a limit of calls at once: nothing says when one ends.
	concurrencyRetry = 2 * time.Second
)

// applyLimits holds the call to the limits of its decision: it counts
// the call against every rate, then takes a slot of every limit of
// calls at once, waiting in its queue where it has one. It returns the
// ending of a call that may not run, having taken back what it counted
// and given up what it held; nil when the call may run.
func (c *call) applyLimits() *ending {
	if len(c.limits) == 0 {
		return nil
	}
	var (
		now      = time.Now()
		local    []counters.Increment
		localLim []policy.Limit
		exact    []countedCall
	)
	giveBack := func() {
		for i := range local {
			local[i].N, local[i].Most = -local[i].N, 0
		}
		if len(local) > 0 {
			if _, _, err := c.e.counts.Add(local...); err != nil {
				c.e.log.Warn("a refused call's counts were not taken back", "invocation", c.inv.ID, "err", err)
			}
		}
		for _, ct := range exact {
			c.e.exact.TakeBack(ct.key, ct.n)
		}
		c.releaseSlots()
	}
	var exactLim []policy.Limit
	for _, lim := range c.limits {
		if lim.Concurrent > 0 {
			continue
		}
		n, most, what := rateOf(lim, c.inv.Args)
		if n > most {
			return &ending{out: tool.Failed(events.ErrRateLimited, fmt.Sprintf("Refused by the limit %q: at most %d %s per %s, and this call alone has %d; it cannot run under this limit, so do not retry it as it is.",
				lim.Name, most, what, lim.Per, n))}
		}
		if lim.Exact {
			exactLim = append(exactLim, lim)
			continue
		}
		w := now.UnixNano() / int64(lim.Per)
		local = append(local, counters.Increment{Key: "limits." + lim.ID + "." + strconv.FormatInt(w, 10), N: n,
			Until: time.Unix(0, (w+1)*int64(lim.Per)), Most: most})
		localLim = append(localLim, lim)
	}
	// The rates counted here first, all or none: a call one of them
	// refuses makes no round trip, and counts nothing.
	if len(local) > 0 {
		_, over, err := c.e.counts.Add(local...)
		switch {
		case err != nil:
			return c.limitFailed(localLim[0], err)
		case over >= 0:
			return refusedByRate(localLim[over], now)
		}
	}
	for _, lim := range exactLim {
		n, most, _ := rateOf(lim, c.inv.Args)
		key := lim.ID + "." + strconv.FormatInt(now.UnixNano()/int64(lim.Per), 10)
		count, err := c.e.exact.Add(c.ctx, key, n)
		if err != nil {
			giveBack()
			return c.limitFailed(lim, err)
		}
		exact = append(exact, countedCall{key, n})
		if count > most {
			giveBack()
			return refusedByRate(lim, now)
		}
	}
	for _, lim := range c.limits {
		if lim.Concurrent == 0 {
			continue
		}
		if end := c.takeSlot(lim); end != nil {
			giveBack()
			return end
		}
	}
	return nil
}

// refusedByRate is the ending of a call over the rate lim, told to retry
// when lim's window ends.
func refusedByRate(lim policy.Limit, now time.Time) *ending {
	_, most, what := rateOf(lim, nil)
	window := now.UnixNano() / int64(lim.Per)
	retry := time.Unix(0, (window+1)*int64(lim.Per)).Sub(now)
	return limited(events.ErrRateLimited, retry, fmt.Sprintf("Refused by the limit %q: at most %d %s per %s; the call was not run. Retry after %s.",
		lim.Name, most, what, lim.Per, retry.Round(time.Millisecond)))
}

// rateOf is what a call of args adds to the rate lim, the most lim
// allows, and what it counts.
func rateOf(lim policy.Limit, args []byte) (n, most int64, what string) {
	if lim.Bytes > 0 {
		return int64(len(args)), lim.Bytes, "bytes of arguments"
	}
	return 1, lim.Calls, "calls"
}

type countedCall struct {
	key string
	n   int64
}

// limited is the ending of a call a limit refused, told when to retry.
func limited(t events.ErrorType, retry time.Duration, msg string) *ending {
	out := tool.Failed(t, msg)
	out.Err.RetryAfterMillis = max(1, retry.Milliseconds())
	return &ending{out: out}
}

// limitFailed is the ending of a call whose limit could not be checked:
// never run unchecked.
func (c *call) limitFailed(lim policy.Limit, err error) *ending {
	if c.ctx.Err() != nil {
		return &ending{out: tool.Failed(events.ErrCancelled, fmt.Sprintf("The call was cancelled before it ran (%v); it was not run.", context.Cause(c.ctx)))}
	}
	return &ending{out: tool.Failed(events.ErrExecutionFailed, fmt.Sprintf("The executor could not check the limit %q, so the call was not run: %v", lim.Name, err))}
}

// slotCall is the call's name in the slots: its principal and id, which
// name one call fleet-wide (ids.go).
func (c *call) slotCall() string { return IDKey(c.principal, c.inv.ID) }

// takeSlot takes a slot of lim for the call, waiting for one in order
// where lim has a queue. It returns the ending of a call that got none.
func (c *call) takeSlot(lim policy.Limit) *ending {
	wait := min(lim.QueueWait, c.timeoutOf())
	queued := false
	got, err := c.e.slots.Take(c.ctx, lim.ID, c.slotCall(), counters.Limit{Concurrent: lim.Concurrent, Queue: lim.Queue, Wait: wait},
		func(position int) { queued = true; c.queued(lim, position, wait) })
	switch {
	case err != nil && queued && c.ctx.Err() != nil:
		return &ending{out: tool.Failed(events.ErrCancelled, fmt.Sprintf("The call was cancelled while it waited for a slot of the limit %q (%v); it was not run.", lim.Name, context.Cause(c.ctx)))}
	case err != nil:
		return c.limitFailed(lim, err)
	case got == counters.Held:
		c.slots = append(c.slots, lim.ID)
		return nil
	case got == counters.Full:
		return limited(events.ErrConcurrencyLimited, concurrencyRetry, fmt.Sprintf("Refused by the limit %q: at most %d such calls at once, and as many run; the call was not run. Retry after %s.",
			lim.Name, lim.Concurrent, concurrencyRetry))
	case got == counters.LineFull:
		return limited(events.ErrConcurrencyLimited, concurrencyRetry, fmt.Sprintf("Refused by the limit %q: at most %d such calls at once, as many run and %d wait, as many as may; the call was not run. Retry after %s.",
			lim.Name, lim.Concurrent, lim.Queue, concurrencyRetry))
	}
	return c.queueTimedOut(lim, wait)
}

// queueTimedOut ends a call that waited as long as it may.
func (c *call) queueTimedOut(lim policy.Limit, waited time.Duration) *ending {
	if waited < lim.QueueWait {
		return &ending{out: tool.Failed(events.ErrTimeout, fmt.Sprintf("The call's deadline (%s) passed while it waited for a slot of the limit %q; it was not run.", waited, lim.Name))}
	}
	return limited(events.ErrConcurrencyLimited, concurrencyRetry, fmt.Sprintf("Refused by the limit %q: the call waited %s for one of its %d slots, as long as it may; it was not run. Retry after %s.",
		lim.Name, waited, lim.Concurrent, concurrencyRetry))
}

// queued tells the caller, and the trail, that the call waits in line.
func (c *call) queued(lim policy.Limit, position int, wait time.Duration) {
	detail := fmt.Sprintf("waiting for a slot of the limit %q (%d at once): number %d in line, for at most %s", lim.Name, lim.Concurrent, position, wait)
	c.step("queued", detail)
	if c.reply == "" {
		return
	}
	data, err := events.Encode(&events.Queued{Header: events.Header{Sender: c.e.id}, InvocationID: c.inv.ID, Tool: c.tool.Name,
		Limit: lim.Name, Position: position, DeadlineMillis: wait.Milliseconds()})
	if err != nil {
		c.e.log.Error("the queued notice does not encode", "invocation", c.inv.ID, "err", err)
		return
	}
	m := nats.NewMsg(c.reply)
	m.Header.Set(events.KindHeader, events.KindQueued)
	m.Header.Set(events.ExecutorHeader, c.e.id.ID)
	m.Data = data
	_ = c.e.nc.PublishMsg(m)
}

// releaseSlots gives up the slots the call holds.
func (c *call) releaseSlots() {
	for _, key := range c.slots {
		c.e.slots.Release(key, c.slotCall())
	}
	c.slots = nil
}
