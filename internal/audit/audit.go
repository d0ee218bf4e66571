// Package audit reads the audit stream (TOOLBUS_EVENTS, every event under
// tool.>) back as invocations: each joined from its own events, the
// invocation, the policy's decision, the confirmation and the answer acted
// on, the hooks, the steps, the terminal result. It reads straight from
// the stream by direct get (bus.Read), from a start time to the end the
// stream had when the read began (or an end time), and never writes: no
// consumer, whose deliver subject would be the reader's to choose in the
// account that holds the stream (an auditor lives in one of its own:
// internal/auth).
// What it returns is as recorded; Redact makes a record fit to show.
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/redact"
)

// Subjects are the subjects an audit read takes in: everything about an
// invocation but its progress output, which only Show reads.
var Subjects = []string{
	events.SubjectInvoke + ".*", events.SubjectInvoke + "." + events.ClientWildcard, events.SubjectDecision, events.SubjectConfirmLegacy, events.SubjectConfirmAll,
	events.SubjectResult, events.CallerResultSubject("*"), events.CallerResultSubject(events.ClientWildcard), events.SubjectStep, events.SubjectHook,
	events.SubjectCancel, events.SubjectCancel + ".*", events.SubjectCancel + "." + events.ClientWildcard,
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
	// Trace selects the invocations of one trace, by its id (32
	// hexadecimal digits): from a trace to its trail entries.
	Trace string
}

// Record is one invocation and what happened to it.
type Record struct {
	// Principal is the token of the subject the invocation came on: who
	// the bus says sent it ("_" when nobody vouches). Invocation ids are
	// unique per principal, so a record is its principal and its id.
	Principal string `json:"principal,omitempty"`

	ID string `json:"id"`
	// Call is the id the executor that accepted the call minted for it
	// (events.Header.Call): it names this call and no other, where ID is
	// its caller's key, which the caller may use again. Empty on calls
	// recorded before executors minted one.
	Call   string          `json:"call,omitempty"`
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
	// ApproverPerson is who the approver says answered (a console
	// shared by several people names them): its claim, not the bus's.
	ApproverPerson string         `json:"approverPerson,omitempty"`
	Answer         events.Outcome `json:"answer,omitempty"`
	Rejected       int            `json:"rejectedAnswers,omitempty"`
	// Outcome is OK or the error type of the executor's result, the one
	// terminal result a call has; NO_EXECUTOR_RESULT when the stream
	// holds none but the caller's own record (CallerRecord); PENDING
	// while it holds neither.
	Outcome string `json:"outcome"`
	// Executor is who sent the terminal result: an executor, always.
	Executor string `json:"executor,omitempty"`
	// Trace is the W3C traceparent of the call's execute_tool span, when
	// its executor traced it (events.Header.Trace): the trace id names
	// the call's trace in the organization's trace store.
	Trace string `json:"trace,omitempty"`
	// AfterGiveUp says the executor sent its result after the caller had
	// given the call up (the result was marked late).
	AfterGiveUp bool `json:"afterGiveUp,omitempty"`
	// CallerRecord is what the caller itself recorded of the call: that
	// it gave up (EXECUTOR_LOST, TIMEOUT, CANCELLED). It is the caller's
	// word, shown as such, never the call's outcome.
	CallerRecord *CallerRecord `json:"callerRecord,omitempty"`
	// ForeignRecords counts records of a result for this id sent by
	// another principal than the caller: forged, and not joined.
	ForeignRecords int `json:"foreignRecords,omitempty"`
	// ReusedID says the invocation came under a principal and id an
	// earlier, different invocation had: the executor refuses it
	// (INVOCATION_ID_REUSED). Copies counts the byte-identical copies of
	// this invocation the stream holds besides it (a record sent again,
	// a client's retry), which are not calls of their own.
	ReusedID bool `json:"reusedId,omitempty"`
	Copies   int  `json:"copies,omitempty"`
	// DurationMillis is from the invocation to its terminal result.
	DurationMillis int64  `json:"durationMillis,omitempty"`
	Error          string `json:"error,omitempty"`
	Truncated      bool   `json:"truncated,omitempty"`
	// OutputRef names the whole output in the output store, when the
	// result was cut.
	OutputRef string `json:"outputRef,omitempty"`
	// LateResults counts executors' results sent after the terminal
	// one.
	LateResults int `json:"lateResults,omitempty"`
	// Attempts are the call's attempts, when it was tried more than
	// once under its id (events.Invocation.Attempt): the caller's retry
	// of a call lost with its executor, or one an attacker sent, which
	// the executor refused. A call tried once has none. Attempt is the
	// attempt whose result is the terminal one, when it is not the
	// first.
	Attempts []Attempt `json:"attempts,omitempty"`
	Attempt  int       `json:"attempt,omitempty"`
	// Events is the invocation's timeline, in stream order; Show fills it.
	Events []Event `json:"events,omitempty"`
	// Incomplete names the records of the call whose large fields
	// (events.Outline) the trail does not hold, or holds altered: each
	// is read with a note in its place, and the call is never replayed.
	Incomplete []string `json:"incomplete,omitempty"`

	terminal bool     // the terminal result is in
	seq      uint64   // the invocation's stream sequence
	digest   [32]byte // the invocation's SHA-256, which its copies share
	refused  int      // copies refused as such (INVOCATION_ID_REUSED)
	// judged are the decisions recorded with their inputs, in stream
	// order, kept by reads that replay them (whatif, explain).
	judged []*judgedCall
}

