package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/protect"
)

// A candidate policy in shadow (policy.PushShadow) is evaluated beside the
// policy in force on every call the policy decides, off the call's path:
// the call hands its input to a bounded queue and goes on; one goroutine
// judges the queue under the candidate, and records each decision that
// differs from the one in force (events.ShadowDecision). A full queue
// drops the evaluation and counts it: a shadow never delays a call.

// shadowQueue bounds the calls waiting for the candidate's judgement.
const shadowQueue = 1024

// shadowStatsEvery is how often an executor records its counts while a
// candidate is in shadow (events.ShadowStats), when they changed.
const shadowStatsEvery = 5 * time.Second

// shadowing is an executor's candidate in shadow and the goroutine that
// judges calls under it.
type shadowing struct {
	e     *Executor
	cand  atomic.Pointer[shadowRun]
	queue chan shadowCall
	stop  chan struct{}
	wg    sync.WaitGroup
}

// shadowRun is one candidate's evaluation, with its counts and the
// decisions it made: a deterministic candidate judges an exact input once,
// as the policy in force does (decisions), under the same key.
type shadowRun struct {
	pol                        *policy.Policy
	since                      time.Time
	judged, disagreed, dropped atomic.Uint64
	reported                   atomic.Uint64 // judged+dropped at the last stats
	decisions                  decisions
}

// shadowKey is what the policy in force's decision was kept under; zero
// for a decision that is not kept.
type shadowKey struct {
	key       []byte
	allowlist uint64
	protected *protect.Set
}

// shadowCall is a call the policy in force decided, for the candidate:
// with the candidate's decision when it made it before, else with the
// input to judge.
type shadowCall struct {
	run      *shadowRun
	header   events.Header // the call's (call.header)
	id       string        // the caller's id of the call
	tool     string
	live     policy.Decision
	recorded []byte // the input as the live decision records it
	decided  *policy.Decision
	in       *policy.Input
	kept     shadowKey // where to keep the candidate's decision
}

func newShadowing(e *Executor, size int) *shadowing {
	s := &shadowing{e: e, queue: make(chan shadowCall, size), stop: make(chan struct{})}
	s.wg.Add(1)
	go s.judge()
	return s
}

// set puts a candidate in shadow, nil to end the shadow. The counts of the
// one it replaces are recorded.
func (s *shadowing) set(p *policy.Policy) {
	var next *shadowRun
	if p != nil {
		next = &shadowRun{pol: p, since: time.Now().UTC()}
	}
	if old := s.cand.Swap(next); old != nil {
		s.report(old, true)
	}
	if next != nil {
		s.report(next, true) // the report knows the candidate from now
	}
}

// offer hands a decided call to the candidate, if there is one: never
// waiting, counting a call the full queue cannot take. A decision the
// candidate made before for the same key is not made again; the input
// (in, when the policy in force needed it too) is made only when it must
// be.
func (s *shadowing) offer(c *call, live judged, k shadowKey, in *policy.Input) {
	if s == nil {
		return
	}
	run := s.cand.Load()
	if run == nil {
		return
	}
	sc := shadowCall{run: run, header: c.header(), id: c.inv.ID, tool: c.tool.Name, live: live.Decision, recorded: live.rec.Input}
	if k.key != nil {
		if was, ok := run.decisions.get(run.pol, k.allowlist, k.protected, k.key); ok {
			sc.decided = &was.Decision
		} else {
			sc.kept = shadowKey{key: bytes.Clone(k.key), allowlist: k.allowlist, protected: k.protected}
		}
	}
	if sc.decided == nil {
		if in == nil {
			in = c.input(c.args, c.paths, c.hardLinks, c.shell)
			in.Protected = protectedOf(k.protected, c.paths)
		}
		sc.in = in
	}
	select {
	case s.queue <- sc:
	default:
		run.dropped.Add(1)
	}
}

// active says whether a candidate is in shadow: the call's input is then
// made even when its decision is reused.
func (s *shadowing) active() bool { return s != nil && s.cand.Load() != nil }

func (s *shadowing) close() {
	close(s.stop)
	s.wg.Wait()
	if run := s.cand.Load(); run != nil {
		s.report(run, true)
	}
}

// judge judges the queued calls under their candidate, and records the
// counts now and then.
func (s *shadowing) judge() {
	defer s.wg.Done()
	tick := time.NewTicker(shadowStatsEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			if run := s.cand.Load(); run != nil {
				s.report(run, false)
			}
		case sc := <-s.queue:
			s.judgeOne(sc)
		}
	}
}

// shadowTimeout bounds one evaluation of the candidate.
const shadowTimeout = 10 * time.Second

func (s *shadowing) judgeOne(sc shadowCall) {
	ctx, cancel := context.WithTimeout(context.Background(), shadowTimeout)
	defer cancel()
	// An error of the candidate's is its decision (a DENY that says so),
	// and a disagreement like any other.
	var d policy.Decision
	if sc.decided != nil {
		d = *sc.decided
	} else {
		d = sc.run.pol.Decide(ctx, sc.in)
		if sc.kept.key != nil {
			sc.run.decisions.put(sc.run.pol, sc.kept.allowlist, sc.kept.protected, sc.kept.key, judged{Decision: d})
		}
	}
	sc.run.judged.Add(1)
	if d.Verdict == sc.live.Verdict && d.Reason == sc.live.Reason {
		return
	}
	sc.run.disagreed.Add(1)
	ev := &events.ShadowDecision{Header: sc.header, InvocationID: sc.id, Tool: sc.tool, Principal: sc.header.Principal,
		Live:   events.PolicyVerdict{Verdict: sc.live.Verdict, Reason: sc.live.Reason, Revision: sc.live.Revision},
		Shadow: events.PolicyVerdict{Verdict: d.Verdict, Reason: d.Reason, Revision: d.Revision}}
	if sc.recorded != nil {
		sum := sha256.Sum256(sc.recorded)
		ev.InputDigest = hex.EncodeToString(sum[:])
	}
	s.e.publish(events.SubjectShadow, ev)
}

// report records run's counts: the last time (final), or when they
// changed since the last.
func (s *shadowing) report(run *shadowRun, final bool) {
	judged, disagreed, dropped := run.judged.Load(), run.disagreed.Load(), run.dropped.Load()
	if total := judged + dropped; run.reported.Swap(total) == total && !final {
		return
	}
	s.e.publish(events.SubjectShadowStats, &events.ShadowStats{Header: events.Header{Sender: s.e.id}, Revision: run.pol.Revision(),
		Since: run.since, Judged: judged, Disagreed: disagreed, Dropped: dropped})
}

// ShadowCounts are the executor's counts for the candidate in shadow: the
// calls judged, judged otherwise, and dropped; zero without one.
func (e *Executor) ShadowCounts() (judged, disagreed, dropped uint64) {
	run := e.shadow.cand.Load()
	if run == nil {
		return 0, 0, 0
	}
	return run.judged.Load(), run.disagreed.Load(), run.dropped.Load()
}
