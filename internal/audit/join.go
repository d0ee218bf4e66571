package audit

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// bySender are the subjects that carry their sender's principal in a
// last token (the records of events.InvokeSubject and the like).
var bySender = []string{events.SubjectInvoke, events.SubjectCancel, events.SubjectResult}

// kindOf is the subject an event of subject is joined as, and the
// principal its subject names ("" for none).
func kindOf(subject string) (kind, principal string) {
	if subject == events.SubjectConfirmLegacy {
		return events.SubjectConfirm, ""
	}
	if strings.HasPrefix(subject, events.SubjectInvokeBatch+".") {
		return subject, ""
	}
	for _, base := range bySender {
		if strings.HasPrefix(subject, base+".") {
			// One token, or two for a client of a facade
			// (events.ClientPrincipal).
			if p, ok := events.SubjectPrincipal(subject); ok {
				return base, p
			}
			return subject, ""
		}
	}
	return subject, ""
}

// Records are joined by the id the executor that accepted the call minted
// for it (events.Header.Call), which the invocation's record carries in
// events.CallHeader and every event an executor records about the call
// in its header: one id, one call. What a caller sends about its call (a
// cancel, its own record of a result) names the caller's key, its
// principal and id (key), and joins the latest call under it. Events
// recorded before executors minted ids are joined by key too, and, when
// they name no principal (recorded before executors said it, or a cancel
// any admin may send), by their id alone (idKey), to the latest call of
// that id.

// key is the key of principal's call id.
func key(principal, id string) string { return principal + "\x00" + id }

// idKey is the key of an event that names no principal.
func idKey(id string) string { return "\x00" + id }

// callKey is the key events of the call the executor minted id for are
// held under until its invocation is read.
func callKey(id string) string { return "\x01" + id }

// callRef is the record a minted call id joins: its own, or, for a copy
// of a call's request (refused as such), the record of the call it
// copies.
type callRef struct {
	r    *Record
	copy bool
}

// joiner joins events into records as they are read.
type joiner struct {
	q        Query
	timeline bool
	byKey    map[string]*Record // by key, and by idKey the latest of each id
	byCall   map[string]callRef // by the call id the executor minted
	// refusals are, by key, the invocations under a key taken before,
	// in stream order, waiting for their refusal (INVOCATION_ID_REUSED):
	// a reused id's record, which the refusal ends, or a copy of a call,
	// on whose record it is noted.
	refusals map[string][]awaited
	// byDigest is each record by its key and the SHA-256 of its bytes,
	// which its copies share.
	byDigest map[string]*Record
	order    []*Record
	// judged, when set, is given every decision recorded with its input,
	// once it is attached to its record.
	judged func(*Record, *judgedCall)
	// held are events read before the invocation they belong to, by its
	// key (or idKey), and heldIDs their keys in the order they came: a
	// record sent again after a node was lost is stored after the events
	// that were not (bus.Recorder). They are taken in when the invocation
	// comes.
	held    map[string][]message
	heldIDs []string
}

// awaited is an invocation waiting for its refusal: r's own, or, for a
// copy of r, a copy's.
type awaited struct {
	r    *Record
	copy bool
}

// message is one message of the stream, as the join takes it in.
type message struct {
	subject string
	data    []byte
	seq     uint64
	at      time.Time
	// incomplete says which of its large fields are not in the trail
	// (events.Inline): data holds a note of each instead.
	incomplete string
	// call is an invocation record's events.CallHeader.
	call string
}

// maxHeld bounds the invocations events are held for: the oldest are
// let go (events of invocations outside the read, or of none).
const maxHeld = 4096

func newJoiner(q Query, timeline bool) *joiner {
	return &joiner{q: q, timeline: timeline, byKey: make(map[string]*Record), byCall: make(map[string]callRef), refusals: make(map[string][]awaited), byDigest: make(map[string]*Record), held: make(map[string][]message)}
}

// hold keeps m, an event of invocation id under k, not read yet, for when
// it is.
func (j *joiner) hold(k, id string, m message) bool {
	if j.q.ID != "" && id != j.q.ID {
		return true
	}
	if _, ok := j.held[k]; !ok {
		j.heldIDs = append(j.heldIDs, k)
		if len(j.heldIDs) > maxHeld {
			delete(j.held, j.heldIDs[0])
			j.heldIDs = j.heldIDs[1:]
		}
	}
	j.held[k] = append(j.held[k], m)
	return true
}