// Attempt is one attempt of a call retried under its id.
type Attempt struct {
	Attempt int       `json:"attempt"`
	Time    time.Time `json:"time"`
	// Outcome is OK or the error type of the attempt's result, PENDING
	// while the stream holds none (an executor lost with it).
	Outcome  string `json:"outcome"`
	Executor string `json:"executor,omitempty"`
	Error    string `json:"error,omitempty"`
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
	// OutcomeNoExecutorResult is the outcome of a call no executor sent a
	// result for, whose caller recorded that it gave up.
	OutcomeNoExecutorResult = "NO_EXECUTOR_RESULT"
)

// CallerRecord is a result a caller recorded of its own call, on its own
// subject (events.CallerResultSubject): what it told its agent when it
// stopped waiting. The bus vouches only that the caller sent it.
type CallerRecord struct {
	Sender  string    `json:"sender"`
	Time    time.Time `json:"time"`
	Outcome string    `json:"outcome"`
	Error   string    `json:"error,omitempty"`
	// BeforeCall says it was recorded before the invocation was: no
	// give-up, a caller's record made up ahead of its call.
	BeforeCall bool `json:"beforeCall,omitempty"`
}

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
	Outlined  int           // of them, those whose large fields were read from events.BlobStream
	Missing   int           // of those, the ones with a large field the trail lost or holds altered
	Elapsed   time.Duration // the read's time
}

// errIncomplete is the replay's error for a call the trail holds only in
// part (Record.Incomplete).
var errIncomplete = errors.New("the trail does not hold this call's records whole")

// blobs puts the records' large fields back (events.Inline) as a read
// takes them in.
type blobs struct {
	ctx context.Context
	r   *bus.Blobs
}

func newBlobs(ctx context.Context, js jetstream.JetStream) *blobs {
	return &blobs{ctx: ctx, r: bus.NewBlobs(js)}
}

func (b *blobs) fetch(ref events.BlobRef) ([]byte, error) { return b.r.Fetch(b.ctx, ref) }

