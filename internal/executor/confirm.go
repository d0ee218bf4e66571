package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/tool"
)

// confirm asks an approver about a call the policy sent to ASK_USER. It
// returns the answer to act on, or the error that ends the call. Nothing
// here ever defaults to proceeding.
func (c *call) confirm(d policy.Decision, args map[string]any) (*events.ConfirmAnswer, events.ErrorType, string) {
	e, t := c.e, c.tool
	if !e.approverPresent(c.ctx) {
		return nil, events.ErrPolicyDenied, fmt.Sprintf("The policy asks for confirmation (%s), but no approver is connected to give it, so the call is denied.", d.Reason)
	}
	req := &events.ConfirmRequest{Header: events.Header{Sender: e.id}, InvocationID: c.inv.ID, Tool: t.Name, Server: c.host.judged.Server,
		Kind: c.host.judged.Kind, Caller: c.inv.Sender, Args: c.inv.Args, Reason: d.Reason, DeadlineMillis: e.cfg.ConfirmTimeout.Milliseconds()}
	if cm, ok := c.impl.(tool.Commander); ok {
		req.Command, _ = cm.Command(c.inv.Args)
	}
	if df, ok := c.impl.(tool.Differ); ok {
		if diff, err := df.Diff(&tool.Call{ID: c.inv.ID, Args: c.inv.Args, Opened: c.opened}); err == nil {
			req.Diff = diff
		}
	}
	// A request must fit in one message: a huge diff is cut, with a note.
	if limit := e.cfg.MaxContent * 2; utf8.RuneCountInString(req.Diff) > limit {
		req.Diff = truncate(req.Diff, limit) + fmt.Sprintf("\n[diff truncated at %d characters]\n", limit)
	}
	data, err := events.Encode(req)
	if err != nil {
		return nil, events.ErrPolicyDenied, "confirmation request does not encode: " + err.Error()
	}
	c.step("confirming", d.Reason)
	ctx, cancel := context.WithTimeout(c.ctx, e.cfg.ConfirmTimeout)
	defer cancel()
	// The first answer wins: a request takes the first reply.
	msg, err := e.nc.RequestWithContext(ctx, events.SubjectConfirm, data)
	switch {
	case err != nil && c.ctx.Err() != nil:
		return nil, events.ErrCancelled, fmt.Sprintf("cancelled while waiting for confirmation: %v", context.Cause(c.ctx))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, events.ErrConfirmationTimeout, fmt.Sprintf("No approver answered within %s, so the call is denied.", e.cfg.ConfirmTimeout)
	case errors.Is(err, nats.ErrNoResponders):
		return nil, events.ErrPolicyDenied, "No approver is connected to confirm the call, so it is denied."
	case err != nil:
		return nil, events.ErrPolicyDenied, "confirmation failed, so the call is denied: " + err.Error()
	}
	answer, err := events.Decode[events.ConfirmAnswer](msg.Data)
	if err != nil {
		return nil, events.ErrPolicyDenied, "the approver's answer is not valid, so the call is denied: " + err.Error()
	}
	if answer.InvocationID != c.inv.ID {
		return nil, events.ErrPolicyDenied, "the approver answered another invocation, so the call is denied"
	}
	e.publish(events.SubjectConfirmAnswered, answer)
	c.step("confirmed", string(answer.Outcome)+" by "+answer.Sender.ID)
	switch answer.Outcome {
	case events.Cancel:
		return nil, events.ErrUserCancelled, fmt.Sprintf("%s cancelled the call.", answer.Sender.ID)
	case events.ProceedAlways, events.ProceedAlwaysServer, events.ProceedAlwaysTool:
		c.remember(d, answer)
	}
	return answer, "", ""
}

// remember keeps an "always" answer on the fleet-wide allowlist as what
// the policy's remember rule makes of it, from the input the call was
// judged on (after unwrapping, never a name the caller chose): a shell
// line by its commands, an edit by its paths, a tool, an MCP server.
func (c *call) remember(d policy.Decision, a *events.ConfirmAnswer) {
	e := c.e
	if !d.Remember {
		c.step("not-remembered", "the policy does not let this approval of "+c.tool.Name+" be remembered")
		return
	}
	entries, err := e.policy.Load().Remember(c.ctx, c.input(c.args, c.paths, c.hardLinks, c.shell), a.Outcome)
	if err != nil {
		e.log.Error("approval not remembered: the policy's remember rule failed", "invocation", c.inv.ID, "err", err)
		c.step("not-remembered", "the policy's remember rule failed: "+err.Error())
		return
	}
	if len(entries) == 0 {
		c.step("not-remembered", "the policy remembers nothing of this approval")
		return
	}
	records := make([]AllowRecord, len(entries))
	for i, entry := range entries {
		records[i] = AllowRecord{AllowEntry: entry, By: a.Sender.ID, For: c.inv.ID, AddedAt: time.Now().UTC()}
	}
	if err := e.allowlist.add(c.ctx, records); err != nil {
		e.log.Error("approval not remembered", "invocation", c.inv.ID, "err", err)
		c.step("not-remembered", "the allowlist could not be written: "+err.Error())
		return
	}
	c.step("remembered", describeEntries(entries))
}

// describeEntries says what was remembered, for the step event.
func describeEntries(entries []policy.AllowEntry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		switch e.Scope {
		case "command":
			what := "the command " + strings.Join(e.Argv, " ")
			if !e.Exact {
				what += " with any arguments"
			}
			parts[i] = what
		case "path":
			parts[i] = "the path " + e.Path
		case "server":
			parts[i] = "the MCP server " + e.Server
		default:
			parts[i] = "the tool " + e.Tool
		}
	}
	return strings.Join(parts, "; ")
}

// approverPresent asks whether any approver is connected, on a subject no
// stream captures, so the answer comes at once.
func (e *Executor) approverPresent(ctx context.Context) bool {
	subject, _ := micro.ControlSubject(micro.PingVerb, events.ApproverService, "")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := e.nc.RequestWithContext(ctx, subject, nil)
	return err == nil
}
