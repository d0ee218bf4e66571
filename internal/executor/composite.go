package executor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/internal/events"
)

// invokeStep sends step number step of the composite c runs as a call of
// c's own caller: on the invoke subject of c's principal, as the identity
// c was bound to, so that the executor that takes it binds it again and
// the policy judges it as any call of that caller. Never with this
// executor's identity or rights: a composite widens nothing its steps
// could do. The step's id is the composite's, ".N", and it names the
// composite's invocation, which links the two in the trail.
func (c *call) invokeStep(ctx context.Context, step int, name string, args json.RawMessage) (*events.Result, error) {
	inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("%s.%d", c.inv.ID, step), Sender: c.inv.Sender},
		Tool: name, Args: args, Workspace: c.inv.Workspace, Composite: c.inv.ID}
	if t, ok := c.e.catalog.Catalog().GetTool(name); ok && t.Kind == events.KindComposite {
		// A composite of composites could call itself without end.
		return c.e.result(inv, t.Name, events.ErrInvalidParams, fmt.Sprintf("Not run: %s is a composite, and a composite's step may not be one", t.Name)), nil
	}
	return c.e.batchClient().InvokeFor(ctx, inv, c.principal, nil)
}
