package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/tool"
)

// confirm asks the approvers about a call the policy sent to ASK_USER. It
// returns the answer to act on, or the stop that ends the call. Every
// answer is put to the policy (data.toolbus.approver_allowed): the first
// one it accepts decides; one it refuses is acknowledged as refused,
// recorded, and the wait goes on. Nothing here ever defaults to
// proceeding.
func (c *call) confirm(d policy.Decision, args map[string]any) (answer *events.ConfirmAnswer, st *stop) {
	e := c.e
	q := &question{pol: c.pol}
	waiting := c.stage(stageConfirm, time.Now())
	defer func() {
		waiting.answered(answer, q.people)
		waiting.end(st)
	}()
	if st := c.settle(); st != nil {
		return nil, st
	}
	if !e.startAsking(c.principal) {
		return nil, &stop{events.ErrTooManyPending, fmt.Sprintf("The policy asks for confirmation (%s), but this caller already has %d calls waiting for an answer, as many as one caller may; the call is refused. Wait for those to be answered.", d.Reason, e.cfg.MaxPendingPerCaller)}
	}
	defer e.doneAsking(c.principal)
	q.in = c.input(args, c.paths, c.hardLinks, c.shell)
	// The caller's own user is asked too when the caller can ask them
	// and the policy lets them answer this call; then no approver on
	// tool.confirm need be connected.
	q.callerAsks = c.inv.CallerConfirms && c.reply != "" && q.pol.ElicitationAllowed(c.ctx, q.in)
	if !q.callerAsks && !e.approverPresent(c.ctx) {
		// Nobody would see the request: waiting for an answer would only
		// hold the caller until the deadline.
		return nil, &stop{events.ErrPolicyDenied, fmt.Sprintf("The policy asks for confirmation (%s), but no approver is connected to give it, so the call is denied. To approve calls like this one, %s, then make the call again.", d.Reason, e.cfg.ApproveHint)}
	}
	q.req = c.confirmRequest(d, q.pol, q.in)
	q.req.CallerMayAnswer = q.callerAsks
	if q.need = max(1, d.ApprovalsRequired); q.need > 1 {
		// Each approval is of this call as it is, once: an edit would be
		// another call, and an approval remembered would let the next
		// one run on one person's word.
		q.req.ApprovalsRequired, q.req.Always = q.need, nil
	}
	// Answers come to an inbox of this call's own, as requests the
	// executor acknowledges; the request names it in its body too, so an
	// approver that reads it from the audit stream can answer.
	// Each answerer sends on a subject below it that names its role and
	// its principal (events.AnswerSubject), which the bus lets each
	// identity publish only with its own name.
	q.req.AnswerTo = events.NewAnswerTo()
	answers, err := e.nc.SubscribeSync(q.req.AnswerTo + ".>")
	if err != nil {
		return nil, &stop{events.ErrPolicyDenied, "confirmation failed, so the call is denied: " + err.Error()}
	}
	defer answers.Unsubscribe()
	ctx, cancel := context.WithTimeout(c.ctx, e.cfg.ConfirmTimeout)
	defer cancel()
	if st := c.ask(q, d.Reason); st != nil {
		return nil, st
	}
	answer, st = c.awaitAnswer(ctx, q, answers)
	if st != nil {
		return nil, st
	}
	switch answer.Outcome {
	case events.Cancel:
		reason := fmt.Sprintf("%s cancelled the call.", answer.Sender.ID)
		if answer.Message != "" {
			reason = fmt.Sprintf("%s cancelled the call: %s", answer.Sender.ID, answer.Message)
		}
		return nil, &stop{events.ErrUserCancelled, reason}
	case events.ProceedAlways, events.ProceedAlwaysServer, events.ProceedAlwaysTool:
		c.remember(d, answer)
	}
	return answer, nil
}

// startAsking counts a call of principal as waiting for an answer, or
// reports false when principal has as many waiting as it may.
func (e *Executor) startAsking(principal string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.asking[principal] >= e.cfg.MaxPendingPerCaller {
		return false
	}
	e.asking[principal]++
	return true
}

// doneAsking ends what startAsking counted.
func (e *Executor) doneAsking(principal string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.asking[principal]--; e.asking[principal] <= 0 {
		delete(e.asking, principal)
	}
}

// Pending is how many calls of principal wait for a person's answer on
// this executor now.
func (e *Executor) Pending(principal string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.asking[principal]
}