// forget drops r from the join (Tail, once r is shown).
func (j *joiner) forget(r *Record) {
	k := key(r.Principal, r.ID)
	if j.byKey[k] == r {
		delete(j.byKey, k)
	}
	if j.byKey[idKey(r.ID)] == r {
		delete(j.byKey, idKey(r.ID))
	}
	delete(j.refusals, k)
	delete(j.byDigest, k+string(r.digest[:]))
	delete(j.byCall, r.Call)
}

// add takes in one message; false when it does not decode.
func (j *joiner) add(subject string, data []byte, seq uint64, at time.Time) bool {
	return j.addMessage(message{subject: subject, data: data, seq: seq, at: at})
}

// addMessage takes in m; false when it does not decode.
func (j *joiner) addMessage(m message) bool {
	subject := m.subject
	if id, ok := strings.CutPrefix(subject, events.SubjectProgressPrefix); ok {
		j.progress(idKey(id), m)
		return true
	}
	kind, principal := kindOf(subject)
	if kind == events.SubjectInvoke {
		return j.invocation(m, principal)
	}
	if join := joins[kind]; join != nil {
		return join(j, m, principal)
	}
	return true
}

// progress puts a piece of a call's output on its timeline: its size, not
// what it says.
func (j *joiner) progress(k string, m message) {
	if r := j.byKey[k]; r != nil && j.timeline {
		r.Events = append(r.Events, Event{Seq: m.seq, Time: m.at, Subject: m.subject, Type: "tool.progress",
			Summary: fmt.Sprintf("%d bytes of output", len(m.data))})
	}
}

// mark notes on r that m, one of its records, lacks large fields the
// trail lost or holds altered: r is shown so, and never replayed.
func (j *joiner) mark(r *Record, m message) {
	if m.incomplete != "" {
		r.Incomplete = append(r.Incomplete, fmt.Sprintf("%s (sequence %d): %s", m.subject, m.seq, m.incomplete))
	}
}

// note puts m on r's timeline, as e says it, when the join keeps one.
func (j *joiner) note(r *Record, m message, e Event) {
	if j.timeline {
		e.Seq, e.Time, e.Subject, e.Data = m.seq, m.at, m.subject, m.data
		r.Events = append(r.Events, e)
	}
}

// entry is the timeline entry of an event with header h that says summary.
func entry(h events.Header, summary string) Event {
	return Event{Type: h.Type, Sender: h.Sender.ID, Summary: summary}
}

