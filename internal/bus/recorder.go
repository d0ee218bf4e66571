package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// Recorder writes records and events to the audit stream and makes sure
// each is stored. A plain publish is lost when the stream has no leader
// for a moment (a node of the cluster went away) or the connection drops
// with it in flight; the recorder asks for the stream's acknowledgement
// instead, and sends again what it did not get one for in time, under
// the same message id, so the stream keeps one copy (within its
// duplicate window).
//
// Record does not wait for the acknowledgement: the invoke path pays for
// sending, a map entry and reading a short ack. No timer per record: one
// sweep, a few times a second, sends again what is overdue. Record waits
// only when its window, RecordMaxPending records by default, are
// unacknowledged (the stream is gone for a while), so a part that cannot
// record stops taking work instead of piling it up in memory; Window
// tells how full it is, for that part to leave its queue groups and say
// it is not ready before that.
type Recorder struct {
	nc     *nats.Conn
	log    *slog.Logger
	full   func() // told when the stream refuses a record for want of room
	window int    // records that may wait for their acknowledgement
	nonce  string
	prefix string // of the acks' subjects: prefix + the record's number
	sub    *nats.Subscription
	lost   atomic.Uint64
	resent atomic.Uint64

	mu      sync.Mutex
	room    *sync.Cond // signalled when pending shrinks or closing
	seq     uint64
	pending map[uint64]*record
	closing bool
	done    chan struct{}
	stop    chan struct{}
	once    sync.Once
}

// record is one record waiting for its acknowledgement.
type record struct {
	msg *nats.Msg
	due time.Time // when it is sent again without one
	// done, made only for a record whose Receipt is kept, is closed
	// once the stream stored it (err nil) or refused it (err says why).
	done chan struct{}
	err  error
}

// ErrTrailFull is the audit stream's refusal of a record for want of
// room: it is at its size cap and evicts nothing (ensureAudit), or its
// server has no storage left.
var ErrTrailFull = errors.New("the audit stream is full")

// Receipt is the audit stream's answer to one record, to wait for where
// what follows the record must not happen unless it is stored: a call
// runs only once its invocation is in the trail, with the large fields
// it names by digest (blobs).
type Receipt struct {
	rec   *record
	blobs []*record
}

