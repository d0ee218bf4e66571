package executor

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/telemetry"
)

// The user's hooks in the pipeline. Pre hooks run on every call the
// policy did not deny, after its decision and before an approver is asked
// (so nobody is asked about a call a hook blocks), again on each round of
// modified arguments; they can only make the verdict stricter: a deny or
// a failed hook ends the call with POLICY_DENIED, an ask turns ALLOW into
// ASK_USER, and an allow changes nothing. What they answer is never part
// of the decision cache (decisions.go), which holds the policy's verdicts
// only: hooks run on every call. Post hooks run once the tool returned,
// before the result is sent; what they add for the model goes to the end
// of llmContent, and a post hook that fails is reported, the result going
// out as it was. Every run is a HookRun event.

// hookPlan is the hooks that match a hosted tool under catalogue name
// name; plan is nil when none does.
type hookPlan struct {
	name string
	plan *hooks.Plan
}

// hookPlan returns the hooks that match the call's tool, nil when none
// does. After a tool's first call it is a pointer load and a string
// comparison: matchers are not run again.
func (c *call) hookPlan() *hooks.Plan {
	if c.e.hooks == nil {
		return nil
	}
	if p := c.host.hooks.Load(); p != nil && p.name == c.tool.Name {
		return p.plan
	}
	p := &hookPlan{name: c.tool.Name, plan: c.e.hooks.PlanFor(c.hookTool())}
	c.host.hooks.Store(p)
	return p.plan
}

// hookTool is the call's tool as hooks see it: the executor's own
// knowledge of it, never the name the caller used.
func (c *call) hookTool() hooks.Tool {
	t := hooks.Tool{Name: c.tool.Name, Source: c.host.judged.Source, Server: c.host.judged.Server}
	if c.host.spec.Name != c.tool.Name {
		t.Own = c.host.spec.Name
	}
	return t
}

// preHooks runs the call's pre hooks on its arguments as they are now,
// for a call the policy decided d about (ALLOW or ASK_USER). It returns
// the decision to act on — d, or d made ASK_USER — or the error that ends
// the call.
func (c *call) preHooks(d policy.Decision) (policy.Decision, *stop) {
	plan := c.hookPlan()
	if plan == nil || len(plan.Pre) == 0 {
		return d, nil
	}
	if st := c.settle(); st != nil {
		return d, st
	}
	outs := c.runHooks(hooks.Pre, plan.Pre, plan.PreSequential, nil)
	var asks []string
	for i, o := range outs {
		h := plan.Pre[i]
		name := fmt.Sprintf("hook %q (%s)", h.Label(), h.Dialect.EventName(hooks.Pre))
		switch {
		case o.Failure != "" && c.ctx.Err() != nil:
			return d, &stop{events.ErrCancelled, fmt.Sprintf("%s was cancelled while %s ran: %v", c.tool.Name, name, context.Cause(c.ctx))}
		case o.Failure != "":
			return d, &stop{events.ErrPolicyDenied, fmt.Sprintf("%s failed, so the call is denied: the hook %s", name, o.Failure)}
		case o.Decision == hooks.Deny:
			return d, &stop{events.ErrPolicyDenied, fmt.Sprintf("blocked by %s: %s", name, o.Message)}
		case o.Decision == hooks.Ask:
			reason := o.Message
			if reason == "" {
				reason = "it asks for confirmation"
			}
			asks = append(asks, fmt.Sprintf("%s: %s", name, reason))
		}
	}
	if len(asks) == 0 {
		return d, nil
	}
	reason := strings.Join(asks, "; ")
	// The hook asked for a person: the policy hears it when it judges
	// who may answer (input.hookAsked).
	c.hookAsked = true
	if d.Verdict == events.Allow {
		// The policy had no reason to ask: an approval here is for this
		// call, and there is nothing for "always" to remember.
		d.Verdict, d.Reason, d.Remember = events.AskUser, reason, false
	} else {
		d.Reason += "; " + reason
	}
	return d, nil
}

