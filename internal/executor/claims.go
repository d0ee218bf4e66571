package executor

import (
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// liveness is what an executor knows to settle that each call has
// exactly one terminal result (see above).
type liveness struct {
	abandoned idRing      // calls whose callers gave up before they came
	finished  idRing      // calls and batches whose results were sent
	sent      sentResults // the results sent lately, for callers that lost them
	// invokeSubs are the subscriptions that hand out single invocations
	// besides the intake's (intake.go),
	// and accepting counts the invocations being taken from them (behind).
	invokeSubs []*nats.Subscription
	accepting  atomic.Int64
}

// Exactly one terminal result per invocation, from both ends:
//
//   - A caller that hears nothing of its call for LostAfter asks whether
//     an executor still runs it (handleClaim) before it reports
//     EXECUTOR_LOST; a call that is running, storing its output
//     included, is claimed and never reported lost.
//   - A caller that gives up (its deadline, a cancel, or no executor
//     claiming the call) says so with a CancelRequest with GaveUp, sent
//     as a request, and the executors' answers settle who records the
//     call's terminal result. The executor that runs the call marks the
//     result it still sends Late and answers GaveUpLate, or, when its
//     result is sent or being sent already (the give-up crossed it),
//     answers GaveUpSent: the caller then takes that result and publishes
//     none of its own. An executor that finished the call remembers it
//     (Executor.finished) for the give-ups that come after the result;
//     one that has not seen the call yet refuses it when it comes
//     (Executor.abandoned). A batch's coordinator answers GaveUpSent and
//     gives up its calls in turn, recording their results itself.
//
// What remains: an executor cut off from the bus (a partition, a frozen
// process whose connection the server still holds) cannot claim its call
// or hear the give-up, so after claimWait without an answer the caller
// records the result, and the executor's, should it come back, is a
// second one without Late. An auditor tells it apart by order: it comes
// after the caller's GaveUp cancel and the caller's result (sender: the
// caller, error EXECUTOR_LOST, TIMEOUT or CANCELLED), which is the one the
// caller acted on.

// handleClaim answers whether this executor runs the invocation (or
// coordinates the batch) the request names.
func (e *Executor) handleClaim(m *nats.Msg) {
	id := string(m.Data)
	e.mu.Lock()
	running := e.runningByID(id) != nil
	if !running {
		_, running = e.batches[id]
	}
	e.mu.Unlock()
	answer := nats.NewMsg(m.Reply)
	answer.Header.Set(events.ExecutorHeader, e.id.ID)
	switch {
	case running:
		answer.Data = []byte(events.ClaimRunning)
	case e.behind():
		answer.Data = []byte(events.ClaimBehind)
	default:
		answer.Data = []byte(events.ClaimUnknown)
	}
	_ = m.RespondMsg(answer)
}

// behind reports whether invocations have reached this executor that it
// has not looked at yet: waiting in a subscription's queue, or being
// taken (accept) right now. A caller's invocation and its later claim
// come to the executor in order, but on separate subscriptions, each
// handled on its own goroutine: under load the claim can be answered
// while the invocation still waits its turn, and "unknown" would then
// make the caller give up on a call that is about to run.
func (e *Executor) behind() bool {
	if e.accepting.Load() > 0 {
		return true
	}
	for _, sub := range e.invokeSubs {
		if n, _, err := sub.Pending(); err == nil && n > 0 {
			return true
		}
	}
	return e.intake.pending()
}

// idMemory is how many ids of calls an executor remembers (see idRing):
// enough for the calls on their way to it, or whose results are on their
// way to their callers, when their callers give up, while a flood of
// cancels costs a bounded map.
const idMemory = 4096

// idRing remembers the last idMemory ids added, oldest forgotten first:
// the calls whose callers gave up before the call reached this executor,
// and the calls whose results it sent. Guarded by Executor.mu.
type idRing struct {
	ids   map[string]struct{}
	order []string
	next  int
}

func (r *idRing) add(id string) {
	if r.ids == nil {
		r.ids = make(map[string]struct{}, idMemory)
		r.order = make([]string, idMemory)
	}
	if _, ok := r.ids[id]; ok {
		return
	}
	delete(r.ids, r.order[r.next])
	r.order[r.next] = id
	r.next = (r.next + 1) % idMemory
	r.ids[id] = struct{}{}
}

func (r *idRing) has(id string) bool {
	_, ok := r.ids[id]
	return ok
}

// take reports whether id is remembered, and forgets it.
func (r *idRing) take(id string) bool {
	if !r.has(id) {
		return false
	}
	delete(r.ids, id)
	return true
}

// A result sent to a caller can be lost on the way without the executor
// knowing: the bus node between them goes, with the result in its
// sockets. The caller then hears nothing, finds no executor that claims
// the call, and gives up; the executor that finished it answers
// GaveUpSent. To make that give-up a success after all, the executor
// keeps the results it sent for a while (sentResults) and sends the one
// the caller gave up on again, before it answers: the caller waits for
// it (Client.Invoke).

// Bounds of the results kept: the last idMemory results, at most
// keptResultBytes in all; a result larger than keptResultMax is not kept.
const (
	keptResultBytes = 16 << 20
	keptResultMax   = 256 << 10
)

// sentResults keeps the last results sent, by invocation id, within the
// bounds above. Safe for concurrent use.
type sentResults struct {
	mu    sync.Mutex
	byID  map[string]keptResult
	order []string
	next  int
	bytes int
}

type keptResult struct {
	reply, principal string
	data             []byte
}

// keep remembers data, sent to reply for principal's call id.
func (s *sentResults) keep(id, reply, principal string, data []byte) {
	if len(data) > keptResultMax || reply == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = make(map[string]keptResult, idMemory)
		s.order = make([]string, idMemory)
	}
	if _, ok := s.byID[id]; ok {
		return
	}
	s.forget(s.order[s.next])
	for s.bytes+len(data) > keptResultBytes && len(s.byID) > 0 {
		// Over the byte budget: the oldest go first.
		for i := 1; i <= idMemory; i++ {
			if old := s.order[(s.next+i)%idMemory]; old != "" {
				if _, ok := s.byID[old]; ok {
					s.forget(old)
					break
				}
			}
		}
	}
	s.order[s.next] = id
	s.next = (s.next + 1) % idMemory
	s.byID[id] = keptResult{reply: reply, principal: principal, data: data}
	s.bytes += len(data)
}

func (s *sentResults) forget(id string) {
	if r, ok := s.byID[id]; ok {
		s.bytes -= len(r.data)
		delete(s.byID, id)
	}
}

// get returns the kept result of call id.
func (s *sentResults) get(id string) (keptResult, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byID[id]
	return r, ok
}