// Wait returns nil once the stream stored the record and its blobs, an
// error wrapping ErrTrailFull (or another refusal) once one was refused,
// or ctx's error. The zero Receipt (nothing recorded) returns nil at
// once.
func (rc Receipt) Wait(ctx context.Context) error {
	for _, b := range rc.blobs {
		select {
		case <-b.done:
			if b.err != nil {
				return fmt.Errorf("a large field of the record (%s): %w", b.msg.Subject, b.err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if rc.rec == nil {
		return nil
	}
	select {
	case <-rc.rec.done:
		return rc.rec.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Settled reports whether the stream answered already: Wait would not
// block.
func (rc Receipt) Settled() bool {
	for _, b := range rc.blobs {
		select {
		case <-b.done:
		default:
			return false
		}
	}
	if rc.rec == nil {
		return true
	}
	select {
	case <-rc.rec.done:
		return true
	default:
		return false
	}
}

// Refused is a Receipt whose record was refused already, with err: for
// a record that could not be sent at all.
func Refused(err error) Receipt {
	rec := &record{done: make(chan struct{}), err: err}
	close(rec.done)
	return Receipt{rec: rec}
}

// RecorderOption is an optional setting of NewRecorder.
type RecorderOption func(*Recorder)

// WindowOf sets how many records may wait for their acknowledgement at
// once (RecordMaxPending by default): one more waits for room.
func WindowOf(n int) RecorderOption {
	return func(r *Recorder) {
		if n > 0 {
			r.window = n
		}
	}
}

// WhenFull has f called, on the recorder's own goroutine, each time the
// stream refuses a record for want of room (ErrTrailFull): the moment
// to stop taking work that would be recorded. f must not block.
func WhenFull(f func()) RecorderOption { return func(r *Recorder) { r.full = f } }

// Recorder settings. The ack wait is long enough for a stream that is
// storing a burst, short enough that a lost record goes again soon after
// a new stream leader is elected (seconds).
const (
	recordAckWait    = 3 * time.Second
	recordRetryWait  = 250 * time.Millisecond
	recordSweep      = 100 * time.Millisecond
	RecordMaxPending = 16384
)

// NewRecorder returns a recorder sending on nc. Close stops it.
func NewRecorder(nc *nats.Conn, log *slog.Logger, opts ...RecorderOption) (*Recorder, error) {
	r := &Recorder{nc: nc, log: log, nonce: events.NewCapability(), pending: make(map[uint64]*record),
		done: make(chan struct{}), stop: make(chan struct{}), full: func() {}, window: RecordMaxPending}
	for _, o := range opts {
		o(r)
	}
	r.room = sync.NewCond(&r.mu)
	r.prefix = nc.NewRespInbox() + "."
	sub, err := nc.Subscribe(r.prefix+"*", r.acked)
	if err != nil {
		return nil, fmt.Errorf("recorder: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1) // acks are small and handled at once
	r.sub = sub
	go r.sweep()
	return r, nil
}

// Record sends data on subject to the audit stream, and again until the
// stream has it. It fails only when the message cannot be sent at all
// (too large for the bus, the recorder closed).
func (r *Recorder) Record(subject string, data []byte) error {
	_, err := r.record(subject, data, "", false, false)
	return err
}

// RecordEncoded is Record of data this process encoded itself
// (events.Encode): valid JSON by construction, which is not checked
// again before a large record's fields are split (events.OutlineEncoded).
func (r *Recorder) RecordEncoded(subject string, data []byte) error {
	_, err := r.record(subject, data, "", false, true)
	return err
}

// RecordReceipt is Record, and returns the Receipt to wait on for the
// stream's answer.
func (r *Recorder) RecordReceipt(subject string, data []byte) (Receipt, error) {
	return r.record(subject, data, "", true, false)
}

// record sends data on subject, its large fields first, each to
// events.BlobStream (events.Outline): one record stays small whatever a
// caller sends. The confirmation requests are the exception: approvers
// read them live and from their copy of the stream, and the executor
// bounds them for that (ConfirmRequest.Shorten). A call, when not empty,
// goes on the record as its events.CallHeader.
func (r *Recorder) record(subject string, data []byte, call string, receipt, encoded bool) (Receipt, error) {
	var blobs []events.Blob
	switch {
	case subject == events.SubjectConfirmLegacy || strings.HasPrefix(subject, events.SubjectConfirmLegacy+"."):
	case encoded:
		data, blobs = events.OutlineEncoded(data, events.MaxInlineRecord)
	default:
		data, blobs = events.Outline(data, events.MaxInlineRecord)
	}
	var parts []*record
	for _, b := range blobs {
		rc, err := r.send(b.Ref.Subject(), b.Data, "", receipt)
		if err != nil {
			return Receipt{}, fmt.Errorf("record on %s: a large field: %w", subject, err)
		}
		if receipt {
			parts = append(parts, rc.rec)
		}
	}
	rc, err := r.send(subject, data, call, receipt)
	rc.blobs = parts
	return rc, err
}

// send publishes one message and keeps it until the stream that takes it
// acknowledges it.
func (r *Recorder) send(subject string, data []byte, call string, receipt bool) (Receipt, error) {
	r.mu.Lock()
	for len(r.pending) >= r.window && !r.closing {
		r.log.Warn("the audit stream is not acknowledging records: waiting", "pending", len(r.pending))
		r.room.Wait()
	}
	if r.closing {
		r.mu.Unlock()
		r.lost.Add(1)
		return Receipt{}, fmt.Errorf("record on %s: the recorder is closed", subject)
	}
	r.seq++
	n := r.seq
	token := strconv.FormatUint(n, 36)
	// The id is this recorder's and the record's number: the same for
	// every copy of one record, never the same for two.
	m := &nats.Msg{Subject: subject, Reply: r.prefix + token, Data: data,
		Header: nats.Header{jetstream.MsgIDHeader: []string{r.nonce + "." + token}}}
	if call != "" {
		m.Header[events.CallHeader] = []string{call}
	}
	rec := &record{msg: m, due: time.Now().Add(recordAckWait)}
	if receipt {
		rec.done = make(chan struct{})
	}
	r.pending[n] = rec
	r.mu.Unlock()
	if err := r.nc.PublishMsg(m); err != nil {
		r.forget(n)
		return Receipt{}, fmt.Errorf("record on %s: %w", subject, err)
	}
	return Receipt{rec: rec}, nil
}

// RecordRequest records request m, which came on events.Request(s), on
// s: what was asked, exactly as it was sent. The requester's principal
// stays in the subject, so the record keeps who sent it; call, when not
// empty, is the id the executor minted for the call it asks for
// (events.CallHeader), which the trail joins the call's events by.
func (r *Recorder) RecordRequest(m *nats.Msg, call string) (Receipt, error) {
	s, ok := events.Recorded(m.Subject)
	if !ok {
		return Receipt{}, fmt.Errorf("recorder: %q is not a request subject", m.Subject)
	}
	return r.record(s, m.Data, call, true, false)
}

func (r *Recorder) forget(n uint64) { r.settle(n, nil) }

// settle ends record n's wait: stored (err nil) or refused.
func (r *Recorder) settle(n uint64, err error) {
	r.mu.Lock()
	rec := r.pending[n]
	delete(r.pending, n)
	r.room.Signal()
	r.mu.Unlock()
	if rec != nil && rec.done != nil {
		rec.err = err
		close(rec.done)
	}
}

// refusedFull reports whether a stream's refusal of a message says it
// has no room: at its cap under DiscardNew ("maximum bytes exceeded",
// JSStreamStoreFailedF), or its server out of storage (insufficient
// resources). Both come with code 503, which otherwise means "no
// leader for now, send again": these must not be sent again forever.
func refusedFull(api *jetstream.APIError) bool {
	switch api.ErrorCode {
	case 10023: // JSInsufficientResourcesErr
		return true
	case 10077: // JSStreamStoreFailedF
		return strings.Contains(api.Description, "maximum bytes exceeded") || strings.Contains(api.Description, "no space left")
	}
	return false
}

var (
	ackStream  = []byte(`"stream"`)
	ackError   = []byte(`"error"`)
	statusCode = "Status"
)

// acked hears the stream's answer to a record: stored (a PubAck, also
// for a duplicate), or not (no one to store it: sent again soon; refused:
// given up on, and said so).
func (r *Recorder) acked(m *nats.Msg) {
	n, err := strconv.ParseUint(m.Subject[len(r.prefix):], 36, 64)
	if err != nil {
		return
	}
	switch {
	case len(m.Data) == 0 && m.Header.Get(statusCode) != "":
		// 503: no responders, the stream has no leader for now.
		r.mu.Lock()
		if rec := r.pending[n]; rec != nil {
			rec.due = time.Now().Add(recordRetryWait)
		}
		r.mu.Unlock()
	case bytes.Contains(m.Data, ackError):
		r.mu.Lock()
		rec := r.pending[n]
		r.mu.Unlock()
		if rec == nil {
			return
		}
		var api struct {
			Error jetstream.APIError `json:"error"`
		}
		_ = json.Unmarshal(m.Data, &api)
		full := refusedFull(&api.Error)
		if api.Error.Code == 503 && !full && api.Error.ErrorCode != 10077 {
			r.mu.Lock()
			rec.due = time.Now().Add(recordRetryWait)
			r.mu.Unlock()
			return
		}
		err := fmt.Errorf("record refused by the audit stream: %s", api.Error.Description)
		if full {
			err = fmt.Errorf("%w: %s", ErrTrailFull, api.Error.Description)
			r.full()
		}
		// Counted lost before it is settled: whoever its receipt or
		// Pending tells of the refusal finds it counted.
		r.lost.Add(1)
		r.settle(n, err)
		r.log.Error("record refused by the audit stream", "subject", rec.msg.Subject, "err", api.Error.Error())
	case bytes.Contains(m.Data, ackStream):
		r.forget(n)
	}
}

// sweep sends again, under the same id, the records whose
// acknowledgement is overdue, until Close.
func (r *Recorder) sweep() {
	defer close(r.done)
	tick := time.NewTicker(recordSweep)
	defer tick.Stop()
	var due []*nats.Msg
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		if r.nc.IsClosed() {
			// A closed connection never comes back: what it did not
			// get acknowledged never will be, and its waiters hear so
			// now rather than at their deadlines.
			r.abandon(errors.New("record not acknowledged: the bus connection is closed"))
			continue
		}
		now := time.Now()
		due = due[:0]
		r.mu.Lock()
		for _, rec := range r.pending {
			if now.After(rec.due) {
				rec.due = now.Add(recordAckWait)
				due = append(due, rec.msg)
			}
		}
		r.mu.Unlock()
		for _, m := range due {
			r.resent.Add(1)
			if err := r.nc.PublishMsg(m); err != nil && !errors.Is(err, nats.ErrReconnectBufExceeded) {
				r.log.Warn("record not sent again", "subject", m.Subject, "err", err)
			}
		}
	}
}

// Pending is how many records are not acknowledged yet.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Window is how many records are not acknowledged yet, and how many may
// be before a record waits for room.
func (r *Recorder) Window() (pending, size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending), r.window
}

// Resent counts records sent again after no acknowledgement came.
func (r *Recorder) Resent() uint64 { return r.resent.Load() }

// Lost counts records given up on: refused by the stream, or still
// unacknowledged when the recorder was closed.
func (r *Recorder) Lost() uint64 { return r.lost.Load() }

// Close waits, until ctx ends, for the stream to acknowledge every
// record, and stops. What is still unacknowledged then is counted lost.
func (r *Recorder) Close(ctx context.Context) error {
	var err error
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for err == nil && r.Pending() > 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			err = fmt.Errorf("recorder: %d records not acknowledged: %w", r.Pending(), ctx.Err())
		}
	}
	r.once.Do(func() {
		r.mu.Lock()
		r.closing = true
		r.room.Broadcast()
		r.mu.Unlock()
		close(r.stop)
		<-r.done
		_ = r.sub.Unsubscribe()
	})
	r.abandon(errors.New("record not acknowledged: the recorder is closed"))
	return err
}

// abandon gives up on every record still unacknowledged, counting them
// lost: whoever waits on a receipt hears that no answer will come.
func (r *Recorder) abandon(why error) {
	r.mu.Lock()
	left := make([]uint64, 0, len(r.pending))
	for n := range r.pending {
		left = append(left, n)
	}
	r.mu.Unlock()
	r.lost.Add(uint64(len(left)))
	for _, n := range left {
		r.settle(n, why)
	}
}

// retryable says whether err may pass: no answer, no stream leader for
// the moment, a lost connection.
func retryable(err error) bool {
	var api *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout):
		return true
	case errors.As(err, &api):
		// 503: JetStream is not available right now (no quorum); but a
		// stream with no room says 503 too, and stays full.
		return (api.Code == 503 && !refusedFull(api) && api.ErrorCode != 10077) || api.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled
	}
	return false
}

// RecordRequestOnce records request m, which came on events.Request(s),
// on s with RecordOnce: for a part that takes requests too seldom to keep
// a Recorder (a discovery asked of an executor). It waits at most
// requestRecordWait.
func RecordRequestOnce(ctx context.Context, nc *nats.Conn, m *nats.Msg) error {
	s, ok := events.Recorded(m.Subject)
	if !ok {
		return fmt.Errorf("record: %q is not a request subject", m.Subject)
	}
	ctx, cancel := context.WithTimeout(ctx, requestRecordWait)
	defer cancel()
	return RecordOnce(ctx, nc, s, "request."+events.NewCapability(), m.Data)
}

// requestRecordWait is how long RecordRequestOnce waits for the audit
// stream: as long as a stream takes to elect a leader, and more.
const requestRecordWait = 30 * time.Second

// RecordOnce records data on subject and waits until the audit stream
// has it or ctx ends, sending again meanwhile, under id: for a part that
// records too seldom to keep a Recorder (a caller recording the result
// of a call its executor was lost in).
func RecordOnce(ctx context.Context, nc *nats.Conn, subject, id string, data []byte) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header[jetstream.MsgIDHeader] = []string{id}
	for {
		attempt, cancel := context.WithTimeout(ctx, recordAckWait)
		_, err = js.PublishMsg(attempt, m)
		cancel()
		if api := (*jetstream.APIError)(nil); errors.As(err, &api) && refusedFull(api) {
			return fmt.Errorf("record on %s: %w: %v", subject, ErrTrailFull, err)
		}
		if err == nil || !(retryable(err) || errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("record on %s: %w (last: %v)", subject, ctx.Err(), err)
		case <-time.After(recordRetryWait):
		}
	}
}