// question is what a call asks its approvers, and what their answers are
// judged by.
type question struct {
	req        *events.ConfirmRequest
	pol        *policy.Policy // the policy the question was asked under
	in         *policy.Input  // what it was shown of the call
	callerAsks bool           // the caller's own user is asked too
	dismissed  bool           // and they made no decision (events.ConfirmDismissed)
	refusals   int            // answers the policy refused so far
	// need is how many distinct proven people must approve
	// (policy.Decision.ApprovalsRequired); approvals are those who did,
	// by person (approverOf), in order.
	need      int
	approvals []string
	// people are who answered for the call, as the policy judged them
	// (policy.Approver.Person), in order: what its trace shows.
	people []string
}

// ask sends the question: recorded, so that an approver that follows the
// audit stream sees it even when a node was lost on the way, and to the
// caller when its user is asked; and it tells the caller its call waits
// (waiting). It has no reply subject: the answers go to
// AnswerSubject(req.AnswerTo, ...).
func (c *call) ask(q *question, reason string) *stop {
	e := c.e
	data, err := events.Encode(q.req)
	if err != nil {
		return &stop{events.ErrPolicyDenied, "confirmation request does not encode: " + err.Error()}
	}
	c.step("confirming", reason)
	if err := e.rec.Record(events.SubjectConfirm, data); err != nil {
		return &stop{events.ErrPolicyDenied, "confirmation failed, so the call is denied: " + err.Error()}
	}
	if q.callerAsks {
		m := nats.NewMsg(c.reply)
		m.Header.Set(events.KindHeader, events.KindConfirm)
		m.Data = data
		if err := e.nc.PublishMsg(m); err != nil {
			e.log.Warn("the confirmation request did not reach the caller; the approvers may still answer", "invocation", c.inv.ID, "err", err)
		}
	}
	c.waiting(reason)
	return nil
}

// waiting tells the caller that its call waits for a person, until when,
// and where one answers: a caller that prints nothing for minutes looks
// hung. Heartbeats keep the call alive; this says why it takes long.
func (c *call) waiting(reason string) {
	e := c.e
	if c.reply == "" {
		return
	}
	data, err := events.Encode(&events.ConfirmWaiting{Header: events.Header{Sender: e.id}, InvocationID: c.inv.ID, Tool: c.tool.Name,
		Reason: reason, DeadlineMillis: e.cfg.ConfirmTimeout.Milliseconds(), Hint: e.cfg.ApproveHint})
	if err != nil {
		e.log.Error("the waiting notice does not encode", "invocation", c.inv.ID, "err", err)
		return
	}
	m := nats.NewMsg(c.reply)
	m.Header.Set(events.KindHeader, events.KindWaiting)
	m.Header.Set(events.ExecutorHeader, e.id.ID)
	m.Data = data
	_ = e.nc.PublishMsg(m)
}

// awaitAnswer waits for the first answer the policy accepts, until ctx
// ends or, when only approvers can answer, until none is there any more;
// the wait's end is recorded (ConfirmClosed) when no answer came. When
// the caller's user was asked and made no decision (a dismissal), only
// the approvers can answer from then on: with none present the call ends
// at once, saying where to approve.
func (c *call) awaitAnswer(ctx context.Context, q *question, answers *nats.Subscription) (*events.ConfirmAnswer, *stop) {
	e := c.e
	endChecks := func() {}
	defer func() { endChecks() }()
	if !q.callerAsks {
		ctx, endChecks = c.whileApproversStay(ctx)
	}
	for {
		msg, err := answers.NextMsgWithContext(ctx)
		if err != nil {
			st := &stop{events.ErrPolicyDenied, "confirmation failed, so the call is denied: " + err.Error()}
			switch {
			case c.ctx.Err() != nil:
				st = &stop{events.ErrCancelled, fmt.Sprintf("cancelled while waiting for confirmation: %v", context.Cause(c.ctx))}
			case errors.Is(context.Cause(ctx), errApproversLeft):
				st = &stop{events.ErrPolicyDenied, fmt.Sprintf("No approver is connected any more (the last left while the call waited), so the call is denied. To approve calls like this one, %s, then make the call again.", e.cfg.ApproveHint)}
			case errors.Is(err, context.DeadlineExceeded):
				st = &stop{events.ErrConfirmationTimeout, fmt.Sprintf("No approver answered within %s, so the call is denied. To approve calls like this one, %s.", e.cfg.ConfirmTimeout, e.cfg.ApproveHint)}
			}
			return nil, c.closeQuestion(q, st)
		}
		// A dismissal is a message of its own type, never an answer: it
		// cannot allow the call, nor end it as the person's no.
		d, err := events.Decode[events.ConfirmDismissed](msg.Data)
		switch {
		case errors.Is(err, events.ErrType):
			if answer := c.accepted(ctx, q, msg); answer != nil {
				return answer, nil
			}
			continue
		case err != nil:
			e.log.Warn("ignoring a dismissal that does not decode", "invocation", c.inv.ID, "err", err)
			c.ack(msg, false, "the dismissal is not valid: "+err.Error())
			continue
		}
		if !c.dismissal(q, msg, d) {
			continue
		}
		who := d.Sender.ID
		if !e.approverPresent(ctx) {
			return nil, c.closeQuestion(q, &stop{events.ErrPolicyDenied, fmt.Sprintf("The policy asks for confirmation (%s); %s made no decision on it (%s), and no approver is connected to give it, so the call is denied. To approve calls like this one, %s, then make the call again.", q.req.Reason, who, d.Why, e.cfg.ApproveHint)})
		}
		c.step("dismissed", fmt.Sprintf("%s made no decision (%s); the approvers answer", who, d.Why))
		// From here only the approvers answer: the call waits while one
		// of them is there.
		ctx, endChecks = c.whileApproversStay(ctx)
	}
}

