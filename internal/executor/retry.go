package executor

import (
	"context"
	"fmt"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// A call whose MCP server failed in transport or restarted mid-call
// (tool.Output.ServerLost) is run once more by the executor that hosts the
// server, after the restart, when it is idempotent: the call's first
// attempt, its decision says so (call.retryable), and the retry's own
// decision says so again. The retry is attempt 2 of the call's id: it
// takes the id's second attempt as a caller's retry would (so neither
// the caller nor anyone else gets another), is recorded as a step
// (events.StepRetried) and judged again, and its result, the call's one
// terminal result, names attempt 2. Its deadline is the call's deadline
// again.

// serverLost reports whether the tool run that gave out and err lost its
// server mid-call, and the call may be tried again.
func (c *call) serverLost(out *tool.Output, err error) bool {
	if err != nil || out == nil || !out.ServerLost || !c.retryable.Load() || c.inv.Attempt > 1 || c.ctx.Err() != nil {
		return false
	}
	_, ok := c.impl.(tool.Restarter)
	return ok
}

// retryOnServer runs the call again once its server is back, as attempt
// 2, and returns the retry's output; or lost, the first attempt's, when
// the retry may not run: its attempt is taken, its new decision is not
// an idempotent ALLOW, or the server did not come back within the call's
// deadline.
func (c *call) retryOnServer(ctx context.Context, lost *tool.Output) (*tool.Output, error) {
	e := c.e
	const attempt = 2
	// The first attempt's ticket, if it did not write it yet: its second
	// is taken against it, as a caller's retry would be.
	if !c.ticket() {
		e.log.Warn("a call whose MCP server failed is not retried: its first attempt has no retry ticket", "invocation", c.inv.ID)
		return lost, nil
	}
	if err := e.ids.take(c.ctx, c.principal, c.inv.ID, retryBody(c.inv, attempt), attempt, c.sum); err != nil {
		e.log.Warn("a call whose MCP server failed is not retried: its second attempt is not to be had", "invocation", c.inv.ID, "err", err)
		return lost, nil
	}
	c.inv.Attempt = attempt
	c.e.note(events.SubjectStep, &events.Step{Header: c.header(), InvocationID: c.inv.ID, Tool: nameOf(c.tool), Step: events.StepRetried,
		Detail: lost.LLMContent, Attempt: attempt})
	c.retryable.Store(false)
	if d, st := c.decide(c.args); st != nil || d.Verdict != events.Allow || !d.Idempotent {
		return lost, nil
	}
	wait, cancel := context.WithTimeout(c.ctx, c.timeout)
	err := c.impl.(tool.Restarter).AwaitRestart(wait)
	cancel()
	if err != nil {
		lost.LLMContent += fmt.Sprintf("\n[Not retried: the server did not come back within %s: %v]", c.timeout, err)
		lost.ReturnDisplay = lost.LLMContent
		return lost, nil
	}
	lost.Whole.Close()
	return c.runBounded(ctx)
}

// retryBody is what the executor's own retry of inv takes its attempt
// for: the invocation as attempt.
func retryBody(inv *events.Invocation, attempt int) []byte {
	again := *inv
	again.Attempt = attempt
	data, err := events.Encode(&again)
	if err != nil {
		return []byte(inv.ID)
	}
	return data
}
