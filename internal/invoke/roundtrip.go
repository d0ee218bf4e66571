package invoke

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/telemetry"
)

// roundTrip sends a request whose answer comes to this client's inbox and
// waits for it, hearing heartbeats and progress on the way. It returns the
// answer, or the failure the caller should report instead.
//
// After LostAfter without a word it asks whether an executor still runs
// the call (the one its heartbeats named, or any): one that does is
// waited for, and so is one that is behind (it has invocations it has not
// looked at yet, this one perhaps), until UnansweredFor. Only when none
// does or may is the call lost. Whenever it gives up, it tells the
// executors first (GiveUp), so that a result still to come is recorded as
// late.
func (c *Client) roundTrip(ctx context.Context, subject, id string, attempt int, data []byte, w *Watch) (*nats.Msg, *failure, error) {
	if err := c.start(); err != nil {
		return nil, nil, err
	}
	// A call is asked to confirm once, and again after each edit an
	// approver makes: a few slots, never dropped in practice.
	p := &pending{result: make(chan *nats.Msg, 1), events: make(chan *nats.Msg, 64), confirm: make(chan *nats.Msg, 4),
		asks: make(chan *nats.Msg, maxOpenServerRequests), fence: make(chan struct{}, 1)}
	// The reply token is ours, not the invocation id, which may hold dots.
	// A correlation id: it names a reply inside this client's own inbox,
	// which no other account hears or publishes to.
	token := nuid.Next()
	c.mu.Lock()
	c.calls[token] = p
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, token)
		c.mu.Unlock()
	}()
	m := &nats.Msg{Subject: subject, Reply: c.prefix + token, Data: data}
	telemetry.ToHeader(ctx, m) // the caller's trace, when it has one: the executor's spans are its children
	if err := c.nc.PublishMsg(m); err != nil {
		return nil, nil, err
	}
	wt := &wait{c: c, p: p, id: id, attempt: attempt, token: token, w: w, heard: time.Now()}
	lost := time.NewTimer(LostAfter)
	defer lost.Stop()
	for {
		select {
		case m := <-p.result:
			return wt.answered(m)
		case m := <-p.confirm:
			c.confirm(m, w)
			wt.heard = time.Now()
			lost.Reset(LostAfter)
		case m := <-p.asks:
			c.serverRequest(m, w)
			wt.heard = time.Now()
			lost.Reset(LostAfter)
		case m := <-p.events:
			w.hear(m, time.Now())
			if x := m.Header.Get(events.ExecutorHeader); x != "" {
				wt.executor = x
			}
			if m.Header.Get(events.RetryableHeader) != "" {
				wt.retryable = true
			}
			wt.heard = time.Now()
			lost.Reset(LostAfter)
		case <-lost.C:
			if next, silent := wt.silence(ctx); !silent {
				lost.Reset(next)
				continue
			}
			if m := c.fence(p, token); m != nil {
				return wt.answered(m)
			}
			silent := time.Since(wt.heard).Round(time.Second)
			return wt.giveUp(fmt.Sprintf("no executor runs the call: none answered for %s, and none claims it", silent),
				events.ToolError{Type: events.ErrExecutorLost, Message: fmt.Sprintf("No executor answered or reported progress for %s, and none claims the call; the executor that took it is gone or none is running.", silent)})
		case <-ctx.Done():
			select {
			case m := <-p.result:
				// The result came with the deadline: it is the call's
				// one terminal result, not a late one.
				return wt.answered(m)
			default:
			}
			fail := events.ToolError{Type: events.ErrTimeout, Message: "The call did not finish before the caller's deadline; it was cancelled."}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				fail = events.ToolError{Type: events.ErrCancelled, Message: fmt.Sprintf("The caller stopped waiting (%v); the call was cancelled.", context.Cause(ctx))}
			}
			return wt.giveUp("the caller stopped waiting: "+context.Cause(ctx).Error(), fail)
		}
	}
}

// wait is one call's wait for its answer in roundTrip.
type wait struct {
	c       *Client
	p       *pending
	id      string // the invocation's or batch's id
	attempt int    // the invocation's attempt (events.Invocation.Attempt)
	token   string // the reply subject's last token
	w       *Watch
	// executor is the one that runs the call, once a heartbeat or a
	// claim names it; heard is when the last heartbeat, progress or
	// claim came.
	executor string
	heard    time.Time
	// retryable: the executor said the call's decision marks it
	// idempotent (events.RetryableHeader).
	retryable bool
}

// silence is what a wait does when nothing was heard for a while: it asks
// whether an executor still runs the call (claim). It returns how long
// to wait before asking again, or silent when no executor does or may,
// and the call is to be given up. A caller whose own deadline passed
// waits on: the deadline is reported as such.
func (wt *wait) silence(ctx context.Context) (next time.Duration, silent bool) {
	switch wt.c.claim(ctx, wt.id, &wt.executor) {
	case claimed:
		wt.heard = time.Now()
		return LostAfter, false
	case unanswered:
		// The executors that should answer are connected (one that is
		// gone gives "no responders") but silent: overloaded, frozen or
		// cut off. They are asked again until UnansweredFor.
		if time.Since(wt.heard) < UnansweredFor {
			return HeartbeatEvery, false
		}
	}
	if ctx.Err() != nil {
		return LostAfter, false
	}
	return 0, true
}

// answered hands over the progress queued before the answer m, and
// returns m, or the failure of a forwarded call that found no one.
func (wt *wait) answered(m *nats.Msg) (*nats.Msg, *failure, error) {
	// Progress sent before the result is already queued (one
	// subscription delivers in order): hand it over first.
	for drained := false; !drained; {
		select {
		case ev := <-wt.p.events:
			wt.w.hear(ev, time.Now())
		default:
			drained = true
		}
	}
	if m.Header.Get("Status") == "503" {
		// A forwarded call found no one at the executor that hosts the
		// tool: it is gone.
		return nil, &failure{ToolError: events.ToolError{Type: events.ErrExecutorLost, Message: "The executor that hosts the tool is gone."}}, nil
	}
	return m, nil, nil
}

// giveUp ends the wait without the result: the executors hear it first,
// and one that sent the result already (it crossed the give-up) says so,
// and the result is waited for after all.
func (wt *wait) giveUp(reason string, fail events.ToolError) (*nats.Msg, *failure, error) {
	if !wt.c.giveUp(wt.id, wt.attempt, reason) {
		return nil, &failure{ToolError: fail, retryable: wt.retryable}, nil
	}
	t := time.NewTimer(claimWait)
	defer t.Stop()
	select {
	case m := <-wt.p.result:
		return wt.answered(m)
	case <-t.C:
		return nil, &failure{ToolError: fail, recorded: true}, nil
	}
}

// confirm hands a confirmation request sent to the caller to w.Confirm.
// One that does not decode, or a caller with no use for it, leaves it to
// the approvers on tool.confirm.
func (c *Client) confirm(m *nats.Msg, w *Watch) {
	if w == nil || w.Confirm == nil {
		return
	}
	req, err := events.Decode[events.ConfirmRequest](m.Data)
	if err != nil || req.AnswerTo == "" {
		return
	}
	w.Confirm(req)
}
