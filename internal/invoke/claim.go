package invoke

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// claimWait is how long a caller waits for answers to a claim. An
// executor answers from a subscription of its own, within milliseconds
// unless its machine is overloaded.
const claimWait = 2 * HeartbeatEvery

// claimAnswer is what asking about a call gave.
type claimAnswer int

const (
	claimed    claimAnswer = iota // an executor runs it
	notRunning                    // the executor asked does not, or is gone; or every executor that answered does not
	unanswered                    // no answer in claimWait
)

// claim asks whether an executor still runs call id: the one named in
// *executor, or, when no heartbeat named one yet, every executor, each of
// which answers. An executor that is gone gives "no responders" at once,
// since the claim subjects are outside the audit stream's tool.>.
func (c *Client) claim(ctx context.Context, id string, executor *string) claimAnswer {
	subject := events.ClaimAllSubject
	if *executor != "" {
		subject = events.ClaimSubject(*executor)
	}
	answer, behind := unanswered, false
	c.gather(ctx, subject, []byte(id), func(m *nats.Msg) bool {
		switch {
		case m.Header.Get("Status") == "503": // no responders
			answer = notRunning
			return true
		case string(m.Data) == events.ClaimRunning:
			if x := m.Header.Get(events.ExecutorHeader); x != "" {
				*executor = x
			}
			answer = claimed
			return true
		case string(m.Data) == events.ClaimBehind:
			// It has invocations it has not looked at yet, and this
			// call may be one: as good as no answer, for now.
			behind = true
		}
		// Another executor does not run it; when all were asked, the
		// one that does may still answer.
		answer = notRunning
		return subject != events.ClaimAllSubject
	})
	if answer == notRunning && behind {
		return unanswered
	}
	return answer
}

// gather sends a request that several executors may answer and hands
// each answer, "no responders" included, to settled until it reports that
// one settles the question, for at most claimWait.
func (c *Client) gather(ctx context.Context, subject string, data []byte, settled func(*nats.Msg) bool) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return
	}
	defer sub.Unsubscribe()
	if err := c.nc.PublishRequest(subject, inbox, data); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, claimWait)
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if errors.Is(err, nats.ErrNoResponders) {
			// nats.go hands the server's "no responders" status to a
			// synchronous subscription as an error, not a message: none
			// is listening, which answers the question at once.
			m, err = &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}, nil
		}
		if err != nil || settled(m) {
			return
		}
	}
}

// fence makes sure no result is on its way before the call is given up:
// an executor sends a call's result before it stops claiming the call,
// and the server hands this client what an executor sent in order, so a
// marker the client sends itself after the claim was refused comes back
// after any such result. It returns the result if one came.
func (c *Client) fence(p *pending, token string) *nats.Msg {
	m := nats.NewMsg(c.prefix + token)
	m.Header.Set(events.KindHeader, events.KindFence)
	if err := c.nc.PublishMsg(m); err != nil {
		return nil
	}
	t := time.NewTimer(claimWait)
	defer t.Stop()
	select {
	case r := <-p.result:
		return r
	case <-p.fence:
		select {
		case r := <-p.result:
			return r
		default:
			return nil
		}
	case <-t.C:
		return nil
	}
}

// failure is what a caller reports instead of a result it did not get.
type failure struct {
	events.ToolError
	// recorded: the executor records the call's terminal result itself
	// (it sent it as the caller gave up, or it coordinates the batch), so
	// the caller publishes none of its own.
	recorded bool
	// retryable: the executor said, before it fell silent, that the
	// call's decision marks it idempotent.
	retryable bool
}

// GiveUp tells the executors that the caller stopped waiting for call id,
// and hears from them who records the call's terminal result. It reports
// true when an executor does (events.GaveUpSent): it sent the result
// already, as the caller gave up. Otherwise the caller does: the executor
// that runs the call stops it and marks what it still sends Late, and one
// the call has not reached yet refuses it. It waits for an answer that
// settles it at most claimWait: executors that are gone give "no
// responders" at once, and an executor cut off from the bus cannot
// answer, which leaves the caller to record the result.
func (c *Client) GiveUp(id, reason string) (recorded bool) {
	return c.giveUp(id, 0, reason)
}

// giveUp is GiveUp of one attempt of call id.
func (c *Client) giveUp(id string, attempt int, reason string) (recorded bool) {
	data, err := events.Encode(&events.CancelRequest{Header: events.Header{Sender: c.id}, InvocationID: id, Reason: reason, GaveUp: true, Attempt: attempt})
	if err != nil {
		return false
	}
	c.gather(context.Background(), c.cancelSubject(), data, func(m *nats.Msg) bool {
		switch {
		case m.Header.Get("Status") == "503": // no executor at all
			return true
		case string(m.Data) == events.GaveUpSent:
			recorded = true
			return true
		}
		// GaveUpLate settles it; an executor that has not seen the call
		// does not: another may run it.
		return string(m.Data) == events.GaveUpLate
	})
	return recorded
}

// synthesize makes the result of a call whose executor cannot give one,
// and publishes it, so the audit trail has a terminal result for it too,
// unless the executor records it (failure.recorded).
func (c *Client) synthesize(inv *events.Invocation, fail *failure) *events.Result {
	res := &events.Result{Header: events.Header{Sender: c.id}, InvocationID: inv.ID, Tool: inv.Tool,
		LLMContent: fail.Message, ReturnDisplay: fail.Message, Error: &events.ToolError{Type: fail.Type, Message: fail.Message}}
	if inv.Attempt > 1 {
		res.Attempt = inv.Attempt
	}
	if fail.recorded {
		return res
	}
	data, err := events.Encode(res)
	if err != nil {
		return res
	}
	// Waited for: the caller may exit right after, and a node may have
	// been lost with the executor.
	ctx, cancel := context.WithTimeout(context.Background(), callerRecordWait)
	defer cancel()
	if c.forOthers {
		// An executor's own client records as executors do.
		err = bus.RecordOnce(ctx, c.nc, events.SubjectResult, "caller-result."+c.principal+"."+inv.ID, data)
	} else {
		// A caller has an executor record it (executor/callerrecord.go).
		var reply *nats.Msg
		if reply, err = c.nc.RequestWithContext(ctx, events.CallerRecordSubject(c.principal), data); err == nil && string(reply.Data) != events.CallerRecordKept {
			err = errors.New(string(reply.Data))
		}
	}
	if err != nil {
		slog.Default().Warn("the terminal result of a lost call was not recorded", "invocation", inv.ID, "err", err)
	}
	return res
}
