package invoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// maxOpenServerRequests is how many requests of its server a call may
// have waiting for the caller at once: the executor refuses one more, so
// a call's slots for them never fill.
const maxOpenServerRequests = 4

// serverRequest hands a request of the call's MCP server to
// w.ServerRequest. A call with no one to take them says so
// (invokeAs), and is sent none.
func (c *Client) serverRequest(m *nats.Msg, w *Watch) {
	req, err := events.Decode[events.ServerRequest](m.Data)
	if err != nil || w == nil || w.ServerRequest == nil {
		return
	}
	w.ServerRequest(req)
}

// AnswerServerRequest answers req, a request of the MCP server serving a
// call of this client, as caller (the invocation's Sender): with the
// result its client gave (a JSON object, as it gave it), or with rpcErr.
// It returns once the executor has acknowledged the answer, with an
// error when it refused it (another call's request, another caller, the
// request is over).
func (c *Client) AnswerServerRequest(ctx context.Context, caller events.Identity, req *events.ServerRequest, result json.RawMessage, rpcErr *events.RPCError) error {
	answer := &events.ServerAnswer{Header: events.Header{Sender: caller}, InvocationID: req.InvocationID, Result: result, Error: rpcErr}
	data, err := events.Encode(answer)
	if err != nil {
		return err
	}
	msg, err := c.nc.RequestWithContext(ctx, events.AnswerSubject(req.AnswerTo, events.AnswerAsCaller, c.principal), data)
	if err != nil {
		return err
	}
	ack, err := events.Decode[events.ConfirmAck](msg.Data)
	if err != nil {
		return fmt.Errorf("the acknowledgement does not decode: %w", err)
	}
	if !ack.Accepted {
		return errors.New(ack.Reason)
	}
	return nil
}
