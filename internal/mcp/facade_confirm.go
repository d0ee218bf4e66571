package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/composite"
	"github.com/toolbus/toolbus/internal/events"
)

// Approval through the agent's own user: when the policy asks for
// confirmation, lets the person in front of the calling agent give it
// (data.toolbus.elicitation_allowed), and the agent's MCP client supports
// elicitation, the executor sends the call's confirmation request to the
// facade as well as to tool.confirm. The facade puts it to the client's
// user as an elicitation showing what an approver sees, and sends their
// answer as events.AgentUser of the caller. The executor judges it like
// any answer (approver_allowed: once or cancel, that caller's calls only),
// and the first accepted answer, from anyone, decides.

// canElicit reports whether the MCP client of ctx's session declared the
// elicitation capability.
func canElicit(ctx context.Context) bool {
	s, ok := mcpserver.ClientSessionFromContext(ctx).(mcpserver.SessionWithClientInfo)
	return ok && s.GetClientCapabilities().Elicitation != nil
}

// askUser puts req, the confirmation request of inv, to the client's user
// and answers it with what they chose. Nothing they do, and no failure
// here, allows the call but an accept; a dismissal, or a question that
// could not be put to them, decides nothing (dismissForUser).
func (f *Facade) askUser(ctx context.Context, inv *events.Invocation, req *events.ConfirmRequest) {
	// The request came to this call's inbox; its id must be this call's,
	// or one of its steps' when it is a composite, so that the answer
	// can only ever decide this call.
	if !ownRequest(inv, req) {
		f.log.Warn("mcp facade: a confirmation request for another call came to this one; ignored", "invocation", inv.ID, "request", req.InvocationID)
		return
	}
	result, err := f.srv.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
		Message:         elicitationMessage(req),
		RequestedSchema: elicitationSchema,
	}})
	if err != nil {
		if ctx.Err() != nil {
			return // the call's request ended: so does the call
		}
		f.log.Warn("mcp facade: the client's user could not be asked; the call is left to the approvers", "invocation", inv.ID, "err", err)
		f.dismissForUser(ctx, inv, req, "could not be asked: "+cutReason(err.Error()))
		return
	}
	f.answerForUser(ctx, inv, req, result)
}

// ownRequest reports whether req, which came to inv's inbox, is inv's
// own: a request for inv, or for a step of inv when inv is a composite
// tool's call (its executor sends the steps' requests on).
func ownRequest(inv *events.Invocation, req *events.ConfirmRequest) bool {
	return req.InvocationID == inv.ID || composite.IsStepOf(req.InvocationID, inv.ID)
}

// answerForUser answers req, the confirmation request of inv, with what
// the client's user chose, as MCP means it: accept is their yes, decline
// their no, and cancel (a dismissal, or anything else) no decision at
// all, which leaves the call to the fleet's approvers (dismissForUser).
func (f *Facade) answerForUser(ctx context.Context, inv *events.Invocation, req *events.ConfirmRequest, result *mcp.ElicitationResult) {
	var outcome events.Outcome
	var message string
	switch result.Action {
	case mcp.ElicitationResponseActionAccept:
		outcome = events.ProceedOnce
	case mcp.ElicitationResponseActionDecline:
		outcome, message = events.Cancel, "declined"
		if reason := declineReason(result.Content); reason != "" {
			message = "declined: " + reason
		}
	case mcp.ElicitationResponseActionCancel:
		f.dismissForUser(ctx, inv, req, "dismissed the question")
		return
	default:
		f.dismissForUser(ctx, inv, req, fmt.Sprintf("answered with the unknown action %q", cutReason(string(result.Action))))
		return
	}
	f.sendForUser(ctx, inv, req, &events.ConfirmAnswer{Header: events.Header{Sender: events.AgentUser(inv.Sender)}, InvocationID: requestOf(inv, req), Outcome: outcome, Message: message})
}

// dismissForUser tells the executor that the client's user made no
// decision on req, and why: the executor leaves the call to the fleet's
// approvers, or denies it at once when none is present. A dismissal is
// its own envelope, with no outcome, so it can neither allow the call nor
// count as the user's refusal.
func (f *Facade) dismissForUser(ctx context.Context, inv *events.Invocation, req *events.ConfirmRequest, why string) {
	f.sendForUser(ctx, inv, req, &events.ConfirmDismissed{Header: events.Header{Sender: events.AgentUser(inv.Sender)}, InvocationID: requestOf(inv, req), Why: why})
}

