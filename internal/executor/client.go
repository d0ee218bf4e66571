package executor

import (
	"context"
	"errors"
	"fmt"
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

	once sync.Once
	sub  *nats.Subscription
	err  error

	mu    sync.Mutex
	calls map[string]*pending
}

// pending is a call waiting for its result. Heartbeats and progress go to
// events, which drops what a slow reader has no room for; the result has a
// slot of its own and is never dropped.
type pending struct {
	result chan *nats.Msg
	events chan *nats.Msg
}

// NewClient returns a client that invokes as id over nc.
func NewClient(nc *nats.Conn, id events.Identity) *Client {
	return &Client{nc: nc, id: id, prefix: nats.NewInbox() + ".", calls: make(map[string]*pending)}
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
			if m.Header.Get(events.KindHeader) == "" {
				ch = p.result
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
	return c.invoke(ctx, inv, progress)
}

// invoke sends inv with the sender it has.
func (c *Client) invoke(ctx context.Context, inv *events.Invocation, progress func(string)) (*events.Result, error) {
	if inv.ID == "" {
		inv.ID = nuid.Next()
	}
	data, err := events.Encode(inv)
	if err != nil {
		return nil, err
	}
	m, fail, err := c.roundTrip(ctx, events.SubjectInvoke, inv.ID, data, progress)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		return c.synthesize(inv, fail.Type, fail.Message), nil
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
	m, fail, err := c.roundTrip(ctx, events.SubjectInvokeBatch, b.ID, data, nil)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		out := &events.BatchResult{Header: events.Header{Sender: c.id}, BatchID: b.ID}
		for i, call := range b.Calls {
			inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("%s.%d", b.ID, i)}, Tool: call.Tool}
			out.Results = append(out.Results, *c.synthesize(inv, fail.Type, fail.Message))
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
func (c *Client) roundTrip(ctx context.Context, subject, id string, data []byte, progress func(string)) (*nats.Msg, *events.ToolError, error) {
	if err := c.start(); err != nil {
		return nil, nil, err
	}
	p := &pending{result: make(chan *nats.Msg, 1), events: make(chan *nats.Msg, 64)}
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
	lost := time.NewTimer(LostAfter)
	defer lost.Stop()
	for {
		select {
		case m := <-p.result:
			// Progress sent before the result is already queued (one
			// subscription delivers in order): hand it over first.
			for drained := false; !drained; {
				select {
				case ev := <-p.events:
					if ev.Header.Get(events.KindHeader) == events.KindProgress && progress != nil {
						progress(string(ev.Data))
					}
				default:
					drained = true
				}
			}
			if m.Header.Get("Status") == "503" {
				// A forwarded call found no one at the executor that hosts
				// the tool: it is gone.
				return nil, &events.ToolError{Type: events.ErrExecutorLost, Message: "The executor that hosts the tool is gone."}, nil
			}
			return m, nil, nil
		case m := <-p.events:
			if m.Header.Get(events.KindHeader) == events.KindProgress && progress != nil {
				progress(string(m.Data))
			}
			lost.Reset(LostAfter)
		case <-lost.C:
			return nil, &events.ToolError{Type: events.ErrExecutorLost, Message: fmt.Sprintf("No executor answered or reported progress for %s; the executor that took the call is gone or none is running.", LostAfter)}, nil
		case <-ctx.Done():
			c.Cancel(context.Background(), id, "the caller stopped waiting: "+ctx.Err().Error())
			t := events.ErrCancelled
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t = events.ErrTimeout
			}
			return nil, &events.ToolError{Type: t, Message: "The call did not finish before the caller's deadline; it was cancelled."}, nil
		}
	}
}

// synthesize makes the result of a call whose executor cannot give one,
// and publishes it, so the audit trail has a terminal result for it too.
func (c *Client) synthesize(inv *events.Invocation, t events.ErrorType, msg string) *events.Result {
	res := &events.Result{Header: events.Header{Sender: c.id}, InvocationID: inv.ID, Tool: inv.Tool,
		LLMContent: msg, ReturnDisplay: msg, Error: &events.ToolError{Type: t, Message: msg}}
	if data, err := events.Encode(res); err == nil {
		_ = c.nc.Publish(events.SubjectResult, data)
	}
	return res
}

// Cancel asks for invocation id to be cancelled.
func (c *Client) Cancel(ctx context.Context, id, reason string) error {
	data, err := events.Encode(&events.CancelRequest{Header: events.Header{Sender: c.id}, InvocationID: id, Reason: reason})
	if err != nil {
		return err
	}
	return c.nc.Publish(events.SubjectCancel, data)
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
