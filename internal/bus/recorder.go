package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/events"
)

// Recorder writes records and events to the audit stream and makes sure
// each is stored. A plain publish is lost when the stream has no leader
// for a moment (a node of the cluster went away) or the connection drops
// with it in flight; the recorder waits for the stream's acknowledgement
// instead, and sends again what it did not get one for, under the same
// message id, so the stream keeps one copy (within its duplicate window).
//
// Record does not wait for the acknowledgement: the invoke path only
// pays for sending. It waits only when more than MaxPending records are
// unacknowledged (the stream is gone for a while), so a part that cannot
// record stops taking work instead of piling it up in memory.
type Recorder struct {
	js     jetstream.JetStream
	log    *slog.Logger
	nonce  string
	seq    atomic.Uint64
	lost   atomic.Uint64
	resent atomic.Uint64

	mu      sync.Mutex
	retry   []*nats.Msg
	wake    chan struct{}
	closing chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Recorder settings. The ack wait is long enough for a stream that is
// storing a burst, short enough that a lost record goes again soon after
// a new stream leader is elected (seconds).
const (
	recordAckWait    = 3 * time.Second
	recordRetryWait  = 250 * time.Millisecond
	RecordMaxPending = 16384
)

// NewRecorder returns a recorder sending on nc. Close stops it.
func NewRecorder(nc *nats.Conn, log *slog.Logger) (*Recorder, error) {
	r := &Recorder{log: log, nonce: nuid.Next(), wake: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(recordAckWait),
		jetstream.WithPublishAsyncMaxPending(RecordMaxPending),
		jetstream.WithPublishAsyncErrHandler(r.failed))
	if err != nil {
		return nil, fmt.Errorf("recorder: %w", err)
	}
	r.js = js
	go r.resend()
	return r, nil
}

// Record sends data on subject to the audit stream, and again until the
// stream has it. It fails only when the message cannot be sent at all
// (too large for the bus, the recorder closed).
func (r *Recorder) Record(subject string, data []byte) error {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	// The id is this recorder's and a count: the same for every copy of
	// one record, never the same for two.
	m.Header[jetstream.MsgIDHeader] = []string{r.nonce + "." + strconv.FormatUint(r.seq.Add(1), 36)}
	return r.send(m)
}

// RecordRequest records request m, which came on events.Request(s), on
// s: what was asked, exactly as it was sent. The requester's principal
// stays in the subject, so the record keeps who sent it.
func (r *Recorder) RecordRequest(m *nats.Msg) error {
	s, ok := events.Recorded(m.Subject)
	if !ok {
		return fmt.Errorf("recorder: %q is not a request subject", m.Subject)
	}
	return r.Record(s, m.Data)
}

func (r *Recorder) send(m *nats.Msg) error {
	for {
		_, err := r.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Second))
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return fmt.Errorf("record on %s: %w", m.Subject, err)
		}
		select {
		case <-r.closing:
			r.lost.Add(1)
			return fmt.Errorf("record on %s: the recorder is closing with %d records unacknowledged", m.Subject, RecordMaxPending)
		default:
			r.log.Warn("the audit stream is not acknowledging records: waiting", "pending", RecordMaxPending)
		}
	}
}

// failed hears of a record that got no acknowledgement. It is called
// with the publisher's lock held: the record goes to resend's queue.
func (r *Recorder) failed(_ jetstream.JetStream, m *nats.Msg, err error) {
	if !retryable(err) {
		r.lost.Add(1)
		r.log.Error("record refused by the audit stream", "subject", m.Subject, "err", err)
		return
	}
	r.resent.Add(1)
	r.mu.Lock()
	r.retry = append(r.retry, m)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
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
		// 503: JetStream is not available right now (no quorum).
		return api.Code == 503 || api.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled
	}
	return false
}

// resend sends the unacknowledged records again, a little later, until
// Close.
func (r *Recorder) resend() {
	defer close(r.done)
	for {
		select {
		case <-r.wake:
		case <-r.closing:
			return
		}
		select {
		case <-time.After(recordRetryWait):
		case <-r.closing:
			return
		}
		r.mu.Lock()
		batch := r.retry
		r.retry = nil
		r.mu.Unlock()
		for _, m := range batch {
			if err := r.send(m); err != nil {
				r.lost.Add(1)
				r.log.Error("record not sent again", "subject", m.Subject, "err", err)
			}
		}
	}
}

// Pending is how many records are not acknowledged yet.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	n := len(r.retry)
	r.mu.Unlock()
	return n + r.js.PublishAsyncPending()
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
	r.once.Do(func() { close(r.closing) })
	<-r.done
	if err != nil {
		r.lost.Add(uint64(r.Pending()))
	}
	return err
}

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
