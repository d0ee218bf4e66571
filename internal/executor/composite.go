package executor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/composite"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
)

// invokeStep sends step number step of the composite c runs as a call of
// c's own caller: on the invoke subject of c's principal, as the identity
// c was bound to, so that the executor that takes it binds it again and
// the policy judges it as any call of that caller. Never with this
// executor's identity or rights: a composite widens nothing its steps
// could do. The step's id is composite.StepID of the composite's, and it
// names the composite's invocation, which links the two in the trail.
//
// What the step's executor tells its caller of a wait for a person goes
// on to c's caller: that it waits, and, when c's caller confirms through
// its own user (Invocation.CallerConfirms), the confirmation request,
// which that user answers for the step as for any call.
func (c *call) invokeStep(ctx context.Context, step int, name string, args json.RawMessage) (*events.Result, error) {
	inv := &events.Invocation{Header: events.Header{ID: composite.StepID(c.inv.ID, step), Sender: c.inv.Sender},
		Tool: name, Args: args, Workspace: c.inv.Workspace, Composite: c.inv.ID, CallerConfirms: c.inv.CallerConfirms && c.reply != ""}
	if t, ok := c.e.catalog.Catalog().GetTool(name); ok && t.Kind == events.KindComposite {
		// A composite of composites could call itself without end.
		return c.e.result(inv, t.Name, events.ErrInvalidParams, fmt.Sprintf("Not run: %s is a composite, and a composite's step may not be one", t.Name)), nil
	}
	var w *invoke.Watch
	if c.reply != "" {
		w = &invoke.Watch{Waiting: func(wt *invoke.Waiting) { c.relay(events.KindWaiting, &wt.ConfirmWaiting) }}
		if c.inv.CallerConfirms {
			w.Confirm = func(req *events.ConfirmRequest) { c.relay(events.KindConfirm, req) }
		}
	}
	return c.e.batchClient().InvokeFor(ctx, inv, c.principal, w)
}

// relay sends c's caller a message of kind about one of c's steps.
func (c *call) relay(kind string, ev events.Envelope) {
	data, err := events.Encode(ev)
	if err != nil {
		c.e.log.Error("a step's message to the composite's caller does not encode", "invocation", c.inv.ID, "err", err)
		return
	}
	m := nats.NewMsg(c.reply)
	m.Header.Set(events.KindHeader, kind)
	m.Header.Set(events.ExecutorHeader, c.e.id.ID)
	m.Data = data
	_ = c.e.nc.PublishMsg(m)
}
