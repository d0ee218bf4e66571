package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// ErrNoExecutor means no executor is running on the bus.
var ErrNoExecutor = errors.New("no executor is running on this bus")

// Client invokes tools. One subscription serves all its calls, so a call
// costs one request message and one result message, as a plain NATS
// request does. It is safe for concurrent use; Close it.
type Client struct {
	nc     *nats.Conn
	id     events.Identity
	prefix string
	// principal is the fleet identity nc connects with ("" without
	// one): the subjects its calls go on name it (events.InvokeSubject).
	principal string
	// forOthers: an executor's client, sending the calls of batches for
	// their callers; it gives them up on SubjectCancel and records their
	// results on SubjectResult, as executors do.
	forOthers bool

	once sync.Once
	sub  *nats.Subscription
	err  error

	mu    sync.Mutex
	calls map[string]*pending
}

// pending is a call waiting for its result. Heartbeats and progress go to
// events, which drops what a slow reader has no room for; the result has a
// slot of its own and is never dropped, and so has the client's own fence.
type pending struct {
	result  chan *nats.Msg
	events  chan *nats.Msg
	confirm chan *nats.Msg
	fence   chan struct{}
}

// Watch is what a caller hears of its call before the result. Either
// field may be nil.
type Watch struct {
	// Progress receives output as the tool produces it.
	Progress func(chunk string)
	// Confirm receives the confirmation request of a call that asked to
	// confirm through its own user (Invocation.CallerConfirms) when the
	// policy lets that user answer it. The caller answers it as any
	// approver does (to AnswerTo, as events.AgentUser of the caller), or
	// leaves it to the approvers on tool.confirm. It must not block: the
	// wait for the result goes on while the user decides.
	Confirm func(*events.ConfirmRequest)
}

func (w *Watch) progress(m *nats.Msg) {
	if w != nil && w.Progress != nil && m.Header.Get(events.KindHeader) == events.KindProgress {
		w.Progress(string(m.Data))
	}
}

// NewClient returns a client that invokes as id over nc, which connects
// with the fleet identity principal ("" for none: bus.Bus.Principal).
// With one, the caller is who the identity is: id's ID becomes principal
// unless it names it already (principal, or principal/…), since the
// executor refuses a caller that names another.
func NewClient(nc *nats.Conn, id events.Identity, principal string) *Client {
	id.ID = underPrincipal(id.ID, principal, false)
	return &Client{nc: nc, id: id, prefix: nc.NewInbox() + ".", principal: principal, calls: make(map[string]*pending)}
}

// underPrincipal is the caller id that id becomes under principal: id
// itself when it names principal, else principal (replace) or
// principal/id.
func underPrincipal(id, principal string, keep bool) string {
	switch {
	case principal == "" || id == principal || strings.HasPrefix(id, principal+"/"):
		return id
	case keep && id != "":
		return principal + "/" + id
	default:
		return principal
	}
}

// Close stops the client's subscription. Calls in flight end with
// CANCELLED.
func (c *Client) Close() error {
	if c.sub != nil {
		return c.sub.Unsubscribe()
	}
	return nil
}

func (c *Client) start() error {
	c.once.Do(func() {
		c.sub, c.err = c.nc.Subscribe(c.prefix+"*", func(m *nats.Msg) {
			c.mu.Lock()
			p := c.calls[m.Subject[len(c.prefix):]]
			c.mu.Unlock()
			if p == nil {
				return
			}
			ch := p.events
			switch m.Header.Get(events.KindHeader) {
			case "":
				ch = p.result
			case events.KindConfirm:
				ch = p.confirm
			case events.KindFence:
				select {
				case p.fence <- struct{}{}:
				default:
				}
				return
			}
			select {
			case ch <- m:
			default:
			}
		})
		if c.err == nil {
			c.err = c.sub.SetPendingLimits(1<<20, 1<<30)
		}
	})
	return c.err
}

// Invoke runs one call and returns its result. Failures of the call
// itself (denied, invalid, timed out, executor lost) are results with
// Error set; an error return means the call could not be made. progress,
// when not nil, receives output as the tool produces it.
//
// The deadline of ctx bounds the whole call; when it passes, the call is
// cancelled on the executor and the result is TIMEOUT. If the executor
// falls silent (no result and no heartbeat for LostAfter), the result is
// EXECUTOR_LOST.
func (c *Client) Invoke(ctx context.Context, inv *events.Invocation, progress func(string)) (*events.Result, error) {
	inv.Sender = c.id
	return c.invoke(ctx, inv, &Watch{Progress: progress})
}

// InvokeAs is Invoke on behalf of inv.Sender, for a client that calls for
// many callers (the MCP facade, one caller per MCP session). The sender
// is still a claim (see policy/README.md). w may be nil.
func (c *Client) InvokeAs(ctx context.Context, inv *events.Invocation, w *Watch) (*events.Result, error) {
	if inv.Sender.ID == "" {
		return nil, errors.New("InvokeAs: the invocation names no sender")
	}
	// With an identity, the callers a client speaks for are its own:
	// "principal/<their id>".
	inv.Sender.ID = underPrincipal(inv.Sender.ID, c.principal, true)
	return c.invoke(ctx, inv, w)
}