// invocation starts the record of an invocation q selects, then takes in
// the events about it that were read before it.
func (j *joiner) invocation(m message, principal string) bool {
	inv, err := events.Decode[events.Invocation](m.data)
	if err != nil {
		return false
	}
	if j.q.ID != "" && inv.ID != j.q.ID || !j.q.Until.IsZero() && !inv.Time.Before(j.q.Until) || inv.Time.Before(j.q.Since) {
		return true
	}
	k := key(principal, inv.ID)
	if ref, ok := j.byCall[m.call]; ok && m.call != "" {
		// The record sent again after a node was lost (bus.Recorder):
		// the same call, once.
		ref.r.Copies++
		j.note(ref.r, m, entry(inv.Header, "the record of this request again (sent again by its executor)"))
		return true
	}
	digest := sha256.Sum256(m.data)
	if same := j.byDigest[k+string(digest[:])]; same != nil {
		// The same request again: a record sent again, or a client's
		// retry, which the executor refuses rather than run twice.
		same.Copies++
		if m.call != "" {
			j.byCall[m.call] = callRef{r: same, copy: true}
		} else {
			j.refusals[k] = append(j.refusals[k], awaited{r: same, copy: true})
		}
		j.note(same, m, entry(inv.Header, "the same request again (a copy; it is not run again)"))
		j.takeHeld(callKey(m.call))
		return true
	}
	first := j.byKey[k]
	if attempt := events.AttemptOf(inv.Attempt); attempt > 1 && first != nil {
		// A retry of a call read already: an attempt of its record,
		// not a call of its own.
		j.byDigest[k+string(digest[:])] = first
		if m.call != "" {
			j.byCall[m.call] = callRef{r: first}
		}
		first.addAttempt(attempt, inv.Time, true)
		summary := fmt.Sprintf("%s asks for %s again: attempt %d", inv.Sender.ID, inv.Tool, attempt)
		if inv.TimeoutMillis > 0 {
			summary += fmt.Sprintf(" (timeout %s)", time.Duration(inv.TimeoutMillis)*time.Millisecond)
		}
		j.note(first, m, entry(inv.Header, summary))
		j.takeHeld(callKey(m.call))
		return true
	}
	r := &Record{ID: inv.ID, Call: m.call, Time: inv.Time, Tool: inv.Tool, Caller: inv.Sender, Args: inv.Args, Outcome: OutcomePending,
		Principal: principal, seq: m.seq, digest: digest}
	j.order = append(j.order, r)
	summary := fmt.Sprintf("%s asks for %s", inv.Sender.ID, inv.Tool)
	if inv.TimeoutMillis > 0 {
		summary += fmt.Sprintf(" (timeout %s)", time.Duration(inv.TimeoutMillis)*time.Millisecond)
	}
	j.byDigest[k+string(digest[:])] = r
	if m.call != "" {
		j.byCall[m.call] = callRef{r: r}
	}
	if attempt := events.AttemptOf(inv.Attempt); attempt > 1 {
		r.addAttempt(attempt, inv.Time, false)
		summary += fmt.Sprintf(", attempt %d", attempt)
	}
	switch {
	case first == nil:
		j.byKey[k] = r
	default:
		// A key its principal used for another call. A call with an id
		// of its own is a call of its own, which the executor that
		// accepted it may have refused (INVOCATION_ID_REUSED, within
		// its window) or not; one without is refused, and that refusal
		// is this record's. The caller's events of the key are still
		// the first call's until it ends, this one's after.
		r.ReusedID = true
		if m.call == "" {
			j.refusals[k] = append(j.refusals[k], awaited{r: r})
		}
		if first.terminal {
			j.byKey[k] = r
		}
		summary += fmt.Sprintf(" under the id of an earlier call of %s", principal)
	}
	j.byKey[idKey(inv.ID)] = j.byKey[k]
	j.mark(r, m)
	j.note(r, m, entry(inv.Header, summary))
	for _, hk := range []string{k, idKey(inv.ID), callKey(m.call)} {
		j.takeHeld(hk)
	}
	return true
}

// takeHeld takes in the events held under hk, now that their invocation
// is read.
func (j *joiner) takeHeld(hk string) {
	if held, ok := j.held[hk]; ok {
		delete(j.held, hk)
		for _, h := range held {
			j.addMessage(h)
		}
	}
}

// ofInvocation is an envelope about one invocation, joined to its record.
type ofInvocation interface {
	events.Envelope
	ForInvocation() string
}

// joinFunc takes in a message about an invocation that came on a subject
// naming principal ("" for none); false when it does not decode.
type joinFunc func(j *joiner, m message, principal string) bool

// ofCall is an envelope about one invocation, with the principal of the
// call when an executor says it.
type ofCall interface {
	ofInvocation
	ForPrincipal() string
	ForCall() string
}

// joins take in the events about an invocation, by the subject kindOf
// joins them as.
var joins = map[string]joinFunc{
	events.SubjectDecision:        joinAs((*joiner).decision),
	events.SubjectConfirm:         joinAs((*joiner).confirmRequest),
	events.SubjectConfirmAnswered: joinAs((*joiner).confirmAnswer),
	events.SubjectConfirmRejected: joinAs((*joiner).confirmRejected),
	events.SubjectConfirmClosed:   joinAs((*joiner).confirmClosed),
	events.SubjectStep:            joinAs((*joiner).step),
	events.SubjectHook:            joinAs((*joiner).hook),
	events.SubjectCancel:          joinAs((*joiner).cancel),
	events.SubjectResult:          joinResult,
}

// joinAs is the joinFunc of envelopes of type T: it decodes one, holds it
// while its invocation is not read yet, and has take fill in the record
// and say what the event says for the timeline.
func joinAs[T any, PT interface {
	*T
	ofCall
}](take func(*joiner, *Record, PT) Event) joinFunc {
	return func(j *joiner, m message, principal string) bool {
		e, err := events.Decode[T, PT](m.data)
		if err != nil {
			return false
		}
		r, k := j.target(principal, e)
		if r == nil {
			return j.hold(k, e.ForInvocation(), m)
		}
		j.mark(r, m)
		j.note(r, m, take(j, r, e))
		return true
	}
}

