package audit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/redact"
)

// An export that follows the trail (`toolbus audit export --follow`)
// writes it one event a line, not one joined invocation a line: an event
// is written once it is stored, never again, where an invocation's record
// changes until its result is in. Each line carries the event's sequence
// in the audit stream, which is the export's cursor: an export that goes
// on after a stop starts after the last sequence it wrote.

// Line is one event of the trail as an export writes it: one message of
// the audit stream, its secrets hidden. Seq comes first in its JSON, so
// that every line an export writes starts with linePrefix.
type Line struct {
	// Seq is the event's sequence in the audit stream. Lines come in its
	// order, and a reader that may be given a line twice (the last batch
	// again after a crash: Checkpointed) drops the repeat by it.
	Seq uint64 `json:"seq"`
	// Time is when the stream stored the event.
	Time    time.Time `json:"time"`
	Subject string    `json:"subject"`
	// Kind is the subject the audit joins the event as (tool.invoke for
	// tool.invoke.<principal>), and Principal the principal its subject
	// names: who the bus says sent it. Empty when the subject names none.
	Kind      string `json:"kind"`
	Principal string `json:"principal,omitempty"`
	// Invocation is the id of the invocation the event is about (its
	// caller's key), and Call the id the executor that accepted the call
	// minted for it. Empty when the event names none.
	Invocation string `json:"invocation,omitempty"`
	Call       string `json:"call,omitempty"`
	// Trace is the W3C traceparent of the call's execute_tool span, when
	// its executor traced it (events.Header.Trace): the event's trace.
	Trace string `json:"trace,omitempty"`
	// Incomplete names the event's large fields the trail does not hold,
	// or holds altered (events.Inline): Event holds a note in the place
	// of each.
	Incomplete string `json:"incomplete,omitempty"`
	// Event is the event as recorded, its large fields read back from
	// events.BlobStream and put in place (a log pipeline cannot read the
	// bus), its secrets hidden (redact.Redactor.JSON).
	Event json.RawMessage `json:"event"`
}

// linePrefix is how every line an export writes starts.
var linePrefix = []byte(`{"seq":`)

// FollowConfig says where Follow starts and what it does when the stream
// no longer holds events it has not exported.
type FollowConfig struct {
	// After is the sequence of the last event exported before, read back
	// from the export's output or checkpoint: Follow goes on after it.
	// 0: a first start.
	After uint64
	// Since is where a first start begins: at the first event stored at
	// or after it. Zero: at the events stored after Follow starts.
	Since time.Time
	// AcceptGaps lets Follow go on past events the stream let go of
	// before they were exported, from the first it still holds, noting
	// each gap in the log; without it, Follow stops with ErrGap.
	AcceptGaps bool
	// Redactor hides the secrets of each event; redact.Default when nil.
	Redactor *redact.Redactor
	// Logger takes what the export notes on the way: where it starts, a
	// stream that does not answer, a gap accepted. Nil: nothing.
	Logger *slog.Logger
}

// Sink takes an export's events, a batch at a time, in stream order.
// Once Write returns nil the batch is the sink's: Follow never gives it
// again, so a sink that keeps the export's cursor moves it past the
// batch before it returns. Write's context is not ended by a stop, so
// that a stop never cuts a batch in two; a sink that waits on anything
// bounds the wait itself.
type Sink interface {
	Write(ctx context.Context, batch []Line) error
}

// ErrGap is Follow's error when the stream no longer holds events after
// the export's cursor that the export did not write: they aged out of
// the trail (--audit-max-age) while the export was stopped or behind.
var ErrGap = errors.New("the audit stream no longer holds events the export has not written")

// Batch bounds: a batch is what one read gives, cut at this many lines
// or bytes of events, so that a sink syncs (and a checkpoint moves) at
// least that often while an export catches up.
const (
	batchLines = 1000
	batchBytes = 4 << 20
)