// closeQuestion records that q ended with no accepted answer, for st,
// and returns st.
func (c *call) closeQuestion(q *question, st *stop) *stop {
	c.e.publish(events.SubjectConfirmClosed, &events.ConfirmClosed{Header: c.header(), InvocationID: c.inv.ID, ErrorType: st.Type, Reason: st.Msg, AnswerTo: q.req.AnswerTo})
	return st
}

// dismissal reports whether d, which came in msg, counts: it must be
// for this call, come from the user of this call's caller on the
// caller's subject (bound as an answer is, bindAnswerer), and the caller
// must have been asked and not have dismissed the question already. The
// sender is told it decides nothing, or why it does not count.
func (c *call) dismissal(q *question, msg *nats.Msg, d *events.ConfirmDismissed) bool {
	refuse := func(reason string) bool {
		c.ack(msg, false, reason)
		if q.refusals++; q.refusals <= maxRecordedRefusals {
			c.step("approver-refused", d.Sender.ID+" dismissing the question: "+reason)
		}
		return false
	}
	if d.InvocationID != c.inv.ID {
		c.ack(msg, false, fmt.Sprintf("the dismissal is for invocation %q, not %q", d.InvocationID, c.inv.ID))
		return false
	}
	as, _, _, err := events.SplitAnswerSubject(q.req.AnswerTo, msg.Subject)
	switch {
	case err != nil:
		return refuse(err.Error())
	case as != events.AnswerAsCaller:
		return refuse("only the caller's user dismisses a question; an approver answers it, or leaves it to others")
	case !q.callerAsks:
		return refuse("this call's caller was not asked to confirm it")
	case q.dismissed:
		return refuse("the caller's user made no decision on this question already")
	case d.Sender.ID != events.AgentUser(c.inv.Sender).ID || d.Sender.Role != events.RoleAgentUser:
		return refuse(fmt.Sprintf("a dismissal must come from %q", events.AgentUser(c.inv.Sender).ID))
	}
	if err := c.bindAnswerer(q.req, msg.Subject, &d.Sender, q.callerAsks); err != nil {
		return refuse(err.Error())
	}
	q.dismissed = true
	c.ack(msg, false, "a dismissal decides nothing: the call is left to the approvers")
	return true
}

// errApproversLeft ends a wait for an answer that nobody is there to give.
var errApproversLeft = errors.New("no approver is connected any more")

// whileApproversStay is ctx, ended with errApproversLeft once no approver
// has been present at two checks in a row (Config.PresenceCheck apart): a
// person who closes the console's last page, or stops toolbus confirm,
// leaves no caller waiting for the whole confirmation timeout. stop ends
// the checks, and returns once they have ended.
func (c *call) whileApproversStay(ctx context.Context) (_ context.Context, stop func()) {
	ctx, leave := context.WithCancelCause(ctx)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(c.e.cfg.PresenceCheck)
		defer tick.Stop()
		absent := 0
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if c.e.approverPresent(ctx) {
				absent = 0
			} else if absent++; absent >= 2 {
				leave(errApproversLeft)
				return
			}
		}
	}()
	return ctx, func() {
		close(done)
		<-ended
		leave(nil)
	}
}

