// Package audit reads the audit stream (TOOLBUS_EVENTS, every event under
// tool.>) back as invocations: each joined from its own events, the
// invocation, the policy's decision, the confirmation and the answer acted
// on, the hooks, the steps, the terminal result. It reads straight from
// the stream with an ordered consumer, from a start time to the end the
// stream had when the read began (or an end time), and never writes.
// What it returns is as recorded; Redact makes a record fit to show.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/redact"
)

// Subjects are the subjects an audit read takes in: everything about an
// invocation but its progress output, which only Show reads.
var Subjects = []string{
	events.SubjectInvoke + ".*", events.SubjectDecision, events.SubjectConfirmLegacy, events.SubjectConfirmAll,
	events.SubjectResult, events.CallerResultSubject("*"), events.SubjectStep, events.SubjectHook,
	events.SubjectCancel, events.SubjectCancel + ".*",
}

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

// Query selects invocations. Zero fields select everything.
type Query struct {
	// Since and Until bound the invocations' times (Until exclusive).
	Since, Until time.Time
	// Tool, Caller (an identity's id, agent or user), Approver and
	// Outcome (OK, an error type, or PENDING) select by equality;
	// Verdict is ALLOW, DENY or ASK_USER.
	Tool, Caller, Verdict, Outcome, Approver string
	// ID selects one invocation.
	ID string
}

