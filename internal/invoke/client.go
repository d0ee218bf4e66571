// Package invoke is the caller's half of the invoke protocol: a Client
// sends invocations and batches on the caller's subjects and waits for
// their one terminal result, hearing heartbeats, progress and
// confirmation requests on the way; it asks whether an executor still
// runs a call it has heard nothing of (claims), gives calls up so that
// exactly one terminal result is recorded, cancels, and reads stored
// outputs. It depends only on nats.go, the wire contract
// (internal/events) and the audit stream's helpers (internal/bus), so a
// caller links no server, policy engine or tool.
package invoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

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

	// noRetry and retryTimeout: see WithoutRetries, WithRetryTimeout.
	noRetry      bool
	retryTimeout time.Duration
}

// pending is a call waiting for its result. Heartbeats and progress go to
// events, which drops what a slow reader has no room for; the result has a
// slot of its own and is never dropped, and so has the client's own fence.
type pending struct {
	result  chan *nats.Msg
	events  chan *nats.Msg
	confirm chan *nats.Msg
	asks    chan *nats.Msg // the requests of the call's MCP server
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
	// Waiting is told that the call waits for a person's answer (the
	// policy asked for one), until when and where one is given: once
	// per round of confirmation. It must not block.
	Waiting func(*Waiting)
	// Queued is told that the call waits in line for a slot of a limit
	// of calls at once the policy set. It must not block.
	Queued func(*events.Queued)
	// Log receives the log messages of the MCP server that serves the
	// call, each the params of its notifications/message as it sent them
	// (level, logger, data). It must not block.
	Log func(params json.RawMessage)
	// ServerRequest receives a request the MCP server serving the call
	// makes of the caller's own client (Invocation.ServerRequests). The
	// caller answers it with Client.AnswerServerRequest, with the client's
	// result or an error; the server waits for the answer meanwhile. It
	// must not block. When it is nil, the invocation says the caller
	// takes no requests (its ServerRequests are dropped), and the
	// executor refuses them at once.
	ServerRequest func(*events.ServerRequest)
}

// Waiting is a call's notice that it waits for a person's answer.
type Waiting struct {
	events.ConfirmWaiting
	// Deadline is when the executor stops waiting, on this host's
	// clock: when the notice came, plus DeadlineMillis.
	Deadline time.Time
}

// Message says for a person what the call waits for, how long it may
// still wait at now, and where it is approved: "waiting for approval of
// write_file (edits ask) — 4m59s left; to approve it, run `toolbus
// confirm`…".
func (w *Waiting) Message(now time.Time) string {
	var b strings.Builder
	b.WriteString("waiting for approval of " + w.Tool)
	if w.Reason != "" {
		b.WriteString(" (" + w.Reason + ")")
	}
	fmt.Fprintf(&b, " — %s left", max(w.Deadline.Sub(now), 0).Round(time.Second))
	if w.Hint != "" {
		b.WriteString("; to approve it, " + w.Hint)
	}
	return b.String()
}

// String is Message now.
func (w *Waiting) String() string { return w.Message(time.Now()) }

// QueuedMessage says for a person that a call waits in line for a slot of
// a limit: "queued: number 2 in line for a slot of the limit "execute
// calls at once", for at most 2m0s".
func QueuedMessage(q *events.Queued) string {
	return fmt.Sprintf("queued: number %d in line for a slot of the limit %q, for at most %s", q.Position, q.Limit, time.Duration(q.DeadlineMillis)*time.Millisecond)
}

// hear hands what the executor sent before the result (m, received at
// at) to w: output to Progress, a waiting notice to Waiting; heartbeats
// and what does not decode to nobody.
func (w *Watch) hear(m *nats.Msg, at time.Time) {
	if w == nil {
		return
	}
	switch m.Header.Get(events.KindHeader) {
	case events.KindProgress:
		if w.Progress != nil {
			w.Progress(string(m.Data))
		}
	case events.KindLog:
		if w.Log != nil {
			w.Log(json.RawMessage(m.Data))
		}
	case events.KindQueued:
		if w.Queued == nil {
			return
		}
		if q, err := events.Decode[events.Queued](m.Data); err == nil {
			w.Queued(q)
		}
	case events.KindWaiting:
		if w.Waiting == nil {
			return
		}
		n, err := events.Decode[events.ConfirmWaiting](m.Data)
		if err != nil {
			return
		}
		w.Waiting(&Waiting{ConfirmWaiting: *n, Deadline: at.Add(time.Duration(n.DeadlineMillis) * time.Millisecond)})
	}
}

// NewClient returns a client that invokes as id over nc, which connects
// with the fleet identity principal ("" for none: bus.Bus.Principal).
// With one, the caller is who the identity is: id's ID becomes principal
// unless it names it already (principal, or principal/…), since the
// executor refuses a caller that names another.
func NewClient(nc *nats.Conn, id events.Identity, principal string, opts ...Option) *Client {
	id.ID = underPrincipal(id.ID, principal, false)
	c := &Client{nc: nc, id: id, prefix: nc.NewInbox() + ".", principal: principal, calls: make(map[string]*pending)}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewBatchClient returns the client an executor sends the calls of
// batches with, for their callers (InvokeFor): it gives them up on
// events.SubjectCancel and records their results on events.SubjectResult,
// as executors do, where a caller uses its own subjects.
func NewBatchClient(nc *nats.Conn, id events.Identity) *Client {
	// A batch's calls are retried by nobody: the batch's coordinator
	// records their results as they end.
	c := NewClient(nc, id, "", WithoutRetries())
	c.forOthers = true
	return c
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
			if len(m.Data) == 0 && len(m.Header) == 0 {
				return // the end of an executor's answers (Executor.endAnswers)
			}
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
			case events.KindServerRequest:
				ch = p.asks
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

// InvokeWatch is Invoke with w (nil for none) to hear the call's
// output and whether it waits for a person's answer.
func (c *Client) InvokeWatch(ctx context.Context, inv *events.Invocation, w *Watch) (*events.Result, error) {
	inv.Sender = c.id
	return c.invoke(ctx, inv, w)
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

// InvokeFor sends inv on the subject of principal, for an executor's
// client (NewBatchClient) sending a batch's calls for the batch's
// principal. w may be nil.
func (c *Client) InvokeFor(ctx context.Context, inv *events.Invocation, principal string, w *Watch) (*events.Result, error) {
	return c.invokeAs(ctx, inv, principal, w)
}

// invokeAs sends inv on the subject of principal.
func (c *Client) invokeAs(ctx context.Context, inv *events.Invocation, principal string, w *Watch) (*events.Result, error) {
	if inv.ID == "" {
		// A correlation id: unique per principal, it grants nothing (a
		// cancel or an output read by it is its principal's alone).
		inv.ID = nuid.Next()
	}
	if w == nil || w.ServerRequest == nil {
		// Nobody would answer: the executor refuses the server's
		// requests at once.
		inv.ServerRequests = nil
	}
	data, err := events.Encode(inv)
	if err != nil {
		return nil, err
	}
	m, fail, err := c.roundTrip(ctx, events.InvokeSubject(principal), inv.ID, inv.Attempt, data, w)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		if c.mayRetry(ctx, inv, fail) {
			return c.retry(ctx, inv, principal, w, fail)
		}
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
		b.ID = nuid.Next() // a correlation id, as an invocation's
	}
	data, err := events.Encode(b)
	if err != nil {
		return nil, err
	}
	m, fail, err := c.roundTrip(ctx, events.InvokeBatchSubject(c.principal), b.ID, 0, data, nil)
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