// target is the record an event e, which came on a subject naming
// principal ("" for none), joins, or nil and the key to hold it under
// until the record comes. A subject's principal (a caller's cancel or
// result) reaches only that principal's calls; on the executors'
// subjects the event says whose call it is about.
func (j *joiner) target(principal string, e ofCall) (r *Record, k string) {
	if call := e.ForCall(); call != "" && principal == "" {
		return j.byCall[call].r, callKey(call)
	}
	id := e.ForInvocation()
	if principal == "" {
		principal = e.ForPrincipal()
	}
	k = idKey(id)
	if principal != "" {
		k = key(principal, id)
	}
	return j.byKey[k], k
}

// joinResult takes in a result: on SubjectResult, an executor's, which
// only executors may send; on a caller's own subject
// (events.CallerResultSubject), the caller's record of its call, which
// is never the call's outcome.
func joinResult(j *joiner, m message, principal string) bool {
	res, err := events.Decode[events.Result](m.data)
	if err != nil {
		return false
	}
	r, k := j.target(principal, res)
	if principal != "" {
		if r == nil {
			return j.hold(k, res.InvocationID, m)
		}
		j.note(r, m, j.callerResult(r, m, principal, res))
		return true
	}
	if ref := j.byCall[res.Call]; res.Call != "" && ref.copy {
		summary := "a copy of the request was refused"
		if res.Error != nil {
			summary += ": " + res.Error.Message
		}
		j.note(ref.r, m, entry(res.Header, summary))
		return true
	}
	if a := r.attempt(res.Attempt); a != nil {
		j.mark(r, m)
		j.foldedDecision(r, m, res)
		j.note(r, m, j.attemptResult(r, a, res))
		return true
	}
	if res.Error != nil && res.Error.Type == events.ErrInvocationIDReused {
		// The refusal of an invocation under a taken id: it ends that
		// invocation's record, not the call that took the id.
		if as := j.refusals[k]; len(as) > 0 {
			j.refusals[k] = as[1:]
			if a := as[0]; a.copy {
				j.note(a.r, m, entry(res.Header, "a copy of the request was refused: "+res.Error.Message))
			} else {
				j.note(a.r, m, j.result(a.r, res))
			}
			return true
		}
	}
	if r == nil {
		return j.hold(k, res.InvocationID, m)
	}
	j.mark(r, m)
	j.foldedDecision(r, m, res)
	j.note(r, m, j.result(r, res))
	return true
}

// foldedDecision takes in the decision folded into the executor's record
// of its result: the call's decision event, as if published on its own
// before.
func (j *joiner) foldedDecision(r *Record, m message, res *events.Result) {
	if d := res.Decision; d != nil && d.Sender.ID == res.Sender.ID {
		dm := m
		dm.subject = events.SubjectDecision
		if j.timeline {
			dm.data, _ = events.Encode(d)
		}
		j.note(r, dm, j.decision(r, d))
	}
}

// addAttempt records that attempt n of r's call came at t; the first
// retry of a record whose invocation is its first attempt (retried) lists
// that attempt too.
func (r *Record) addAttempt(n int, t time.Time, retried bool) {
	if len(r.Attempts) == 0 && retried {
		first := Attempt{Attempt: 1, Time: r.Time, Outcome: OutcomePending}
		if r.terminal {
			first.Outcome, first.Executor, first.Error = r.Outcome, r.Executor, r.Error
		}
		r.Attempts = append(r.Attempts, first)
	}
	r.Attempts = append(r.Attempts, Attempt{Attempt: n, Time: t, Outcome: OutcomePending})
}

// attempt is attempt n of r (0 the first), when r lists its attempts: the
// first of that number without a result (an attacker may send one
// attempt several times), else the last; nil when r lists none, or is
// nil.
func (r *Record) attempt(n int) *Attempt {
	if r == nil {
		return nil
	}
	n = events.AttemptOf(n)
	var last *Attempt
	for i := range r.Attempts {
		if a := &r.Attempts[i]; a.Attempt == n {
			if a.Outcome == OutcomePending {
				return a
			}
			last = a
		}
	}
	return last
}