// inline is m's message as the join takes it in, its large fields read
// back (events.Inline), counted in st.
func (b *blobs) inline(m *bus.StoredMsg, st *Stats) message {
	msg := message{subject: m.Subject, data: m.Data, seq: m.Sequence, at: m.Time, call: m.Header.Get(events.CallHeader)}
	if !bytes.HasPrefix(m.Data, events.OutlinedPrefix) {
		return msg
	}
	st.Outlined++
	data, err := events.Inline(m.Data, b.fetch)
	if err != nil {
		st.Missing++
		msg.incomplete = err.Error()
	}
	if data != nil {
		msg.data = data
	}
	return msg
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

// read joins with j the messages under subjects, from the time j's query
// starts at to the last message the stream holds when the read begins.
func read(ctx context.Context, js jetstream.JetStream, subjects []string, j *joiner) ([]*Record, Stats, error) {
	q := j.q
	start := time.Now()
	var st Stats
	err := whileElecting(ctx, func(ctx context.Context) error {
		_, err := js.Stream(ctx, events.AuditStream)
		return err
	})
	if err != nil {
		return nil, st, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	// The read ends at the last message under subjects as the stream's
	// leader holds it now.
	last, lastTime, err := lastUnder(ctx, js, subjects)
	if err != nil {
		return nil, st, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	if last == 0 || lastTime.Before(q.Since) {
		return nil, st, nil
	}
	// Events of an invocation come after it: starting at its time misses
	// none of them.
	r := bus.Range{Since: q.Since, To: last, Subjects: subjects}
	var seen uint64 // the stream sequence of the last message read
	bl := newBlobs(ctx, js)
	for restarts := 0; ; restarts++ {
		_, err := readRange(ctx, js, events.AuditStream, r, func(m *bus.StoredMsg) error {
			st.Messages++
			seen = m.Sequence
			if !j.addMessage(bl.inline(m, &st)) {
				st.Malformed++
			}
			return nil
		})
		if seen >= last {
			break
		}
		if err != nil && !unavailable(err) {
			return nil, st, fmt.Errorf("read the audit stream: %w", err)
		}
		if err == nil {
			// The read ended before last. Either what was left was
			// removed meanwhile (retention), or the copy of the stream
			// that answered lags: a copy still catching up after a
			// node's loss holds the stream up to some sequence. The
			// leader says which.
			more, err := heldAfter(ctx, js, subjects, seen, last)
			if err != nil {
				return nil, st, fmt.Errorf("read the audit stream: %w", err)
			}
			if !more {
				break
			}
		}
		if restarts == maxRestarts {
			return nil, st, fmt.Errorf("read the audit stream: the read stopped at sequence %d, and the stream holds more up to %d; try again", seen, last)
		}
		// The read goes on after the last message read, a moment later.
		select {
		case <-ctx.Done():
			return nil, st, ctx.Err()
		case <-time.After(time.Duration(restarts+1) * 200 * time.Millisecond):
		}
		if seen > 0 {
			r.From, r.Since = seen+1, time.Time{}
		}
	}
	st.Elapsed = time.Since(start)
	return j.records(), st, nil
}

// readRange reads a range of a stream (bus.Read); a test stands a
// lagging copy of the stream in for it.
var readRange = bus.Read

// lastUnder is the stream sequence and the time of the last message the
// stream's leader holds under subjects; 0 when it holds none.
func lastUnder(ctx context.Context, js jetstream.JetStream, subjects []string) (last uint64, at time.Time, err error) {
	for _, subj := range subjects {
		var m *bus.StoredMsg
		err := whileElecting(ctx, func(ctx context.Context) (err error) {
			m, err = bus.LastMsg(ctx, js, events.AuditStream, subj)
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, time.Time{}, err
		}
		last = max(last, m.Sequence)
		if m.Time.After(at) {
			at = m.Time
		}
	}
	return last, at, nil
}

// maxRestarts is how many times a read goes on after one that stopped
// short of what the stream's leader holds.
const maxRestarts = 3

// heldAfter asks the stream's leader whether it holds a message under
// subjects after sequence seen, up to last (when seen is 0: whether it
// still holds last).
func heldAfter(ctx context.Context, js jetstream.JetStream, subjects []string, seen, last uint64) (bool, error) {
	for _, subj := range subjects {
		var m *bus.StoredMsg
		err := whileElecting(ctx, func(ctx context.Context) (err error) {
			if seen == 0 {
				m, err = bus.NextMsg(ctx, js, events.AuditStream, last, "")
			} else {
				m, err = bus.NextMsg(ctx, js, events.AuditStream, seen+1, subj)
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

// TraceID is the trace id of a W3C traceparent ("00-<trace>-<span>-<flags>"),
// "" when traceparent is not one.
func TraceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || strings.Trim(parts[1], "0123456789abcdef") != "" {
		return ""
	}
	return parts[1]
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
// one, as PENDING), until ctx ends. It reads what came since its last
// read every tailPoll.
func Tail(ctx context.Context, js jetstream.JetStream, q Query, f func(*Record)) error {
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	next := stream.CachedInfo().State.LastSeq + 1 // from now on
	j := newJoiner(q, false)
	bl := newBlobs(ctx, js)
	var st Stats
	flush := func(now time.Time) {
		kept := j.order[:0]
		for _, r := range j.order {
			switch {
			case r.terminal || now.Sub(r.Time) > tailWait:
				if q.matches(r) {
					f(r)
				}
				j.forget(r)
			default:
				kept = append(kept, r)
			}
		}
		j.order = kept
	}
	for ctx.Err() == nil {
		last, err := bus.Read(ctx, js, events.AuditStream, bus.Range{From: next, Subjects: Subjects}, func(m *bus.StoredMsg) error {
			j.addMessage(bl.inline(m, &st))
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !unavailable(err) {
			return fmt.Errorf("read the audit stream: %w", err)
		}
		flush(time.Now())
		if last > 0 {
			next = last + 1
			continue // there may be more since
		}
		select {
		case <-ctx.Done():
		case <-time.After(tailPoll):
		}
	}
	return nil
}

// tailPoll is how long Tail waits when it has read all there was.
const tailPoll = 500 * time.Millisecond

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
		if err == nil || !unavailable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unavailable says err is a stream that does not answer for now: it
// times out, finds no one to answer, or says it has no leader.
func unavailable(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, bus.ErrNoStream) || errors.As(err, &api) && api.Code == 503
}
