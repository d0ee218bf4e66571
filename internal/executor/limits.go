package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
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
//   - calls at once are a key of the LimitSlotsBucket per limit, holding
//     the calls that hold a slot and those waiting for one, in order,
//     changed by compare-and-set only. Each entry has a lease that its
//     executor renews while the call lives (renew), so the slots of an
//     executor that died free themselves when their leases lapse.
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
	// limitWait bounds one request about a limit.
	limitWait = 10 * time.Second
)

// limiter is an executor's side of the limits of calls at once: its
// requests to the slots, and the renewal of its calls' leases.
type limiter struct {
	slots jetstream.KeyValue
	exec  string
	lease time.Duration
	log   *slog.Logger

	mu sync.Mutex
	// mine is, per slot key, this executor's calls in it (holding or
	// waiting), whose leases renew renews.
	mine map[string]map[string]bool
	stop chan struct{}
	done chan struct{}
}

func openLimiter(ctx context.Context, js jetstream.JetStream, exec string, lease time.Duration, log *slog.Logger) (*limiter, error) {
	slots, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      events.LimitSlotsBucket,
		Description: "toolbus: calls holding and awaiting the slots of the policy's limits of calls at once",
		History:     1,
		// Every live entry is rewritten every lease/3; a key nobody
		// touched for an hour holds nothing but lapsed leases.
		TTL:     time.Hour,
		Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("limit slots: %w", err)
	}
	l := &limiter{slots: slots, exec: exec, lease: lease, log: log,
		mine: map[string]map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.renew()
	return l, nil
}

// close stops the renewal of leases; what this executor still holds
// lapses.
func (l *limiter) close() {
	close(l.stop)
	<-l.done
}

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
	var rates []policy.Limit
	for _, lim := range c.limits {
		if lim.Concurrent > 0 {
			continue
		}
		n, most, what := rateOf(lim, c.inv.Args)
		if n > most {
			return &ending{out: tool.Failed(events.ErrRateLimited, fmt.Sprintf("Refused by the limit %q: at most %d %s per %s, and this call alone has %d; it cannot run under this limit, so do not retry it as it is.",
				lim.Name, most, what, lim.Per, n))}
		}
		rates = append(rates, lim)
	}
	// The limits counted here first: a call one of them refuses makes
	// no round trip.
	for _, lim := range rates {
		if !lim.Exact {
			n, most, _ := rateOf(lim, c.inv.Args)
			w := now.UnixNano() / int64(lim.Per)
			local = append(local, counters.Increment{Key: "limits." + lim.ID + "." + strconv.FormatInt(w, 10), N: n,
				Until: time.Unix(0, (w+1)*int64(lim.Per)), Most: most})
			localLim = append(localLim, lim)
		}
	}
	if len(local) > 0 {
		_, over, err := c.e.counts.Add(local...)
		switch {
		case err != nil:
			return c.limitFailed(localLim[0], err)
		case over >= 0:
			local = nil // nothing was counted
			return refusedByRate(localLim[over], now)
		}
	}
	for _, lim := range rates {
		if !lim.Exact {
			continue
		}
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

// slotEntry is a call holding, or waiting for, a slot.
type slotEntry struct {
	Call     string `json:"call"`
	Executor string `json:"executor"`
	// Until is when its lease lapses, in Unix milliseconds.
	Until int64 `json:"until"`
}

// slotState is the value of a slot key.
type slotState struct {
	Holders []slotEntry `json:"holders,omitempty"`
	Waiters []slotEntry `json:"waiters,omitempty"`
}

// prune drops the entries whose lease lapsed by now.
func (s *slotState) prune(now int64) {
	lapsed := func(e slotEntry) bool { return e.Until <= now }
	s.Holders = slices.DeleteFunc(s.Holders, lapsed)
	s.Waiters = slices.DeleteFunc(s.Waiters, lapsed)
}

func indexOf(list []slotEntry, call string) int {
	return slices.IndexFunc(list, func(e slotEntry) bool { return e.Call == call })
}

// read is the state of key and its revision (0: no such key).
func (l *limiter) read(ctx context.Context, key string) (slotState, uint64, error) {
	var s slotState
	e, err := l.slots.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return s, 0, nil
	case err != nil:
		return s, 0, err
	}
	if len(e.Value()) > 0 {
		if err := json.Unmarshal(e.Value(), &s); err != nil {
			return s, 0, fmt.Errorf("slot %s: %w", key, err)
		}
	}
	return s, e.Revision(), nil
}

