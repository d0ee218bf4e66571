package counters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// Slots holds an executor's calls in the slots of the limits of calls at
// once, which hold across the fleet: one key of the LimitSlotsBucket per
// limit, holding the calls that hold a slot and those waiting for one,
// in order, changed by compare-and-set only. Each entry has a lease that
// its executor renews while the call lives, so the slots of an executor
// that died free themselves when their leases lapse. Every change is a
// round trip: these counts are exact.
//
// Slots is safe for concurrent use; Close stops the renewal of leases.
type Slots struct {
	kv    jetstream.KeyValue
	exec  string
	lease time.Duration
	log   *slog.Logger

	mu sync.Mutex
	// mine is, per key, this executor's calls in it (holding or
	// waiting), whose leases renew renews.
	mine map[string]map[string]bool
	stop chan struct{}
	done chan struct{}
}

// slotWait bounds one request about a slot made on the way out of a
// call (giving it up), when the call's own context is over.
const slotWait = 10 * time.Second

// OpenSlots makes the slots' bucket, or opens it, and starts renewing
// the leases of exec's calls every third of lease, until Close.
func OpenSlots(ctx context.Context, js jetstream.JetStream, exec string, lease time.Duration, log *slog.Logger) (*Slots, error) {
	kv, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
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
	if log == nil {
		log = slog.Default()
	}
	s := &Slots{kv: kv, exec: exec, lease: lease, log: log,
		mine: map[string]map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go s.renew()
	return s, nil
}

// Close stops the renewal of leases; what this executor still holds
// lapses.
func (s *Slots) Close() {
	close(s.stop)
	<-s.done
}

// Outcome is how Take ended.
type Outcome int

const (
	// Held: the call holds a slot, until Release.
	Held Outcome = iota
	// Full: every slot is held, and the limit has no line.
	Full
	// LineFull: every slot is held, and the line is as long as it may be.
	LineFull
	// WaitedEnough: the call waited in line as long as it was let.
	WaitedEnough
)

// Limit is what Take holds a call to.
type Limit struct {
	// Concurrent is how many calls may hold a slot at once.
	Concurrent int
	// Queue, when above 0, is how many calls may wait for a slot, each
	// for at most Wait.
	Queue int
	Wait  time.Duration
}

// Take takes a slot of key for call (a name no other call of the fleet
// has), waiting for one in order where lim has a line; queued is told
// the call's place in line when it joins it. An error is one of the bus,
// or ctx's.
func (s *Slots) Take(ctx context.Context, key, call string, lim Limit, queued func(position int)) (Outcome, error) {
	s.track(key, call)
	held, joined := false, false
	defer func() {
		switch {
		case joined && !held:
			s.leaveLine(key, call)
		case !held:
			s.untrack(key, call)
		}
	}()
	deadline := time.Now().Add(lim.Wait)
	var watch jetstream.KeyWatcher
	var updates <-chan jetstream.KeyValueEntry
	defer func() {
		if watch != nil {
			_ = watch.Stop()
		}
	}()
	for {
		var outcome Outcome
		waiting := false
		position := 0
		var wake time.Time
		err := s.change(ctx, key, func(st *slotState, now time.Time) bool {
			waiting, wake = false, time.Time{}
			free := lim.Concurrent - len(st.Holders)
			pos := indexOf(st.Waiters, call)
			ahead := pos
			if pos < 0 {
				ahead = len(st.Waiters)
			}
			until := now.Add(s.lease).UnixMilli()
			if ahead < free {
				if pos >= 0 {
					st.Waiters = slices.Delete(st.Waiters, pos, pos+1)
				}
				st.Holders = append(st.Holders, slotEntry{call, s.exec, until})
				outcome = Held
				return true
			}
			switch {
			case lim.Queue == 0:
				outcome = Full
				return false
			case pos < 0 && len(st.Waiters) >= lim.Queue:
				outcome = LineFull
				return false
			}
			// Whoever's lease lapses first may let this call on.
			for _, e := range slices.Concat(st.Holders, st.Waiters[:ahead]) {
				if t := time.UnixMilli(e.Until); wake.IsZero() || t.Before(wake) {
					wake = t
				}
			}
			waiting, position = true, ahead+1
			if pos < 0 {
				st.Waiters = append(st.Waiters, slotEntry{call, s.exec, until})
				joined = true // or tried to: a write that failed may have been made
				return true
			}
			return false
		})
		switch {
		case err != nil:
			return 0, err
		case !waiting:
			held = outcome == Held
			return outcome, nil
		}
		if watch == nil {
			queued(position)
			// Changes from now on wake the call; one made since the
			// state was read is found by reading it again.
			if watch, err = s.kv.Watch(ctx, key, jetstream.UpdatesOnly()); err != nil {
				return 0, err
			}
			updates = watch.Updates()
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return WaitedEnough, nil
		}
		timer := time.NewTimer(min(left, max(time.Until(wake), 0)+10*time.Millisecond))
		select {
		case _, ok := <-updates:
			if !ok { // the watch ended: the leases' timer goes on
				updates = nil
			}
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// Release gives up call's slot of key.
func (s *Slots) Release(key, call string) {
	defer s.untrack(key, call)
	ctx, cancel := context.WithTimeout(context.Background(), slotWait)
	defer cancel()
	if err := s.change(ctx, key, func(st *slotState, _ time.Time) bool {
		i := indexOf(st.Holders, call)
		if i >= 0 {
			st.Holders = slices.Delete(st.Holders, i, i+1)
		}
		return i >= 0
	}); err != nil {
		s.log.Warn("a call's slot was not given up; it lapses with its lease", "call", call, "err", err)
	}
}

// leaveLine takes call out of key's line, if it is in it.
func (s *Slots) leaveLine(key, call string) {
	defer s.untrack(key, call)
	ctx, cancel := context.WithTimeout(context.Background(), slotWait)
	defer cancel()
	if err := s.change(ctx, key, func(st *slotState, _ time.Time) bool {
		i := indexOf(st.Waiters, call)
		if i >= 0 {
			st.Waiters = slices.Delete(st.Waiters, i, i+1)
		}
		return i >= 0
	}); err != nil {
		s.log.Warn("a call's place in a limit's line was not given up; it lapses with its lease", "call", call, "err", err)
	}
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
func (st *slotState) prune(now int64) {
	lapsed := func(e slotEntry) bool { return e.Until <= now }
	st.Holders = slices.DeleteFunc(st.Holders, lapsed)
	st.Waiters = slices.DeleteFunc(st.Waiters, lapsed)
}

func indexOf(list []slotEntry, call string) int {
	return slices.IndexFunc(list, func(e slotEntry) bool { return e.Call == call })
}

// read is the state of key and its revision (0: no such key).
func (s *Slots) read(ctx context.Context, key string) (slotState, uint64, error) {
	var st slotState
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return st, 0, nil
	case err != nil:
		return st, 0, err
	}
	if len(e.Value()) > 0 {
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			return st, 0, fmt.Errorf("slot %s: %w", key, err)
		}
	}
	return st, e.Revision(), nil
}

// errConflict: another executor changed the key since it was read.
var errConflict = errors.New("changed meanwhile")

// write sets key to st if it is still at revision rev.
func (s *Slots) write(ctx context.Context, key string, st slotState, rev uint64) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.kv.Create(ctx, key, data)
	} else {
		_, err = s.kv.Update(ctx, key, data, rev)
	}
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
		return errConflict
	}
	return err
}