// accepted is the answer msg holds when it is valid, for this call, from
// whom the subject it came on allows, and one the policy accepts; nil
// otherwise, the answerer told why, and a refusal by who or by the
// policy recorded, up to maxRecordedRefusals.
func (c *call) accepted(ctx context.Context, q *question, msg *nats.Msg) *events.ConfirmAnswer {
	e := c.e
	answer, err := events.Decode[events.ConfirmAnswer](msg.Data)
	if err != nil {
		e.log.Warn("ignoring a confirmation answer that does not decode", "invocation", c.inv.ID, "err", err)
		c.ack(msg, false, "the answer is not valid: "+err.Error())
		return nil
	}
	if answer.InvocationID != c.inv.ID {
		c.ack(msg, false, fmt.Sprintf("the answer is for invocation %q, not %q", answer.InvocationID, c.inv.ID))
		return nil
	}
	// A caller's user who made no decision has had their turn: the
	// question is the approvers' now.
	err = errors.New("the caller's user made no decision on this question; the approvers answer it now")
	if as, _, _, _ := events.SplitAnswerSubject(q.req.AnswerTo, msg.Subject); !q.dismissed || (as != events.AnswerAsCaller && answer.Sender.Role != events.RoleAgentUser) {
		err = c.bindAnswerer(q.req, msg.Subject, &answer.Sender, q.callerAsks)
	}
	if err != nil {
		c.ack(msg, false, err.Error())
		if q.refusals++; q.refusals <= maxRecordedRefusals {
			e.publish(events.SubjectConfirmRejected, &events.ConfirmRejected{Header: c.header(), InvocationID: c.inv.ID, Answer: *answer, Reason: err.Error(), AnswerTo: q.req.AnswerTo})
		}
		return nil
	}
	who, person := approverOf(answer, msg.Subject, q.req.AnswerTo)
	ok, reason := q.pol.ApproverAllowed(ctx, q.in, who, answer.Outcome)
	if ok && q.need > 1 {
		reason = q.countable(who, person, answer.Outcome)
		ok = reason == ""
	}
	if !ok {
		c.ack(msg, false, reason)
		// Each refusal is recorded, up to a bound: a client that sends
		// refused answers in a loop must not flood the audit stream.
		if q.refusals++; q.refusals <= maxRecordedRefusals {
			e.publish(events.SubjectConfirmRejected, &events.ConfirmRejected{Header: c.header(), InvocationID: c.inv.ID, Answer: *answer, Reason: reason, AnswerTo: q.req.AnswerTo})
			c.step("approver-refused", answer.Sender.ID+": "+reason)
		} else if q.refusals == maxRecordedRefusals+1 {
			e.log.Warn("more refused answers than are recorded for one call", "invocation", c.inv.ID, "recorded", maxRecordedRefusals)
		}
		return nil
	}
	// Recorded as the answer to this request of this caller's call, in
	// the executor's words: what the answerer put there is not read.
	answer.AnswerTo, answer.Principal, answer.Via = q.req.AnswerTo, c.principal, who.Via
	answer.Approval, answer.Of = 0, 0
	if q.need > 1 && answer.Outcome == events.ProceedOnce {
		q.approvals = append(q.approvals, person)
		q.people = append(q.people, who.Person)
		answer.Approval, answer.Of = len(q.approvals), q.need
		if len(q.approvals) < q.need {
			c.ackWith(msg, &events.ConfirmAck{Accepted: true, Approval: answer.Approval, Of: q.need,
				Reason: fmt.Sprintf("approval %d of %d: %d more must approve", answer.Approval, q.need, q.need-answer.Approval)})
			e.publish(events.SubjectConfirmAnswered, answer)
			c.step("approved", fmt.Sprintf("%d of %d, by %s", len(q.approvals), q.need, who.Person))
			return nil
		}
	}
	if q.need <= 1 {
		q.people = append(q.people, who.Person)
	}
	c.ack(msg, true, "")
	e.publish(events.SubjectConfirmAnswered, answer)
	c.step("confirmed", string(answer.Outcome)+" by "+answer.Sender.ID)
	return answer
}