// attemptResult records the executor's result of one attempt of a call
// tried more than once. The first result of an attempt the call's
// caller made ends the call; an attempt refused (INVOCATION_ID_REUSED:
// past the bound, another call under the id, a call the policy does not
// mark idempotent) never does, unless it is the record's only attempt:
// the call it names is another attempt's.
func (j *joiner) attemptResult(r *Record, a *Attempt, res *events.Result) Event {
	n := a.Attempt
	if a.Outcome != OutcomePending {
		return entry(res.Header, fmt.Sprintf("another result of attempt %d: %s", n, outcomeOf(res)))
	}
	a.Outcome, a.Executor = outcomeOf(res), res.Sender.ID
	if res.Error != nil {
		a.Error = res.Error.Message
	}
	refused := res.Error != nil && res.Error.Type == events.ErrInvocationIDReused
	if r.terminal || refused && len(r.Attempts) > 1 {
		return entry(res.Header, fmt.Sprintf("attempt %d: %s", n, a.Outcome))
	}
	ev := j.result(r, res)
	if n > 1 {
		r.Attempt = n
	}
	ev.Summary = fmt.Sprintf("attempt %d: %s", n, ev.Summary)
	return ev
}

// decision records the policy's decision and, for a read that replays
// decisions, keeps it with its input.
func (j *joiner) decision(r *Record, d *events.Decision) Event {
	r.Verdict, r.Reason, r.PolicyRevision, r.Cached = d.Verdict, d.Reason, d.PolicyRevision, d.Cached
	e := entry(d.Header, fmt.Sprintf("policy %s: %s (revision %s)", d.Verdict, d.Reason, d.PolicyRevision))
	if j.judged != nil && len(d.Input) > 0 {
		jc := &judgedCall{d: d}
		r.judged = append(r.judged, jc)
		if len(r.Incomplete) > 0 {
			// Judged on notes in place of what was lost, a replay would
			// say what the policy makes of the notes.
			jc.err = fmt.Errorf("%w: %s", errIncomplete, strings.Join(r.Incomplete, "; "))
			return e
		}
		j.judged(r, jc)
	}
	return e
}

func (*joiner) confirmRequest(_ *Record, c *events.ConfirmRequest) Event {
	summary := "confirmation asked: " + c.Reason
	if c.Command != "" {
		summary += "; command: " + c.Command
	}
	return entry(c.Header, summary)
}

func (*joiner) confirmAnswer(r *Record, a *events.ConfirmAnswer) Event {
	approver := a.Sender
	r.Approver, r.Answer, r.ApproverPerson = &approver, a.Outcome, a.Person
	who := a.Sender.ID
	if a.Person != "" {
		who += " (" + a.Person + ")"
	}
	summary := fmt.Sprintf("%s answered %s", who, a.Outcome)
	if a.Message != "" {
		summary += ": " + a.Message
	}
	return entry(a.Header, summary)
}

func (*joiner) confirmRejected(r *Record, c *events.ConfirmRejected) Event {
	r.Rejected++
	return entry(c.Header, fmt.Sprintf("answer %s of %s refused: %s", c.Answer.Outcome, c.Answer.Sender.ID, c.Reason))
}

func (*joiner) confirmClosed(_ *Record, c *events.ConfirmClosed) Event {
	return entry(c.Header, fmt.Sprintf("confirmation closed, %s: %s", c.ErrorType, c.Reason))
}

func (*joiner) step(r *Record, s *events.Step) Event {
	if s.Step == events.StepRetried && s.Attempt > 1 && r.attempt(s.Attempt) == nil {
		// The executor tries the call again itself: the attempt before
		// ended with the failure the step names.
		r.addAttempt(s.Attempt, s.Time, true)
		if prev := r.attempt(s.Attempt - 1); prev != nil && prev.Outcome == OutcomePending {
			prev.Outcome, prev.Executor, prev.Error = string(events.ErrExecutionFailed), s.Sender.ID, s.Detail
		}
		return entry(s.Header, fmt.Sprintf("step %s: attempt %d, after: %s", s.Step, s.Attempt, s.Detail))
	}
	return entry(s.Header, "step "+s.Step)
}