// Follow exports the audit stream's events under Subjects (what Tail and
// the joined reads take in) to sink, from where cfg says, until ctx ends;
// it returns nil then, once the batch in hand is written. It reads by
// direct get (bus.Read) what the stream holds past the last event it
// read, again every tailPoll once it has read all there was, and waits
// out a stream that does not answer (a cluster electing its leader, a
// node lost) for as long as it takes, noting it in the log.
//
// Every event is given to sink once and in order, and none is skipped:
// when the stream no longer holds events after the cursor, which its age
// limit removed before they were read, Follow stops with ErrGap, or with
// cfg.AcceptGaps notes the gap and goes on.
func Follow(ctx context.Context, js jetstream.JetStream, cfg FollowConfig, sink Sink) error {
	var stream jetstream.Stream
	err := whileElecting(ctx, func(ctx context.Context) (err error) {
		stream, err = js.Stream(ctx, events.AuditStream)
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	f := &follower{js: js, stream: stream, cfg: cfg, sink: sink, blobs: bus.NewBlobs(js), log: cfg.Logger}
	if f.cfg.Redactor == nil {
		f.cfg.Redactor = redact.Default
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	last := stream.CachedInfo().State.LastSeq
	switch {
	case cfg.After > last:
		// Sequences only grow, and the stream cannot be purged: a cursor
		// past its end is another stream's, or one made anew.
		return fmt.Errorf("the export's last event is #%d, past the audit stream's last, #%d: the export is of another stream, or the stream was made anew", cfg.After, last)
	case cfg.After > 0:
		f.next = cfg.After + 1
		f.log.Info("exporting the audit trail", "after", cfg.After)
	case cfg.Since.IsZero():
		f.next = last + 1
		f.log.Info("exporting the audit trail from now on", "after", last)
	default:
		f.log.Info("exporting the audit trail", "since", cfg.Since)
	}
	f.unverified = f.next
	for ctx.Err() == nil {
		more, err := f.poll(ctx)
		var werr sinkError
		switch {
		case errors.As(err, &werr):
			return werr.error
		case errors.Is(err, ErrGap):
			return err
		case ctx.Err() != nil:
			return nil
		case err != nil && unavailable(err):
			f.unanswered(err)
		case err != nil:
			return err
		default:
			f.answered()
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(tailPoll):
		}
	}
	return nil
}

// follower is one Follow's state.
type follower struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    FollowConfig
	sink   Sink
	blobs  *bus.Blobs
	log    *slog.Logger
	// next is the sequence the next read starts at; 0 while a first
	// start at cfg.Since has read nothing yet.
	next uint64
	// unverified is the first sequence not yet known to have been read
	// whole: where the last poll's read began. The stream lets its
	// oldest go (by age, from its start, never anything else: it denies
	// deletes and purges), so a first sequence at or below it at the
	// next poll means that read saw all it asked for; one past it, that
	// the stream let go of messages the export may not have read.
	unverified uint64
	// down is set while the stream does not answer.
	down bool
}

// sinkError is a sink's failure to write a batch, which ends Follow
// whatever else happens.
type sinkError struct{ error }

func (e sinkError) Unwrap() error { return e.error }

// poll reads what the stream holds past the export's cursor and hands it
// to the sink. more says there may be more to read at once.
func (f *follower) poll(ctx context.Context) (more bool, err error) {
	var info *jetstream.StreamInfo
	err = whileElecting(ctx, func(ctx context.Context) (err error) {
		info, err = f.stream.Info(ctx)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if f.next > 0 {
		if f.unverified == 0 {
			// A first start at cfg.Since has read: what it read from
			// Since on before the export began is not the export's
			// to miss, and it is checked from here on.
			f.unverified = f.next
		}
		if first > f.unverified {
			gap := fmt.Errorf("%w: #%d..#%d are gone (its age limit, --audit-max-age, removed them before the export read them), and any event among them is missing from the export",
				ErrGap, f.unverified, first-1)
			if !f.cfg.AcceptGaps {
				return false, gap
			}
			f.log.Warn("going on past a gap", "gap", gap.Error(), "from", first)
			f.next = max(f.next, first)
		}
		f.unverified = f.next
	}
	if last == 0 || f.next > last {
		return false, nil
	}
	read, err := f.read(ctx, last)
	if read > 0 {
		f.next = read + 1
		return err == nil, err
	}
	if err != nil || f.next == 0 {
		return false, err
	}
	// Nothing under Subjects from next to last. A copy of the stream
	// that lags may have answered the read (bus.Read): the stream's
	// leader says whether it holds more, else the read moves past last,
	// past the messages of other subjects it holds (a call's output,
	// checkpoints).
	held, err := heldFrom(ctx, f.js, f.next, last)
	if err == nil && !held {
		f.next = last + 1
		f.log.Debug("read past messages an export does not write", "through", last)
	}
	return false, err
}

// read reads the stream from the cursor up to sequence to, hands what it
// reads to the sink in batches, and returns the sequence of the last
// message it read (0: none).
func (f *follower) read(ctx context.Context, to uint64) (uint64, error) {
	r := bus.Range{From: f.next, To: to, Subjects: Subjects}
	if f.next == 0 {
		r.Since = f.cfg.Since
	}
	var (
		batch []Line
		size  int
	)
	write := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := f.sink.Write(context.WithoutCancel(ctx), batch); err != nil {
			return sinkError{err}
		}
		batch, size = nil, 0
		return nil
	}
	last, err := readRange(ctx, f.js, events.AuditStream, r, func(m *bus.StoredMsg) error {
		l, err := f.line(ctx, m)
		if err != nil {
			return err // m is read again at the next poll
		}
		batch = append(batch, l)
		if size += len(l.Event); len(batch) >= batchLines || size >= batchBytes {
			return write()
		}
		return nil
	})
	if errors.As(err, new(sinkError)) {
		return 0, err
	}
	// What was read before a failure, or a stop, is whole: it is written.
	if werr := write(); werr != nil {
		return 0, werr
	}
	return last, err
}

// line is m as an export writes it, its large fields read back. A field
// that cannot be read for now (the blob stream does not answer, the
// export stops) is an error, for m to be read again later: the note an
// audit read puts in place of a field the trail lost would stand in the
// export for good.
func (f *follower) line(ctx context.Context, m *bus.StoredMsg) (Line, error) {
	kind, principal := kindOf(m.Subject)
	l := Line{Seq: m.Sequence, Time: m.Time, Subject: m.Subject, Kind: kind, Principal: principal}
	data := m.Data
	if bytes.HasPrefix(data, events.OutlinedPrefix) {
		var transient error
		inlined, err := events.Inline(data, func(ref events.BlobRef) ([]byte, error) {
			b, err := f.blobs.Fetch(ctx, ref)
			if err != nil && (unavailable(err) || ctx.Err() != nil) {
				transient = err
			}
			return b, err
		})
		if transient != nil {
			return Line{}, fmt.Errorf("read a large field of #%d: %w", m.Sequence, transient)
		}
		if err != nil {
			l.Incomplete = err.Error()
		}
		if inlined != nil {
			data = inlined
		}
	}
	l.Invocation, l.Call, l.Trace = about(kind, data, m.Header.Get(events.CallHeader))
	l.Event = f.cfg.Redactor.JSON(data)
	return l, nil
}

// about is the invocation and the call an event of kind is about: its
// caller's key (an invocation's own id, any other event's invocationId)
// and the id the executor minted (an invocation record's
// events.CallHeader, else its header's call). Empty when the event names
// none, or does not decode.
func about(kind string, data []byte, callHeader string) (invocation, call, trace string) {
	var h struct {
		ID           string `json:"id"`
		InvocationID string `json:"invocationId"`
		Call         string `json:"call"`
		Trace        string `json:"trace"`
	}
	if json.Unmarshal(data, &h) != nil {
		return "", callHeader, ""
	}
	invocation = h.InvocationID
	if kind == events.SubjectInvoke {
		invocation = h.ID
	}
	return invocation, cmp.Or(callHeader, h.Call), h.Trace
}

// heldFrom asks the stream's leader whether it holds a message under
// Subjects from sequence from up to to.
func heldFrom(ctx context.Context, js jetstream.JetStream, from, to uint64) (bool, error) {
	for _, subj := range Subjects {
		var m *bus.StoredMsg
		err := whileElecting(ctx, func(ctx context.Context) (err error) {
			m, err = bus.NextMsg(ctx, js, events.AuditStream, from, subj)
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if m.Sequence <= to {
			return true, nil
		}
	}
	return false, nil
}

// unanswered notes, once, that the stream does not answer.
func (f *follower) unanswered(err error) {
	if !f.down {
		f.log.Warn("the audit stream does not answer; waiting for it", "error", err)
	}
	f.down = true
}

// answered notes that the stream answers again.
func (f *follower) answered() {
	if f.down {
		f.log.Info("the audit stream answers again")
	}
	f.down = false
}