// invoke sends inv with the sender it has, on the client's subject.
func (c *Client) invoke(ctx context.Context, inv *events.Invocation, w *Watch) (*events.Result, error) {
	return c.invokeAs(ctx, inv, c.principal, w)
}

// invokeAs sends inv on the subject of principal: an executor's client
// sends a batch's calls for the batch's principal.
func (c *Client) invokeAs(ctx context.Context, inv *events.Invocation, principal string, w *Watch) (*events.Result, error) {
	if inv.ID == "" {
		inv.ID = nuid.Next()
	}
	data, err := events.Encode(inv)
	if err != nil {
		return nil, err
	}
	m, fail, err := c.roundTrip(ctx, events.InvokeSubject(principal), inv.ID, data, w)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		return c.synthesize(inv, fail), nil
	}
	res, err := events.Decode[events.Result](m.Data)
	if err != nil {
		return nil, fmt.Errorf("the executor's result does not decode: %w", err)
	}
	return res, nil
}

// InvokeBatch runs several calls in one request (see BatchInvocation) and
// returns one result per call, in order.
func (c *Client) InvokeBatch(ctx context.Context, b *events.BatchInvocation) (*events.BatchResult, error) {
	b.Sender = c.id
	if b.ID == "" {
		b.ID = nuid.Next()
	}
	data, err := events.Encode(b)
	if err != nil {
		return nil, err
	}
	m, fail, err := c.roundTrip(ctx, events.InvokeBatchSubject(c.principal), b.ID, data, nil)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		out := &events.BatchResult{Header: events.Header{Sender: c.id}, BatchID: b.ID}
		for i, call := range b.Calls {
			inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("%s.%d", b.ID, i)}, Tool: call.Tool}
			out.Results = append(out.Results, *c.synthesize(inv, fail))
		}
		return out, nil
	}
	res, err := events.Decode[events.BatchResult](m.Data)
	if err != nil {
		return nil, fmt.Errorf("the batch result does not decode: %w", err)
	}
	return res, nil
}

// roundTrip sends a request whose answer comes to this client's inbox and
// waits for it, hearing heartbeats and progress on the way. It returns the
// answer, or the failure the caller should report instead.
//
// After LostAfter without a word it asks whether an executor still runs
// the call (the one its heartbeats named, or any): one that does is
// waited for, and so is one that is behind (it has invocations it has not
// looked at yet, this one perhaps), until UnansweredFor. Only when none
// does or may is the call lost. Whenever it gives up,
// it tells the executors first (giveUp), so that a result still to come
// is recorded as late.
func (c *Client) roundTrip(ctx context.Context, subject, id string, data []byte, w *Watch) (*nats.Msg, *failure, error) {
	if err := c.start(); err != nil {
		return nil, nil, err
	}
	// A call is asked to confirm once, and again after each edit an
	// approver makes: a few slots, never dropped in practice.
	p := &pending{result: make(chan *nats.Msg, 1), events: make(chan *nats.Msg, 64), confirm: make(chan *nats.Msg, 4), fence: make(chan struct{}, 1)}
	// The reply token is ours, not the invocation id, which may hold dots.
	token := nuid.Next()
	c.mu.Lock()
	c.calls[token] = p
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, token)
		c.mu.Unlock()
	}()
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: c.prefix + token, Data: data}); err != nil {
		return nil, nil, err
	}
	answered := func(m *nats.Msg) (*nats.Msg, *failure, error) {
		// Progress sent before the result is already queued (one
		// subscription delivers in order): hand it over first.
		for drained := false; !drained; {
			select {
			case ev := <-p.events:
				w.progress(ev)
			default:
				drained = true
			}
		}
		if m.Header.Get("Status") == "503" {
			// A forwarded call found no one at the executor that hosts
			// the tool: it is gone.
			return nil, &failure{ToolError: events.ToolError{Type: events.ErrExecutorLost, Message: "The executor that hosts the tool is gone."}}, nil
		}
		return m, nil, nil
	}
	// giveUp ends the wait without the result: the executors hear it
	// first, and one that sent the result already (it crossed the
	// give-up) says so, and the result is waited for after all.
	giveUp := func(reason string, fail events.ToolError) (*nats.Msg, *failure, error) {
		if !c.giveUp(id, reason) {
			return nil, &failure{ToolError: fail}, nil
		}
		t := time.NewTimer(claimWait)
		defer t.Stop()
		select {
		case m := <-p.result:
			return answered(m)
		case <-t.C:
			return nil, &failure{ToolError: fail, recorded: true}, nil
		}
	}
	lost := time.NewTimer(LostAfter)
	defer lost.Stop()
	executor := ""      // the one that runs the call, once a heartbeat names it
	heard := time.Now() // the last heartbeat, progress or claim
	for {
		select {
		case m := <-p.result:
			return answered(m)
		case m := <-p.confirm:
			c.confirm(m, w)
			heard = time.Now()
			lost.Reset(LostAfter)
		case m := <-p.events:
			w.progress(m)
			if x := m.Header.Get(events.ExecutorHeader); x != "" {
				executor = x
			}
			heard = time.Now()
			lost.Reset(LostAfter)
		case <-lost.C:
			switch c.claim(ctx, id, &executor) {
			case claimed:
				heard = time.Now()
				lost.Reset(LostAfter)
				continue
			case unanswered:
				// The executors that should answer are connected (one
				// that is gone gives "no responders") but silent:
				// overloaded, frozen or cut off. They are asked again
				// until UnansweredFor.
				if time.Since(heard) < UnansweredFor {
					lost.Reset(HeartbeatEvery)
					continue
				}
			}
			if ctx.Err() != nil {
				continue // the caller's own deadline, reported as such
			}
			if m := c.fence(p, token); m != nil {
				return answered(m)
			}
			silent := time.Since(heard).Round(time.Second)
			return giveUp(fmt.Sprintf("no executor runs the call: none answered for %s, and none claims it", silent),
				events.ToolError{Type: events.ErrExecutorLost, Message: fmt.Sprintf("No executor answered or reported progress for %s, and none claims the call; the executor that took it is gone or none is running.", silent)})
		case <-ctx.Done():
			select {
			case m := <-p.result:
				// The result came with the deadline: it is the call's
				// one terminal result, not a late one.
				return answered(m)
			default:
			}
			t := events.ErrCancelled
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t = events.ErrTimeout
			}
			return giveUp("the caller stopped waiting: "+ctx.Err().Error(),
				events.ToolError{Type: t, Message: "The call did not finish before the caller's deadline; it was cancelled."})
		}
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
	subject := events.ClaimSubject
	if *executor != "" {
		subject = ClaimSubject(*executor)
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
		return subject != events.ClaimSubject
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
}