// errConflict: another executor changed the key since it was read.
var errConflict = errors.New("changed meanwhile")

// write sets key to s if it is still at revision rev.
func (l *limiter) write(ctx context.Context, key string, s slotState, rev uint64) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = l.slots.Create(ctx, key, data)
	} else {
		_, err = l.slots.Update(ctx, key, data, rev)
	}
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
		return errConflict
	}
	return err
}

// change applies f to key's state until it is written without a
// conflict; f returns false to write nothing.
func (l *limiter) change(ctx context.Context, key string, f func(s *slotState, now time.Time) bool) error {
	for {
		s, rev, err := l.read(ctx, key)
		if err != nil {
			return err
		}
		now := time.Now()
		s.prune(now.UnixMilli())
		if !f(&s, now) {
			return nil
		}
		switch err := l.write(ctx, key, s, rev); {
		case errors.Is(err, errConflict):
			continue
		default:
			return err
		}
	}
}

func (l *limiter) track(key, call string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mine[key] == nil {
		l.mine[key] = map[string]bool{}
	}
	l.mine[key][call] = true
}

func (l *limiter) untrack(key, call string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mine[key], call)
	if len(l.mine[key]) == 0 {
		delete(l.mine, key)
	}
}

// slotCall is the call's name in the slots: its principal and id, which
// name one call fleet-wide (ids.go).
func (c *call) slotCall() string { return IDKey(c.principal, c.inv.ID) }

