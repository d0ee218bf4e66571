package executor

import (
	"encoding/base64"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// Exactly one terminal result per invocation, from both ends:
//
//   - A caller that hears nothing of its call for LostAfter asks whether
//     an executor still runs it (handleClaim) before it reports
//     EXECUTOR_LOST; a call that is running, storing its output
//     included, is claimed and never reported lost.
//   - A caller that gives up (its deadline, a cancel, or no executor
//     claiming the call) says so with a CancelRequest with GaveUp before
//     it publishes its own terminal result. The executor then marks the
//     result it still sends Late, and refuses a call it has not seen yet
//     (abandoned).
//
// What remains: a give-up and a result that cross. An executor that is
// cut off from the bus (a partition, a frozen process whose connection
// the server still holds) cannot claim its call or hear the give-up, and
// an executor that sends its result at the moment the caller gives up has
// not seen the give-up yet; both publish a result without Late after the
// caller's. An auditor tells them apart by order: the caller's result
// (sender: the caller, error EXECUTOR_LOST, TIMEOUT or CANCELLED) follows
// the caller's GaveUp cancel in the stream, and an executor's result that
// comes after that cancel without Late is one of these crossings; the
// first result after the invocation is the one the caller acted on.

// ClaimSubject is where executor id answers whether it runs a call.
func ClaimSubject(id string) string {
	return events.ClaimSubjectPrefix + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// handleClaim answers whether this executor runs the invocation (or
// coordinates the batch) the request names.
func (e *Executor) handleClaim(m *nats.Msg) {
	id := string(m.Data)
	e.mu.Lock()
	_, running := e.running[id]
	if !running {
		_, running = e.batches[id]
	}
	e.mu.Unlock()
	answer := nats.NewMsg(m.Reply)
	answer.Header.Set(events.ExecutorHeader, e.id.ID)
	answer.Data = []byte(events.ClaimUnknown)
	if running {
		answer.Data = []byte(events.ClaimRunning)
	}
	_ = m.RespondMsg(answer)
}

// abandonedMemory is how many give-ups for calls it has not seen an
// executor remembers: enough for the calls on their way to it when their
// callers give up, while a flood of cancels costs a bounded map.
const abandonedMemory = 4096

// abandoned remembers the ids of calls whose callers gave up before the
// call reached this executor, oldest forgotten first. Guarded by
// Executor.mu.
type abandoned struct {
	ids   map[string]struct{}
	order []string
	next  int
}

func (a *abandoned) add(id string) {
	if a.ids == nil {
		a.ids = make(map[string]struct{}, abandonedMemory)
		a.order = make([]string, abandonedMemory)
	}
	if _, ok := a.ids[id]; ok {
		return
	}
	delete(a.ids, a.order[a.next])
	a.order[a.next] = id
	a.next = (a.next + 1) % abandonedMemory
	a.ids[id] = struct{}{}
}

// take reports whether id was abandoned, and forgets it.
func (a *abandoned) take(id string) bool {
	if _, ok := a.ids[id]; !ok {
		return false
	}
	delete(a.ids, id)
	return true
}