// requestOf is the id of the call req asks about: inv's, or a step's of
// inv when it is a composite.
func requestOf(inv *events.Invocation, req *events.ConfirmRequest) string {
	if ownRequest(inv, req) {
		return req.InvocationID
	}
	return inv.ID
}

// sendForUser sends env, the user's word on req, to req's answer subject
// as the caller of inv: only the caller's identity may send there.
func (f *Facade) sendForUser(ctx context.Context, inv *events.Invocation, req *events.ConfirmRequest, env events.Envelope) {
	data, err := events.Encode(env)
	if err != nil {
		f.log.Error("mcp facade: the user's answer does not encode", "invocation", inv.ID, "err", err)
		return
	}
	msg, err := f.cfg.Conn.RequestWithContext(ctx, events.AnswerSubject(req.AnswerTo, events.AnswerAsCaller, f.principalOfCaller(inv.Sender)), data)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("mcp facade: the user's answer was not acknowledged", "invocation", inv.ID, "err", err)
		}
		return
	}
	if ack, err := events.Decode[events.ConfirmAck](msg.Data); err != nil || !ack.Accepted {
		reason := "the acknowledgement does not decode"
		if err == nil {
			reason = ack.Reason
		}
		f.log.Info("mcp facade: the user's word does not decide the call", "invocation", inv.ID, "type", env.EnvelopeType(), "reason", reason)
	}
}

// cutReason keeps what a client said, or an error, short enough for the
// trail.
func cutReason(s string) string {
	const limit = 500
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "") + "…"
	}
	return s
}

// elicitationSchema asks for nothing but an optional reason to decline:
// accepting or declining is the decision.
var elicitationSchema = json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string","title":"Reason","description":"Why you decline, if you do (the agent sees it)","maxLength":1000}}}`)

// declineReason is the reason a user gave for declining, kept short.
func declineReason(content any) string {
	m, _ := content.(map[string]any)
	reason, _ := m["reason"].(string)
	reason = strings.TrimSpace(reason)
	const limit = 1000
	if len(reason) > limit {
		reason = strings.ToValidUTF8(reason[:limit], "")
	}
	return reason
}

// The longest arguments and diff an elicitation shows; the full ones are
// in the audit trail and in the approvers' views.
const (
	elicitArgsLimit = 4000
	elicitDiffLimit = 12000
)

// elicitationMessage is what the user is shown: what an approver sees,
// as plain text (clients show it as is).
func elicitationMessage(req *events.ConfirmRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "toolbus asks you to confirm a tool call by %s.\n\n", req.Caller.ID)
	fmt.Fprintf(&b, "Tool: %s (%s)", req.Tool, req.Kind)
	if req.Server != "" {
		fmt.Fprintf(&b, ", MCP server %s", req.Server)
	}
	fmt.Fprintf(&b, "\nWhy it asks: %s\n", req.Reason)
	if req.Command != "" {
		fmt.Fprintf(&b, "\nCommand:\n  %s\n", req.Command)
	}
	for i, fl := range req.Flagged {
		if i == 0 {
			b.WriteString("\nLook at:\n")
		}
		fmt.Fprintf(&b, "  %s: %s\n", fl.Text, fl.Why)
	}
	if req.Diff != "" {
		fmt.Fprintf(&b, "\nChange:\n%s", cut(req.Diff, elicitDiffLimit))
		if !strings.HasSuffix(req.Diff, "\n") {
			b.WriteString("\n")
		}
	} else if len(req.Args) > 0 {
		args := string(req.Args)
		var v any
		if json.Unmarshal(req.Args, &v) == nil {
			if pretty, err := json.MarshalIndent(v, "  ", "  "); err == nil {
				args = string(pretty)
			}
		}
		fmt.Fprintf(&b, "\nArguments:\n  %s\n", cut(args, elicitArgsLimit))
	}
	b.WriteString("\nAccept to run it once; decline to refuse it.")
	return b.String()
}

// cut keeps the first limit runes of s, saying how much it left out.
func cut(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	r := []rune(s)
	return string(r[:limit]) + fmt.Sprintf("\n[%d more characters not shown]\n", len(r)-limit)
}
