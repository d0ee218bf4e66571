package audit

import (
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
	for _, base := range bySender {
		if p, ok := strings.CutPrefix(subject, base+"."); ok && p != "" && !strings.Contains(p, ".") {
			return base, p
		}
	}
	return subject, ""
}

// joiner joins events into records as they are read.
type joiner struct {
	q        Query
	timeline bool
	byID     map[string]*Record
	order    []*Record
	// judged, when set, is given every decision recorded with its input,
	// once it is attached to its record.
	judged func(*Record, *judgedCall)
	// held are events read before the invocation they belong to, by its
	// id, and heldIDs their ids in the order they came: a record sent
	// again after a node was lost is stored after the events that were
	// not (bus.Recorder). They are taken in when the invocation comes.
	held    map[string][]message
	heldIDs []string
}

// message is one message of the stream, as the join takes it in.
type message struct {
	subject string
	data    []byte
	seq     uint64
	at      time.Time
}

// maxHeld bounds the invocations events are held for: the oldest are
// let go (events of invocations outside the read, or of none).
const maxHeld = 4096

func newJoiner(q Query, timeline bool) *joiner {
	return &joiner{q: q, timeline: timeline, byID: make(map[string]*Record), held: make(map[string][]message)}
}

// hold keeps m, an event of invocation id, not read yet, for when it is.
func (j *joiner) hold(id string, m message) bool {
	if j.q.ID != "" && id != j.q.ID {
		return true
	}
	if _, ok := j.held[id]; !ok {
		j.heldIDs = append(j.heldIDs, id)
		if len(j.heldIDs) > maxHeld {
			delete(j.held, j.heldIDs[0])
			j.heldIDs = j.heldIDs[1:]
		}
	}
	j.held[id] = append(j.held[id], m)
	return true
}

// add takes in one message; false when it does not decode.
func (j *joiner) add(subject string, data []byte, seq uint64, at time.Time) bool {
	m := message{subject, data, seq, at}
	if id, ok := strings.CutPrefix(subject, events.SubjectProgressPrefix); ok {
		j.progress(id, m)
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
func (j *joiner) progress(id string, m message) {
	if r := j.byID[id]; r != nil && j.timeline {
		r.Events = append(r.Events, Event{Seq: m.seq, Time: m.at, Subject: m.subject, Type: "tool.progress",
			Summary: fmt.Sprintf("%d bytes of output", len(m.data))})
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
	if j.byID[inv.ID] != nil {
		return true // the same invocation again (a retry): the first counts
	}
	r := &Record{ID: inv.ID, Time: inv.Time, Tool: inv.Tool, Caller: inv.Sender, Args: inv.Args, Outcome: OutcomePending, principal: principal}
	j.byID[inv.ID] = r
	j.order = append(j.order, r)
	summary := fmt.Sprintf("%s asks for %s", inv.Sender.ID, inv.Tool)
	if inv.TimeoutMillis > 0 {
		summary += fmt.Sprintf(" (timeout %s)", time.Duration(inv.TimeoutMillis)*time.Millisecond)
	}
	j.note(r, m, entry(inv.Header, summary))
	if held, ok := j.held[inv.ID]; ok {
		delete(j.held, inv.ID)
		for _, h := range held {
			j.add(h.subject, h.data, h.seq, h.at)
		}
	}
	return true
}

// ofInvocation is an envelope about one invocation, joined to its record.
type ofInvocation interface {
	events.Envelope
	ForInvocation() string
}

// joinFunc takes in a message about an invocation that came on a subject
// naming principal ("" for none); false when it does not decode.
type joinFunc func(j *joiner, m message, principal string) bool

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
	events.SubjectResult:          joinAs((*joiner).result),
}

// joinAs is the joinFunc of envelopes of type T: it decodes one, holds it
// while its invocation is not read yet, and has take fill in the record
// and say what the event says for the timeline.
func joinAs[T any, PT interface {
	*T
	ofInvocation
}](take func(*joiner, *Record, PT) Event) joinFunc {
	return func(j *joiner, m message, principal string) bool {
		e, err := events.Decode[T, PT](m.data)
		if err != nil {
			return false
		}
		id := e.ForInvocation()
		r := j.byID[id]
		if r == nil {
			return j.hold(id, m)
		}
		if principal != "" && principal != r.principal {
			// Cancels and results name a principal: a caller's own
			// cancel reaches only its own calls, and it records only
			// its own calls' results.
			return true
		}
		j.note(r, m, take(j, r, e))
		return true
	}
}

// decision records the policy's decision and, for a read that replays
// decisions, keeps it with its input.
func (j *joiner) decision(r *Record, d *events.Decision) Event {
	r.Verdict, r.Reason, r.PolicyRevision, r.Cached = d.Verdict, d.Reason, d.PolicyRevision, d.Cached
	e := entry(d.Header, fmt.Sprintf("policy %s: %s (revision %s)", d.Verdict, d.Reason, d.PolicyRevision))
	if j.judged != nil && len(d.Input) > 0 {
		jc := &judgedCall{d: d}
		r.judged = append(r.judged, jc)
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
	r.Approver, r.Answer = &approver, a.Outcome
	summary := fmt.Sprintf("%s answered %s", a.Sender.ID, a.Outcome)
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

func (*joiner) step(_ *Record, s *events.Step) Event {
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

// result records the terminal result, or counts one that came after it.
func (*joiner) result(r *Record, res *events.Result) Event {
	if res.Late || r.terminal {
		r.LateResults++
		return entry(res.Header, "late result: "+outcomeOf(res))
	}
	r.terminal = true
	r.Outcome, r.Executor = outcomeOf(res), res.Sender.ID
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

// records are the joined records q selects, in invocation order.
func (j *joiner) records() []*Record {
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
	}
	return true
}