// Record is one invocation and what happened to it.
type Record struct {
	// principal is the token of the subject the invocation came on: a
	// caller's cancel and its own record of a result count only for its
	// own calls.
	principal string

	ID     string          `json:"id"`
	Time   time.Time       `json:"time"`
	Tool   string          `json:"tool"`
	Caller events.Identity `json:"caller"`
	Args   json.RawMessage `json:"args,omitempty"`
	// Verdict, Reason and PolicyRevision are the policy's decision.
	Verdict        events.Verdict `json:"verdict,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	PolicyRevision string         `json:"policyRevision,omitempty"`
	// Cached is set when the executor reused a decision for an identical
	// input.
	Cached bool `json:"cachedDecision,omitempty"`
	// Approver and Answer are the confirmation answer the executor acted
	// on; Rejected counts the answers it refused.
	Approver *events.Identity `json:"approver,omitempty"`
	Answer   events.Outcome   `json:"answer,omitempty"`
	Rejected int              `json:"rejectedAnswers,omitempty"`
	// Outcome is OK, the result's error type, or PENDING while the stream
	// holds no terminal result.
	Outcome string `json:"outcome"`
	// Executor is who sent the terminal result.
	Executor string `json:"executor,omitempty"`
	// DurationMillis is from the invocation to its terminal result.
	DurationMillis int64  `json:"durationMillis,omitempty"`
	Error          string `json:"error,omitempty"`
	Truncated      bool   `json:"truncated,omitempty"`
	// OutputRef names the whole output in the output store, when the
	// result was cut.
	OutputRef string `json:"outputRef,omitempty"`
	// LateResults counts results sent after the terminal one.
	LateResults int `json:"lateResults,omitempty"`
	// Events is the invocation's timeline, in stream order; Show fills it.
	Events []Event `json:"events,omitempty"`

	terminal bool // the terminal result is in
	// judged are the decisions recorded with their inputs, in stream
	// order, kept by reads that replay them (whatif, explain).
	judged []*judgedCall
}

// judgedCall is one recorded decision about an invocation, with what a
// replay of it gave.
type judgedCall struct {
	d        *events.Decision
	replayed policy.Decision
	err      error
}

// decision is the recorded decision that a replay of r starts from: the
// last one of the executor that sent the terminal result (a decision
// published by anyone else is not the one acted on), or the last one when
// there is no result.
func (r *Record) decision() *judgedCall {
	for i := len(r.judged) - 1; i >= 0; i-- {
		if r.judged[i].d.Sender.ID == r.Executor {
			return r.judged[i]
		}
	}
	if len(r.judged) > 0 && r.Executor == "" {
		return r.judged[len(r.judged)-1]
	}
	return nil
}

// Outcome values besides error types.
const (
	OutcomeOK      = "OK"
	OutcomePending = "PENDING"
)

// Event is one entry of an invocation's timeline.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Subject string    `json:"subject"`
	Type    string    `json:"type"`
	Sender  string    `json:"sender,omitempty"`
	// Summary says what the event says, in one line.
	Summary string `json:"summary"`
	// Data is the event as recorded (Show only).
	Data json.RawMessage `json:"data,omitempty"`
}

// Stats says how much a read went through.
type Stats struct {
	Messages  int           // messages read from the stream
	Malformed int           // of them, those that did not decode
	Elapsed   time.Duration // the read's time
}

// Read reads the invocations q selects, in the order they were made.
func Read(ctx context.Context, js jetstream.JetStream, q Query) ([]*Record, Stats, error) {
	return read(ctx, js, Subjects, newJoiner(q, false))
}

// Show reads the whole story of invocation id: every event about it, its
// progress output's sizes included, with the events as recorded.
func Show(ctx context.Context, js jetstream.JetStream, id string, since time.Time) (*Record, error) {
	j := newJoiner(Query{ID: id, Since: since}, true)
	j.judged = func(*Record, *judgedCall) {} // kept for Explain
	recs, _, err := read(ctx, js, append(slices.Clone(Subjects), events.SubjectProgressPrefix+">"), j)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("no invocation %s in the audit stream", id)
	}
	return recs[0], nil
}

func read(ctx context.Context, js jetstream.JetStream, subjects []string, j *joiner) ([]*Record, Stats, error) {
	q := j.q
	start := time.Now()
	var st Stats
	var stream jetstream.Stream
	err := whileElecting(ctx, func(ctx context.Context) (err error) {
		stream, err = js.Stream(ctx, events.AuditStream)
		return err
	})
	if err != nil {
		return nil, st, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	// The read ends at the last message under subjects as the stream
	// holds it now.
	var (
		last     uint64
		lastTime time.Time
	)
	for _, subj := range subjects {
		var m *jetstream.RawStreamMsg
		err := whileElecting(ctx, func(ctx context.Context) (err error) {
			m, err = stream.GetLastMsgForSubject(ctx, subj)
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, st, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
		}
		last = max(last, m.Sequence)
		if m.Time.After(lastTime) {
			lastTime = m.Time
		}
	}
	if last == 0 || lastTime.Before(q.Since) {
		return nil, st, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: readerIdle}
	if !q.Since.IsZero() {
		// Events of an invocation come after it: starting at its time
		// misses none of them.
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &q.Since
	}
	cons, err := orderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, st, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	var unknown unknownConsumer
	var seen uint64 // the stream sequence of the last message read
	restarts := 0
	for done := false; !done; {
		batch, err := cons.Fetch(fetchBatch, jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			return nil, st, fmt.Errorf("read the audit stream: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			st.Messages++
			seen = meta.Sequence.Stream
			if !j.add(m.Subject(), m.Data(), meta.Sequence.Stream, meta.Timestamp) {
				st.Malformed++
			}
			if meta.Sequence.Stream >= last {
				done = true
				break
			}
		}
		if done {
			break
		}
		if err := batch.Error(); n == 0 && unknown.again(ctx, err) {
			continue
		} else if err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, st, fmt.Errorf("read the audit stream: %w", err)
		}
		if n == 0 {
			// Nothing came within fetchWait before last. Either what
			// was left was removed meanwhile (retention), or the
			// consumer sits on a copy of the stream that lags: a copy
			// still recovering after a node's loss delivers what it
			// has and then nothing (a test saw one count 2,983 of the
			// leader's 3,000). The leader says which; a new consumer,
			// placed afresh, goes on after the last message read.
			more, err := heldAfter(ctx, stream, subjects, seen, last)
			if err != nil {
				return nil, st, fmt.Errorf("read the audit stream: %w", err)
			}
			if !more {
				break
			}
			if restarts++; restarts > maxRestarts {
				return nil, st, fmt.Errorf("read the audit stream: the read stopped at sequence %d, and the stream holds more up to %d; try again", seen, last)
			}
			if seen > 0 {
				cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, seen+1, nil
			}
			if cons, err = orderedConsumer(ctx, stream, cfg); err != nil {
				return nil, st, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
			}
		}
	}
	st.Elapsed = time.Since(start)
	return j.records(), st, nil
}

// orderedConsumer makes a read's consumer; a test stands a lagging copy
// of the stream in for it.
var orderedConsumer = func(ctx context.Context, s jetstream.Stream, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	return s.OrderedConsumer(ctx, cfg)
}

// maxRestarts is how many times a read starts a new consumer when the
// one it has stops short of what the stream's leader holds.
const maxRestarts = 3

// heldAfter asks the stream's leader whether it holds a message under
// subjects after sequence seen, up to last (when seen is 0: whether it
// still holds last).
func heldAfter(ctx context.Context, stream jetstream.Stream, subjects []string, seen, last uint64) (bool, error) {
	for _, subj := range subjects {
		var m *jetstream.RawStreamMsg
		err := whileElecting(ctx, func(ctx context.Context) (err error) {
			if seen == 0 {
				m, err = stream.GetMsg(ctx, last)
			} else {
				m, err = stream.GetMsg(ctx, seen+1, jetstream.WithGetMsgSubject(subj))
			}
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if m.Sequence <= last {
			return true, nil
		}
	}
	return false, nil
}

// unknownConsumer counts the fetches a cluster answered with "no
// responders": a consumer just made on another node is not yet known to
// the node this connection is on (its interest crosses the routes on its
// own time), or it moved with the stream's leader. The fetch is made
// again, a few times, a little later each time.
type unknownConsumer struct{ tries int }

func (u *unknownConsumer) again(ctx context.Context, err error) bool {
	if !errors.Is(err, nats.ErrNoResponders) || u.tries >= 20 {
		return false
	}
	u.tries++
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(u.tries) * 50 * time.Millisecond):
		return true
	}
}

// readerIdle is how long the server keeps a reader's consumer once it
// stops fetching. A read never says it is done, and nats-server keeps at
// most 1,000 consumers a stream by default: with its default of five
// minutes, a few audit reads a second would reach that limit.
const readerIdle = 30 * time.Second

// A read fetches up to fetchBatch messages at a time, waiting at most
// fetchWait for them.
const (
	fetchBatch = 2000
	fetchWait  = 5 * time.Second
)

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

// Redact is r fit to show: its arguments, reason, error, and timeline
// (summaries and recorded events) through red. r is left as it is.
func Redact(r *Record, red *redact.Redactor) *Record {
	c := *r
	c.Args = red.JSON(r.Args)
	c.Reason = red.Text(r.Reason)
	c.Error = red.Text(r.Error)
	c.Events = make([]Event, len(r.Events))
	for i, e := range r.Events {
		e.Summary = red.Text(e.Summary)
		if e.Data != nil {
			e.Data = red.JSON(e.Data)
		}
		c.Events[i] = e
	}
	if len(r.Events) == 0 {
		c.Events = nil
	}
	return &c
}

// Tail follows the stream from now on and calls f with each invocation q
// selects once its terminal result is in (or it has waited a minute for
// one, as PENDING), until ctx ends.
func Tail(ctx context.Context, js jetstream.JetStream, q Query, f func(*Record)) error {
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: Subjects, DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: readerIdle})
	if err != nil {
		return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	j := newJoiner(q, false)
	flush := func(now time.Time) {
		kept := j.order[:0]
		for _, r := range j.order {
			switch {
			case r.terminal || now.Sub(r.Time) > tailWait:
				if q.matches(r) {
					f(r)
				}
				delete(j.byID, r.ID)
			default:
				kept = append(kept, r)
			}
		}
		j.order = kept
	}
	var unknown unknownConsumer
	for ctx.Err() == nil {
		batch, err := cons.Fetch(fetchBatch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read the audit stream: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if meta, err := m.Metadata(); err == nil {
				j.add(m.Subject(), m.Data(), meta.Sequence.Stream, meta.Timestamp)
			}
		}
		if err := batch.Error(); n == 0 && unknown.again(ctx, err) {
			continue
		} else if err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			return fmt.Errorf("read the audit stream: %w", err)
		}
		flush(time.Now())
	}
	return nil
}

// tailWait is how long Tail waits for an invocation's result before it
// shows it as PENDING.
const tailWait = time.Minute

// electionWait bounds how long a read waits for a stream that does not
// answer: in a cluster that lost or restarted a node, the stream may be
// electing a leader for some seconds.
const electionWait = 30 * time.Second

// whileElecting runs f, again while it times out or finds no one to
// answer, for up to electionWait or until ctx ends. Each try gets a few
// seconds of its own.
func whileElecting(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(electionWait)
	for {
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(try)
		cancel()
		var api *jetstream.APIError
		unavailable := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
			errors.As(err, &api) && api.Code == 503
		if err == nil || !unavailable || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