// giveUp tells the executors that the caller stopped waiting for call id,
// and hears from them who records the call's terminal result. It reports
// true when an executor does (events.GaveUpSent): it sent the result
// already, as the caller gave up. Otherwise the caller does: the executor
// that runs the call stops it and marks what it still sends Late, and one
// the call has not reached yet refuses it. It waits for an answer that
// settles it at most claimWait: executors that are gone give "no
// responders" at once, and an executor cut off from the bus cannot
// answer, which leaves the caller to record the result.
func (c *Client) giveUp(id, reason string) (recorded bool) {
	data, err := events.Encode(&events.CancelRequest{Header: events.Header{Sender: c.id}, InvocationID: id, Reason: reason, GaveUp: true})
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

// errBatchAbandoned ends a batch whose caller gave up: its calls still
// running are given up in turn by the executor's client, which records
// their terminal results.
var errBatchAbandoned = errors.New("the batch's caller gave up")

// synthesize makes the result of a call whose executor cannot give one,
// and publishes it, so the audit trail has a terminal result for it too,
// unless the executor records it (failure.recorded).
func (c *Client) synthesize(inv *events.Invocation, fail *failure) *events.Result {
	res := &events.Result{Header: events.Header{Sender: c.id}, InvocationID: inv.ID, Tool: inv.Tool,
		LLMContent: fail.Message, ReturnDisplay: fail.Message, Error: &events.ToolError{Type: fail.Type, Message: fail.Message}}
	if fail.recorded {
		return res
	}
	subject := events.CallerResultSubject(c.principal)
	if c.forOthers {
		subject = events.SubjectResult
	}
	if data, err := events.Encode(res); err == nil {
		// Waited for: the caller may exit right after, and a node may
		// have been lost with the executor.
		ctx, cancel := context.WithTimeout(context.Background(), callerRecordWait)
		if err := bus.RecordOnce(ctx, c.nc, subject, "caller-result."+inv.ID, data); err != nil {
			slog.Default().Warn("the terminal result of a lost call was not recorded", "invocation", inv.ID, "err", err)
		}
		cancel()
	}
	return res
}

// callerRecordWait bounds how long a caller tries to record a result.
const callerRecordWait = 15 * time.Second

// Cancel asks for invocation id to be cancelled. It returns once the
// server has the request (or ctx ends), so a caller that exits right
// after does not lose it in its connection's buffer.
func (c *Client) Cancel(ctx context.Context, id, reason string) error {
	data, err := events.Encode(&events.CancelRequest{Header: events.Header{Sender: c.id}, InvocationID: id, Reason: reason})
	if err != nil {
		return err
	}
	if err := c.nc.Publish(c.cancelSubject(), data); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		// nats.go flushes only under a deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, claimWait)
		defer cancel()
	}
	return c.nc.FlushWithContext(ctx)
}

// cancelSubject is where this client cancels and gives up its calls.
func (c *Client) cancelSubject() string {
	if c.forOthers {
		return events.Request(events.SubjectCancel)
	}
	return events.CancelSubject(c.principal)
}

// Ping checks that an executor is running, failing at once with
// ErrNoExecutor when none is.
func (c *Client) Ping(ctx context.Context) error {
	subject, _ := micro.ControlSubject(micro.PingVerb, events.ExecutorService, "")
	_, err := c.nc.RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoExecutor
	}
	return err
}