// countable says why an answer the policy lets decide does not count
// toward a call that needs q.need people, "" when it does. A no (cancel)
// from any of them ends the call. A yes counts once per proven person,
// never from the requester's own user.
func (q *question) countable(who *policy.Approver, person string, outcome events.Outcome) string {
	switch {
	case outcome == events.Cancel:
		return ""
	case outcome != events.ProceedOnce:
		return fmt.Sprintf("this call needs %d people to approve it as it is: answer proceed_once or cancel, not %s", q.need, outcome)
	case who.Via == events.ViaAgentUser:
		return fmt.Sprintf("this call needs %d people to approve it, and the requester's own user is not one of them", q.need)
	case !who.Proven || person == "":
		return fmt.Sprintf("this call needs %d proven people to approve it: %s answered without a sign-in that proves who they are", q.need, who.ID)
	case slices.Contains(q.approvals, person):
		return fmt.Sprintf("%s approved this call already; it needs %d different people", who.Person, q.need)
	}
	return ""
}

// approverOf is who sent answer, which came on subject below answerTo, as
// the policy sees them (input.approver): the answering identity, as
// bindAnswerer proved it, and the person behind it; and, for a proven
// person, the key that tells two people apart (their provider's issuer
// and subject, or the member). The executor decides
// who the person is and whether they are proven; the answer only says
// how their sign-in knows them (events.Signer):
//   - on the caller's subject, the person in front of the calling agent,
//     whom nobody proves;
//   - from an approver the bus proved: a person its OpenID sign-in proved
//     (issuer and subject), or the approver itself, when it says the
//     person is the member (an identity of their own);
//   - else a name, claimed.
func approverOf(answer *events.ConfirmAnswer, subject, answerTo string) (a *policy.Approver, key string) {
	a = &policy.Approver{Identity: answer.Sender, Via: answer.Via}
	as, _, _, _ := events.SplitAnswerSubject(answerTo, subject)
	if as == events.AnswerAsCaller || answer.Sender.Role == events.RoleAgentUser {
		a.Via = events.ViaAgentUser
		a.Person = answer.Sender.ID
		return a, ""
	}
	if a.Via == events.ViaAgentUser {
		a.Via = "" // only the caller's subject makes an agent user
	}
	w := answer.Who
	switch {
	case w == nil:
		a.Person = answer.Person
	case w.Issuer != "":
		a.Person = cmp.Or(w.Email, w.Name, w.Subject)
		a.Groups = w.Groups
		a.Proven = answer.Sender.Proven
		key = "oidc:" + w.Issuer + "#" + w.Subject
	case w.Member:
		a.Person = answer.Sender.ID
		a.Proven = answer.Sender.Proven
		key = "member:" + answer.Sender.ID
	default:
		a.Person = cmp.Or(w.Name, answer.Person)
	}
	if !a.Proven {
		key = ""
	}
	return a, key
}

// bindAnswerer checks who sent an answer against the subject it came on,
// and marks the approver proven when the bus vouched for it. On the
// approvers' subject the approver must be the principal and no agent's
// user; on the caller's, it must be the user of this call's caller, sent
// with the caller's own identity, and only when the caller was asked.
// Without identities the subject vouches for nothing, and the policy
// judges the answerer as it claims to be.
func (c *call) bindAnswerer(req *events.ConfirmRequest, subject string, who *events.Identity, callerAsked bool) error {
	who.Proven = false
	as, principal, _, err := events.SplitAnswerSubject(req.AnswerTo, subject)
	if err != nil || !c.e.cfg.IdentitiesEnforced {
		return err
	}
	if principal == events.Unproven {
		// Where the bus enforces identities, only a member that may
		// publish everywhere (an admin; in `toolbus up`, the developer
		// connecting with no identity) can send this: the request has
		// no reply subject to answer on. It is judged as it claims to
		// be, not proven.
		return nil
	}
	switch as {
	case events.AnswerAsCaller:
		if !callerAsked {
			return errors.New("this call's caller was not asked to confirm it")
		}
		if who.ID != events.AgentUser(c.inv.Sender).ID || who.Role != events.RoleAgentUser {
			return fmt.Errorf("an answer on the caller's subject must come from %q", events.AgentUser(c.inv.Sender).ID)
		}
		if principal != c.principal {
			return fmt.Errorf("the answer was sent with the identity %q, not the caller's", principal)
		}
	case events.AnswerAsApprover:
		if who.Role == events.RoleAgentUser {
			return errors.New("an agent's user answers on the caller's subject, not the approvers'")
		}
		if who.ID != principal {
			return fmt.Errorf("the answer names its approver %q, but was sent with the identity %q", who.ID, principal)
		}
	}
	who.Proven = true
	return nil
}