// change applies f to key's state until it is written without a
// conflict; f returns false to write nothing.
func (s *Slots) change(ctx context.Context, key string, f func(st *slotState, now time.Time) bool) error {
	for {
		st, rev, err := s.read(ctx, key)
		if err != nil {
			return err
		}
		now := time.Now()
		st.prune(now.UnixMilli())
		if !f(&st, now) {
			return nil
		}
		switch err := s.write(ctx, key, st, rev); {
		case errors.Is(err, errConflict):
			continue
		default:
			return err
		}
	}
}

func (s *Slots) track(key, call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mine[key] == nil {
		s.mine[key] = map[string]bool{}
	}
	s.mine[key][call] = true
}

func (s *Slots) untrack(key, call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.mine[key], call)
	if len(s.mine[key]) == 0 {
		delete(s.mine, key)
	}
}

// renew renews, every third of a lease, the leases of this executor's
// calls in the slots, until Close.
func (s *Slots) renew() {
	defer close(s.done)
	tick := time.NewTicker(s.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		keys := make(map[string]map[string]bool, len(s.mine))
		for k, calls := range s.mine {
			keys[k] = maps.Clone(calls)
		}
		s.mu.Unlock()
		for key, calls := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), slotWait)
			err := s.change(ctx, key, func(st *slotState, now time.Time) bool {
				until := now.Add(s.lease).UnixMilli()
				changed := false
				for _, list := range [][]slotEntry{st.Holders, st.Waiters} {
					for i := range list {
						if list[i].Executor == s.exec && calls[list[i].Call] {
							list[i].Until, changed = until, true
						}
					}
				}
				return changed
			})
			cancel()
			if err != nil {
				s.log.Warn("the leases of calls in a limit's slots were not renewed", "err", err)
			}
		}
	}
}
