package executor

import (
	"context"
	"errors"
	"fmt"
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
	req := &events.ConfirmRequest{Header: events.Header{Sender: e.id}, InvocationID: c.inv.ID, Tool: t.Name, Server: t.Server,
		Kind: t.Kind, Caller: c.inv.Sender, Args: c.inv.Args, Reason: d.Reason, DeadlineMillis: e.cfg.ConfirmTimeout.Milliseconds()}
	if cm, ok := c.impl.(tool.Commander); ok {
		req.Command, _ = cm.Command(c.inv.Args)
	}
	if df, ok := c.impl.(tool.Differ); ok {
		if diff, err := df.Diff(c.inv.Args); err == nil {
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
		if d.Remember {
			if err := e.allowlist.add(c.ctx, c.remember(answer)); err != nil {
				e.log.Error("approval not remembered", "invocation", c.inv.ID, "err", err)
			}
		} else {
			c.step("not-remembered", "the policy does not let approvals of "+t.Name+" be remembered")
		}
	}
	return answer, "", ""
}

// remember turns an "always" answer into allowlist records, narrowed where
// it must be: a shell tool by the commands of this line, an edit tool by
// the paths of this call.
func (c *call) remember(a *events.ConfirmAnswer) []AllowRecord {
	t := c.tool
	rec := func(e policy.AllowEntry) AllowRecord {
		return AllowRecord{AllowEntry: e, By: a.Sender.ID, For: c.inv.ID, AddedAt: time.Now().UTC()}
	}
	if a.Outcome == events.ProceedAlwaysServer && t.Source == events.SourceMCP {
		return []AllowRecord{rec(policy.AllowEntry{Scope: "server", Server: t.Server})}
	}
	if cm, ok := c.impl.(tool.Commander); ok {
		line, _ := cm.Command(c.inv.Args)
		var out []AllowRecord
		// The root of each command, as Gemini CLI remembers "always allow
		// git": the policy still judges every command of every line.
		seen := map[string]bool{}
		for _, cmd := range policy.AnalyzeShell(line).Commands {
			if cmd.Name != "" && !seen[cmd.Name] {
				seen[cmd.Name] = true
				out = append(out, rec(policy.AllowEntry{Scope: "command", Tool: t.Name, Prefix: cmd.Name}))
			}
		}
		return out
	}
	if _, ok := c.impl.(tool.PathNamer); ok && t.Kind.Mutator() {
		var out []AllowRecord
		for _, p := range c.paths {
			out = append(out, rec(policy.AllowEntry{Scope: "path", Tool: t.Name, Path: p}))
		}
		if len(out) > 0 {
			return out
		}
	}
	return []AllowRecord{rec(policy.AllowEntry{Scope: "tool", Tool: t.Name, Server: t.Server})}
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
