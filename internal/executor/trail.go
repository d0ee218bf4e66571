package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// The audit stream keeps every record for its whole retention and evicts
// none to make room (bus.ensureAudit): full, it refuses new records. An
// executor does not wait for that. It watches how full the stream is,
// once every TrailCheckEvery, and from the high-water mark on refuses
// every call it would record, at once and unrecorded (events.ErrAuditFull),
// as auditd's space_left_action does: the room left above the mark holds
// the results of the calls already running, and what the fleet records
// between two looks. The invoke path reads one flag; the look costs two
// stream info requests a second per executor (the audit stream and the
// stream of its records' large fields), whatever the load.
//
// Past the cap itself JetStream refuses a record, and a call runs only
// once its invocation is stored (call.awaitRecord): a call the trail does
// not hold never runs, whatever the flag said.

// Defaults of Config.TrailHighWater and TrailCheckEvery.
const (
	DefaultTrailHighWater  = 0.9
	DefaultTrailCheckEvery = time.Second
)

// recordWait bounds how long a call waits for the audit stream to store
// its invocation before it is refused: longer than a stream leader's
// election.
const recordWait = 30 * time.Second

// trail is what an executor knows of the audit stream's fill, kept by
// watchTrail.
type trail struct {
	full     atomic.Bool
	fill     atomic.Uint64 // math.Float64bits of bytes / max bytes
	refusals atomic.Uint64 // calls refused for it
	// log tells the flag's changes.
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
}

// Fill is the audit stream's bytes over its cap, as last seen.
func (t *trail) Fill() float64 { return math.Float64frombits(t.fill.Load()) }

// setFull raises the flag, saying so once.
func (t *trail) setFull(why string, fill float64) {
	if !t.full.Swap(true) {
		t.log.Error("the audit trail is near its size cap: refusing every call that would be recorded until records age out or the cap is raised",
			"stream", events.AuditStream, "fill", fmt.Sprintf("%.1f%%", fill*100), "why", why)
	}
}

// watchTrail looks at the audit stream now, so that the budget and the
// flag hold from the first call, then every TrailCheckEvery until
// closeFollowers.
func (e *Executor) watchTrail(ctx context.Context) {
	e.trail.stop, e.trail.done = make(chan struct{}), make(chan struct{})
	if err := e.checkTrail(ctx); err != nil {
		e.log.Warn("could not look at the audit stream's fill", "err", err)
	}
	go func() {
		defer close(e.trail.done)
		tick := time.NewTicker(e.cfg.TrailCheckEvery)
		defer tick.Stop()
		failing := false
		for {
			select {
			case <-e.trail.stop:
				return
			case <-tick.C:
			}
			e.followWindow()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := e.checkTrail(ctx)
			cancel()
			if (err != nil) != failing {
				failing = err != nil
				if failing {
					// The flag stays as last seen: a stream that does not
					// answer does not store either, and calls wait for
					// their records (awaitRecord).
					e.log.Warn("could not look at the audit stream's fill", "err", err)
				}
			}
		}
	}()
}

// stopTrail stops watchTrail's goroutine.
func (e *Executor) stopTrail() {
	if e.trail.stop != nil {
		close(e.trail.stop)
		<-e.trail.done
		e.trail.stop = nil
	}
}

// checkTrail reads the audit stream's info once: its fill sets the flag,
// its cap and retention the principals' share of it (budget.go).
func (e *Executor) checkTrail(ctx context.Context) error {
	s, err := e.js.Stream(ctx, events.AuditStream)
	if err != nil {
		return err
	}
	info := s.CachedInfo()
	cfg := info.Config
	// The records' large fields are kept beside the stream, to the same
	// cap (events.Outline): the trail is as full as the fuller of the two.
	b, err := e.js.Stream(ctx, events.BlobStream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", events.BlobStream, err)
	}
	fill, why := 0.0, ""
	for _, in := range []*jetstream.StreamInfo{info, b.CachedInfo()} {
		if in.Config.MaxBytes > 0 {
			if f := float64(in.State.Bytes) / float64(in.Config.MaxBytes); f >= fill {
				fill = f
				why = fmt.Sprintf("%s holds %d of %d bytes, at or past the high-water mark of %.0f%%", in.Config.Name, in.State.Bytes, in.Config.MaxBytes, e.cfg.TrailHighWater*100)
			}
		}
	}
	e.trail.fill.Store(math.Float64bits(fill))
	switch {
	case why != "" && fill >= e.cfg.TrailHighWater:
		e.trail.setFull(why, fill)
	case e.trail.full.Swap(false):
		e.log.Info("the audit trail has room again: taking calls", "stream", events.AuditStream, "fill", fmt.Sprintf("%.1f%%", fill*100))
	}
	if e.budget != nil {
		rate, burst := shareOf(cfg.MaxBytes, cfg.MaxAge, e.cfg.RecordShare, e.fleetSize())
		e.budget.resizeShare(rate, burst)
	}
	return nil
}