// maxRecordedRefusals bounds the refused answers recorded for one
// confirmation request; later ones are acknowledged as refused only.
const maxRecordedRefusals = 20

// confirmRequest is what an approver is shown of the call: the policy's
// reason and flags, the diff or the command, and the "always" answers the
// policy would remember, each with what it would keep.
func (c *call) confirmRequest(d policy.Decision, pol *policy.Policy, in *policy.Input) *events.ConfirmRequest {
	e, t := c.e, c.tool
	req := &events.ConfirmRequest{Header: c.header(), InvocationID: c.inv.ID, Tool: t.Name, Server: c.host.judged.Server,
		Kind: c.host.judged.Kind, Caller: c.inv.Sender, Args: c.inv.Args, Reason: d.Reason, DeadlineMillis: e.cfg.ConfirmTimeout.Milliseconds()}
	if cm, ok := c.impl.(tool.Commander); ok {
		req.Command, _ = cm.Command(c.inv.Args)
	}
	if df, ok := c.impl.(tool.Differ); ok {
		if diff, err := df.Diff(&tool.Call{ID: c.inv.ID, Args: c.inv.Args, Opened: c.opened}); err == nil {
			req.Diff = diff
		}
	}
	flagged, err := pol.Flagged(c.ctx, in)
	if err != nil {
		e.log.Warn("the policy's flagged rule failed; the approver sees no flags", "invocation", c.inv.ID, "err", err)
	}
	req.Flagged = flagged
	// What every approver holds is bounded, and a request fits in one
	// message: a huge diff, arguments or command are cut, with a note.
	req.Shorten()
	if d.Remember {
		outcomes := []events.Outcome{events.ProceedAlways, events.ProceedAlwaysTool}
		if in.Tool.Source == events.SourceMCP {
			outcomes = append(outcomes, events.ProceedAlwaysServer)
		}
		seen := map[string]bool{}
		for _, o := range outcomes {
			entries, err := pol.Remember(c.ctx, in, o)
			if err != nil || len(entries) == 0 {
				continue
			}
			if what := describeEntries(entries); !seen[what] {
				seen[what] = true
				req.Always = append(req.Always, events.AlwaysOption{Outcome: o, Remembers: what})
			}
		}
	}
	return req
}

// ack tells the approver that sent msg whether its answer decides the
// call. An answer sent without a reply subject gets none.
func (c *call) ack(msg *nats.Msg, accepted bool, reason string) {
	c.ackWith(msg, &events.ConfirmAck{Accepted: accepted, Reason: reason})
}

// ackWith sends ack, as this executor's about this call, to the answer
// msg carried.
func (c *call) ackWith(msg *nats.Msg, ack *events.ConfirmAck) {
	if msg.Reply == "" {
		return
	}
	ack.Header, ack.InvocationID = events.Header{Sender: c.e.id}, c.inv.ID
	data, err := events.Encode(ack)
	if err != nil {
		c.e.log.Error("confirmation acknowledgement does not encode", "invocation", c.inv.ID, "err", err)
		return
	}
	if err := msg.Respond(data); err != nil {
		c.e.log.Warn("confirmation acknowledgement not sent", "invocation", c.inv.ID, "err", err)
	}
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
	entries, err := c.pol.Remember(c.ctx, c.input(c.args, c.paths, c.hardLinks, c.shell), a.Outcome)
	if err != nil {
		e.log.Error("approval not remembered: the policy's remember rule failed", "invocation", c.inv.ID, "err", err)
		c.step("not-remembered", "the policy's remember rule failed: "+err.Error())
		return
	}
	if len(entries) == 0 {
		c.step("not-remembered", "the policy remembers nothing of this approval")
		return
	}
	records := make([]events.AllowRecord, len(entries))
	for i, entry := range entries {
		records[i] = events.AllowRecord{AllowEntry: entry, By: a.Sender.ID, For: c.inv.ID, AddedAt: time.Now().UTC()}
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
			if e.Path != "" { // a discovered tool, in its executor's workspace
				parts[i] += " in " + e.Path
			}
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
