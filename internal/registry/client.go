package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/events"
)

// ErrNoRegistry means no registry service answers on the bus.
var ErrNoRegistry = errors.New("no registry is running on this bus")

// DefaultTimeout bounds a request to the registry when ctx has no deadline.
const DefaultTimeout = 30 * time.Second

// Client sends requests to the registry service. It is safe for concurrent
// use and holds no resources of its own.
type Client struct {
	nc *nats.Conn
	id events.Identity
}

// NewClient returns a client sending as id over nc.
func NewClient(nc *nats.Conn, id events.Identity) *Client { return &Client{nc: nc, id: id} }

// Register sends req, split into chunks when it is larger than the bus
// allows in one message, and returns the registry's combined reply. A
// refusal by the registry is returned as an error, with the reply.
//
// The chunks go out one after another without waiting for each reply, on
// one connection, so the registry gets them in order and works on one
// while the next is on its way; the replies are read in the same order.
func (c *Client) Register(ctx context.Context, req *events.RegisterRequest) (*events.RegisterReply, error) {
	req.Sender = c.id
	// The registry joins chunks by their batch id alone: one nobody can
	// guess, so that no other sender slips a chunk into this batch.
	chunks, err := events.EncodeRegister(req, int(c.nc.MaxPayload()), events.NewCapability())
	if err != nil {
		return nil, err
	}
	if len(chunks) == 1 {
		reply, err := requestData[events.RegisterReply](ctx, c, events.Request(events.SubjectRegister), chunks[0])
		if err == nil && reply.Error != "" {
			err = fmt.Errorf("registry refused: %s", reply.Error)
		}
		return reply, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	if err := c.Ping(ctx); err != nil {
		return nil, err
	}
	inbox := c.nc.NewInbox()
	replies := make(chan *nats.Msg, len(chunks))
	sub, err := c.nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", events.SubjectRegister, err)
	}
	defer sub.Unsubscribe()
	for i, chunk := range chunks {
		if err := c.nc.PublishRequest(events.Request(events.SubjectRegister), fmt.Sprintf("%s.%d", inbox, i), chunk); err != nil {
			return nil, fmt.Errorf("%s: chunk %d: %w", events.SubjectRegister, i, err)
		}
	}
	got := make([]*nats.Msg, len(chunks))
	for n := 0; n < len(chunks); {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %d of %d chunks answered: %w", events.SubjectRegister, n, len(chunks), ctx.Err())
		case msg := <-replies:
			var i int
			if _, err := fmt.Sscanf(msg.Subject[len(inbox)+1:], "%d", &i); err != nil || i < 0 || i >= len(chunks) || got[i] != nil {
				continue
			}
			got[i] = msg
			n++
		}
	}
	total := &events.RegisterReply{}
	for _, msg := range got {
		reply, err := decodeReply[events.RegisterReply](msg)
		if err != nil {
			return nil, err
		}
		total.Header, total.RequestID = reply.Header, reply.RequestID
		total.Tools = append(total.Tools, reply.Tools...)
		total.Removed = append(total.Removed, reply.Removed...)
		if reply.Error != "" {
			total.Error = reply.Error
			return total, fmt.Errorf("registry refused: %s", reply.Error)
		}
	}
	return total, nil
}

// Remove sends a RemoveRequest.
func (c *Client) Remove(ctx context.Context, req *events.RemoveRequest) (*events.ChangeReply, error) {
	req.Sender = c.id
	return c.change(ctx, events.Request(events.SubjectRegistryRemove), req)
}

// Toggle sends a ToggleRequest.
func (c *Client) Toggle(ctx context.Context, req *events.ToggleRequest) (*events.ChangeReply, error) {
	req.Sender = c.id
	return c.change(ctx, events.Request(events.SubjectRegistryToggle), req)
}

func (c *Client) change(ctx context.Context, subject string, req events.Envelope) (*events.ChangeReply, error) {
	reply, err := request[events.ChangeReply](ctx, c, subject, req)
	if err != nil {
		return nil, err
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("registry: %s", reply.Error)
	}
	return reply, nil
}

// request sends one envelope and decodes the reply. The audit stream
// captures the request subjects, so a request with no registry never gets
// "no responders"; the registry's presence is checked first on a subject
// no stream captures, so its absence is reported at once.
func request[T any, PT interface {
	*T
	events.Envelope
}](ctx context.Context, c *Client, subject string, req events.Envelope) (PT, error) {
	data, err := events.Encode(req)
	if err != nil {
		return nil, err
	}
	return requestData[T, PT](ctx, c, subject, data)
}

// requestData sends one encoded envelope and decodes the reply.
func requestData[T any, PT interface {
	*T
	events.Envelope
}](ctx context.Context, c *Client, subject string, data []byte) (PT, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	if err := c.Ping(ctx); err != nil {
		return nil, err
	}
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	return decodeReply[T, PT](msg)
}

// decodeReply decodes a registry's reply, or says why it refused.
func decodeReply[T any, PT interface {
	*T
	events.Envelope
}](msg *nats.Msg) (PT, error) {
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		return nil, fmt.Errorf("registry refused the request: %s", desc)
	}
	reply, err := events.Decode[T, PT](msg.Data)
	if err != nil {
		return nil, fmt.Errorf("registry reply: %w", err)
	}
	return reply, nil
}

// Ping checks that a registry is running, failing at once with
// ErrNoRegistry when none is.
func (c *Client) Ping(ctx context.Context) error {
	subject, err := micro.ControlSubject(micro.PingVerb, events.RegistryService, "")
	if err != nil {
		return err
	}
	_, err = c.nc.RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoRegistry
	}
	if err != nil {
		return fmt.Errorf("ping registry: %w", err)
	}
	return nil
}