// trailFull refuses invocation m at once while the trail is near its
// cap: the caller hears why; nothing is recorded.
func (e *Executor) trailFull(m *nats.Msg) {
	inv, err := events.Decode[events.Invocation](m.Data)
	if err != nil {
		inv = &events.Invocation{Header: events.Header{ID: "unknown"}}
	}
	e.trail.refusals.Add(1)
	e.observer.Finished("(audit full)", "", string(events.ErrAuditFull))
	msg := fmt.Sprintf("Refused: the audit trail is %.0f%% full, and calls are refused from %.0f%% on so that nothing recorded is pushed out; the call was not run. It runs again once old records age out or an operator raises the trail's cap.",
		e.trail.Fill()*100, e.cfg.TrailHighWater*100)
	e.respondRaw(m.Reply, e.result(inv, inv.Tool, events.ErrAuditFull, msg))
}

// settle waits for the audit stream to store the call's invocation
// (awaitRecord), for as long as the call lives.
func (c *call) settle() *stop { return c.settleWithin(c.ctx) }

// settleWithin waits for the stream's answer to the call's invocation,
// until ctx ends: the answer is kept and given to every later wait, a
// wait ctx ended is not.
func (c *call) settleWithin(ctx context.Context) *stop {
	c.settleMu.Lock()
	defer c.settleMu.Unlock()
	if c.settleDone {
		return c.settled
	}
	st := c.awaitRecord(ctx)
	if st == nil || ctx.Err() == nil {
		c.settled, c.settleDone = st, true
	}
	return st
}

// overlapsRecord says whether the call may go its way while its
// invocation is being stored: a tool this executor runs itself that
// changes nothing (read, search, think). Hooks, a person's question and
// the result still wait for the record (settle).
func (c *call) overlapsRecord() bool {
	t := c.tool
	return t != nil && t.Source == events.SourceBuiltin && (t.Kind == events.KindRead || t.Kind == events.KindSearch || t.Kind == events.KindThink)
}

// settleBeforeEffect is settle for a call about to run its tool, unless
// the tool changes nothing (overlapsRecord): its run overlaps the store.
func (c *call) settleBeforeEffect() *stop {
	if c.overlapsRecord() {
		return nil
	}
	return c.settle()
}

// awaitRecord waits for the audit stream to store the call's invocation:
// a call the trail does not hold is not run. The acknowledgement was
// asked for when the call came.
func (c *call) awaitRecord(parent context.Context) *stop {
	ctx, cancel := context.WithTimeout(parent, recordWait)
	defer cancel()
	err := c.recorded.Wait(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bus.ErrTrailFull):
		c.e.trail.setFull(err.Error(), c.e.trail.Fill())
		c.e.trail.refusals.Add(1)
		return &stop{events.ErrAuditFull, "Refused: the audit trail is full and did not store this call's invocation, so the call was not run. It runs again once old records age out or an operator raises the trail's cap."}
	case parent.Err() != nil:
		return &stop{events.ErrCancelled, fmt.Sprintf("The call was cancelled before it ran (%v); it was not run.", context.Cause(parent))}
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("no acknowledgement in %s", recordWait)
	}
	return &stop{events.ErrExecutionFailed, fmt.Sprintf("The audit trail did not store this call's invocation (%v), so the call was not run.", err)}
}

// fleetSize is how many executors the catalogue names as hosts: each
// keeps its own budgets, and a principal's calls spread over them all.
func (e *Executor) fleetSize() int {
	if e.catalog == nil {
		return 1
	}
	hosts := map[string]bool{e.id.ID: true}
	for _, t := range e.catalog.Catalog().AllTools() {
		for _, h := range t.Hosts {
			hosts[h] = true
		}
	}
	return len(hosts)
}

// TrailFill is the audit stream's fill (its bytes over its cap) as this
// executor last saw it, for metrics.
func (e *Executor) TrailFill() float64 { return e.trail.Fill() }

// TrailRefusals counts the calls this executor refused because the
// audit trail was near its cap or refused their records.
func (e *Executor) TrailRefusals() uint64 { return e.trail.refusals.Load() }

// TrailHealth reports the audit trail near its cap, for /readyz: the
// executor refuses every call it would record.
func (e *Executor) TrailHealth() error {
	if e.intake.isLeft() {
		pending, size := e.rec.Window()
		return fmt.Errorf("the audit stream %s has not acknowledged %d of the executor's records (its window holds %d): not taking calls until half of them are",
			events.AuditStream, pending, size)
	}
	if e.trail.full.Load() {
		return fmt.Errorf("the audit stream %s is %.1f%% full (calls are refused from %.0f%%): raise --audit-max-bytes or let records age out",
			events.AuditStream, e.trail.Fill()*100, e.cfg.TrailHighWater*100)
	}
	return nil
}