// takeSlot takes a slot of lim for the call, waiting for one in order
// where lim has a queue. It returns the ending of a call that got none.
func (c *call) takeSlot(lim policy.Limit) *ending {
	l, me, key := c.e.limits, c.slotCall(), lim.ID
	l.track(key, me)
	held, joined := false, false
	defer func() {
		switch {
		case joined && !held:
			c.leaveQueue(key)
		case !held:
			l.untrack(key, me)
		}
	}()
	full := func() *ending {
		return limited(events.ErrConcurrencyLimited, concurrencyRetry, fmt.Sprintf("Refused by the limit %q: at most %d such calls at once, and as many run; the call was not run. Retry after %s.",
			lim.Name, lim.Concurrent, concurrencyRetry))
	}
	wait := min(lim.QueueWait, c.timeoutOf())
	deadline := time.Now().Add(wait)
	var watch jetstream.KeyWatcher
	var updates <-chan jetstream.KeyValueEntry
	defer func() {
		if watch != nil {
			_ = watch.Stop()
		}
	}()
	for {
		var outcome string // "held", "full", "queue full", or waiting
		position := 0
		var wake time.Time
		err := l.change(c.ctx, key, func(s *slotState, now time.Time) bool {
			outcome, wake = "", time.Time{}
			free := lim.Concurrent - len(s.Holders)
			pos := indexOf(s.Waiters, me)
			ahead := pos
			if pos < 0 {
				ahead = len(s.Waiters)
			}
			until := now.Add(l.lease).UnixMilli()
			if ahead < free {
				if pos >= 0 {
					s.Waiters = slices.Delete(s.Waiters, pos, pos+1)
				}
				s.Holders = append(s.Holders, slotEntry{me, l.exec, until})
				outcome = "held"
				return true
			}
			switch {
			case lim.Queue == 0:
				outcome = "full"
				return false
			case pos < 0 && len(s.Waiters) >= lim.Queue:
				outcome = "queue full"
				return false
			}
			// Whoever's lease lapses first may let this call on.
			for _, e := range slices.Concat(s.Holders, s.Waiters[:ahead]) {
				if t := time.UnixMilli(e.Until); wake.IsZero() || t.Before(wake) {
					wake = t
				}
			}
			position = ahead + 1
			if pos < 0 {
				s.Waiters = append(s.Waiters, slotEntry{me, l.exec, until})
				joined = true // or tried to: a write that failed may have been made
				return true
			}
			return false
		})
		switch {
		case err != nil:
			return c.limitFailed(lim, err)
		case outcome == "held":
			held = true
			c.slots = append(c.slots, key)
			return nil
		case outcome == "full":
			return full()
		case outcome == "queue full":
			return limited(events.ErrConcurrencyLimited, concurrencyRetry, fmt.Sprintf("Refused by the limit %q: at most %d such calls at once, as many run and %d wait, as many as may; the call was not run. Retry after %s.",
				lim.Name, lim.Concurrent, lim.Queue, concurrencyRetry))
		}
		if watch == nil {
			c.queued(lim, position, wait)
			// Changes from now on wake the call; one made since the
			// state was read is found by reading it again.
			if watch, err = l.slots.Watch(c.ctx, key, jetstream.UpdatesOnly()); err != nil {
				return c.limitFailed(lim, err)
			}
			updates = watch.Updates()
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return c.queueTimedOut(lim, wait)
		}
		timer := time.NewTimer(min(left, max(time.Until(wake), 0)+10*time.Millisecond))
		select {
		case _, ok := <-updates:
			if !ok { // the watch ended: the leases' timer goes on
				updates = nil
			}
		case <-timer.C:
		case <-c.ctx.Done():
		}
		timer.Stop()
		if c.ctx.Err() != nil {
			return &ending{out: tool.Failed(events.ErrCancelled, fmt.Sprintf("The call was cancelled while it waited for a slot of the limit %q (%v); it was not run.", lim.Name, context.Cause(c.ctx)))}
		}
	}
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

// leaveQueue takes the call out of key's line, if it is in it.
func (c *call) leaveQueue(key string) {
	l, me := c.e.limits, c.slotCall()
	defer l.untrack(key, me)
	ctx, cancel := context.WithTimeout(context.Background(), limitWait)
	defer cancel()
	if err := l.change(ctx, key, func(s *slotState, _ time.Time) bool {
		i := indexOf(s.Waiters, me)
		if i >= 0 {
			s.Waiters = slices.Delete(s.Waiters, i, i+1)
		}
		return i >= 0
	}); err != nil {
		l.log.Warn("a call's place in a limit's line was not given up; it lapses with its lease", "invocation", c.inv.ID, "err", err)
	}
}

// releaseSlots gives up the slots the call holds.
func (c *call) releaseSlots() {
	if len(c.slots) == 0 {
		return
	}
	l, me := c.e.limits, c.slotCall()
	ctx, cancel := context.WithTimeout(context.Background(), limitWait)
	defer cancel()
	for _, key := range c.slots {
		if err := l.change(ctx, key, func(s *slotState, _ time.Time) bool {
			i := indexOf(s.Holders, me)
			if i >= 0 {
				s.Holders = slices.Delete(s.Holders, i, i+1)
			}
			return i >= 0
		}); err != nil {
			l.log.Warn("a call's slot was not given up; it lapses with its lease", "invocation", c.inv.ID, "err", err)
		}
		l.untrack(key, me)
	}
	c.slots = nil
}

// renew renews, every third of a lease, the leases of this executor's
// calls in the slots, until close.
func (l *limiter) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		l.mu.Lock()
		keys := make(map[string]map[string]bool, len(l.mine))
		for k, calls := range l.mine {
			keys[k] = maps.Clone(calls)
		}
		l.mu.Unlock()
		for key, calls := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), limitWait)
			err := l.change(ctx, key, func(s *slotState, now time.Time) bool {
				until := now.Add(l.lease).UnixMilli()
				changed := false
				for _, list := range [][]slotEntry{s.Holders, s.Waiters} {
					for i := range list {
						if list[i].Executor == l.exec && calls[list[i].Call] {
							list[i].Until, changed = until, true
						}
					}
				}
				return changed
			})
			cancel()
			if err != nil {
				l.log.Warn("the leases of calls in a limit's slots were not renewed", "err", err)
			}
		}
	}
}