// postHooks runs the call's post hooks on res, the result of the tool's
// run, and adds what they give the model to its llmContent.
func (c *call) postHooks(res *events.Result) {
	plan := c.hookPlan()
	if plan == nil || len(plan.Post) == 0 {
		return
	}
	resp := &hooks.Response{LLMContent: res.LLMContent, ReturnDisplay: res.ReturnDisplay, Error: res.Error, Success: res.Error == nil}
	outs := c.runHooks(hooks.Post, plan.Post, plan.PostSequential, resp)
	var add strings.Builder
	for i, o := range outs {
		if o.Failure != "" {
			continue // reported in runHooks; the result goes out as it was
		}
		h := plan.Post[i]
		// A post hook's block comes after the tool ran: its reason is
		// feedback for the model, as in Claude Code. toolbus does not
		// hide the tool's result (Gemini CLI's AfterTool deny does).
		texts := []string{o.Context}
		if o.Decision == hooks.Deny {
			texts = []string{o.Message, o.Context}
		}
		for _, text := range texts {
			if text == "" {
				continue
			}
			fmt.Fprintf(&add, "\n\n[From hook %q (%s):]\n%s", h.Label(), h.Dialect.EventName(hooks.Post), text)
		}
	}
	res.LLMContent += add.String()
}

// runHooks runs list, each hook once, at the same time unless sequential
// (then in order, stopping at the first that blocks or fails), reports
// every run, and returns their outcomes in list's order (fewer when a
// sequential run stopped).
func (c *call) runHooks(ev hooks.Event, list []*hooks.Hook, sequential bool, resp *hooks.Response) []hooks.Outcome {
	e := c.e
	in := &hooks.Input{Event: ev, Tool: c.hookTool(), Args: c.inv.Args, Response: resp, InvocationID: c.inv.ID,
		Caller: c.inv.Sender, Workspace: e.cfg.Workspace, TraceParent: telemetry.TraceParentOf(c.ctx)}
	outs := make([]hooks.Outcome, len(list))
	if len(list) == 1 || sequential {
		for i, h := range list {
			outs[i] = e.hookRuns.Run(c.ctx, h, in)
			c.reportHook(ev, h, &outs[i])
			if sequential && ev == hooks.Pre && (outs[i].Failure != "" || outs[i].Decision == hooks.Deny) {
				return outs[:i+1]
			}
		}
		return outs
	}
	var wg sync.WaitGroup
	for i, h := range list {
		wg.Go(func() { outs[i] = e.hookRuns.Run(c.ctx, h, in) })
	}
	wg.Wait()
	for i, h := range list {
		c.reportHook(ev, h, &outs[i])
	}
	return outs
}

// reportHook publishes a hook run to the audit trail and logs a failed one.
func (c *call) reportHook(ev hooks.Event, h *hooks.Hook, o *hooks.Outcome) {
	e := c.e
	run := &events.HookRun{Header: c.header(), InvocationID: c.inv.ID, Tool: c.tool.Name, Event: ev.String(),
		AgentEvent: h.Dialect.EventName(ev), Hook: h.Label(), Command: h.Command, File: h.File,
		Outcome: events.HookOutcome(o.Decision.String()), Message: o.Message, DurationMillis: o.Duration.Milliseconds()}
	if h.Func != nil {
		run.AgentEvent = ""
	}
	if o.ExitCode >= 0 {
		run.ExitCode = new(o.ExitCode)
	}
	if o.Failure != "" {
		run.Outcome, run.Message = events.HookFailed, o.Failure
		if o.TimedOut {
			run.Outcome = events.HookTimedOut
		}
		e.log.Warn("a hook failed", "invocation", c.inv.ID, "tool", c.tool.Name, "event", ev.String(), "hook", h.Label(), "failure", o.Failure)
	}
	e.publish(events.SubjectHook, run)
}