func (*joiner) hook(_ *Record, h *events.HookRun) Event {
	summary := fmt.Sprintf("%s hook %s: %s", h.Event, h.Hook, h.Outcome)
	if h.Message != "" {
		summary += ": " + h.Message
	}
	return entry(h.Header, summary)
}

func (*joiner) cancel(_ *Record, c *events.CancelRequest) Event {
	return entry(c.Header, fmt.Sprintf("%s cancels", c.Sender.ID))
}

// callerResult records the caller's own record of its call, beside the
// executor's result, never in its place.
func (*joiner) callerResult(r *Record, m message, principal string, res *events.Result) Event {
	cr := &CallerRecord{Sender: res.Sender.ID, Time: res.Time, Outcome: outcomeOf(res), BeforeCall: m.seq < r.seq}
	if res.Error != nil {
		cr.Error = res.Error.Message
	}
	summary := fmt.Sprintf("the caller's own record (%s): %s", principal, cr.Outcome)
	if cr.BeforeCall {
		summary += ", recorded before the call was: no give-up"
	}
	if r.CallerRecord == nil {
		r.CallerRecord = cr
		if !r.terminal {
			r.Outcome = OutcomeNoExecutorResult
		}
	} else {
		summary += " (another)"
	}
	return entry(res.Header, summary)
}

// result records the executor's result as the terminal one, or counts
// one that came after it.
func (*joiner) result(r *Record, res *events.Result) Event {
	if r.terminal {
		r.LateResults++
		return entry(res.Header, "another result, after the terminal one: "+outcomeOf(res))
	}
	r.terminal = true
	r.AfterGiveUp = res.Late
	r.Outcome, r.Executor, r.Trace = outcomeOf(res), res.Sender.ID, res.Trace
	r.DurationMillis = res.Time.Sub(r.Time).Milliseconds()
	r.Truncated, r.OutputRef = res.Truncated, res.OutputRef
	if res.Error != nil {
		r.Error = res.Error.Message
	}
	// The result carries the decision acted on, a hook's change
	// included.
	if p := res.Policy; p != nil {
		r.Verdict, r.Reason, r.PolicyRevision, r.Cached = p.Verdict, p.Reason, p.Revision, p.Cached
	}
	summary := fmt.Sprintf("result %s after %s", r.Outcome, time.Duration(r.DurationMillis)*time.Millisecond)
	if res.Late {
		summary += ", after the caller gave up"
	}
	if res.OutputRef != "" {
		summary += "; whole output in " + events.OutputBucket + "/" + res.OutputRef
	}
	return entry(res.Header, summary)
}

func outcomeOf(res *events.Result) string {
	if res.Error == nil {
		return OutcomeOK
	}
	return string(res.Error.Type)
}

// records are the joined records q selects, in invocation order. A
// caller's record still held names a call of its id that its principal
// never made: it is counted on the calls of that id as foreign.
func (j *joiner) records() []*Record {
	for k, held := range j.held {
		principal, id, ok := strings.Cut(k, "\x00")
		r := j.byKey[idKey(id)]
		if !ok || principal == "" || r == nil {
			continue
		}
		for _, m := range held {
			kind, p := kindOf(m.subject)
			if kind != events.SubjectResult || p == "" {
				continue
			}
			r.ForeignRecords++
			j.note(r, m, Event{Type: "tool.result", Summary: fmt.Sprintf("a result recorded by %s, not this call's caller (%s): foreign, not joined", p, r.Principal)})
		}
		delete(j.held, k)
	}
	out := make([]*Record, 0, len(j.order))
	for _, r := range j.order {
		if j.q.matches(r) {
			out = append(out, r)
		}
	}
	return out
}

func (q Query) matches(r *Record) bool {
	switch {
	case q.Tool != "" && r.Tool != q.Tool:
		return false
	case q.Caller != "" && r.Caller.ID != q.Caller && r.Caller.Agent != q.Caller && r.Caller.User != q.Caller:
		return false
	case q.Verdict != "" && string(r.Verdict) != q.Verdict:
		return false
	case q.Outcome != "" && r.Outcome != q.Outcome:
		return false
	case q.Approver != "" && (r.Approver == nil || r.Approver.ID != q.Approver):
		return false
	case q.Trace != "" && TraceID(r.Trace) != q.Trace:
		return false
	}
	return true
}
