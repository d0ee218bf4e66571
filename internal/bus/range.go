package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A reader that may not make consumers (a member in an account of its
// own: internal/auth) reads a stretch of a stream with Read: JetStream's
// direct get in batches, which answers only the requester and writes
// nothing. A consumer's deliver subject, or any API request's reply
// subject, would be the reader's to choose in the account that holds the
// stream, where JetStream would write with its answer.

// Range is a stretch of a stream: the messages from From (or from the
// first one stored at or after Since) to To, under any of Subjects.
type Range struct {
	// From is the first sequence read. 0: the first message stored at or
	// after Since, or the stream's first when Since is zero too.
	From  uint64
	Since time.Time
	// To is the last sequence read. 0: the stream's last as its leader
	// tells when the read begins, so that a read of a stream that grows
	// ends.
	To uint64
	// Subjects are the subjects read, wildcards allowed; none: every
	// subject.
	Subjects []string
}

// ErrStop, returned by Read's fn, ends the read without an error.
var ErrStop = errors.New("bus: stop reading")

// Read sizes: a page is one direct get of up to pageSize messages and
// about pageBytes (at least one message, however large), each answered
// within pageWait.
const (
	pageSize  = 2000
	pageBytes = 8 << 20
	pageWait  = 10 * time.Second
)

// Read calls fn with each message of stream in r, in stream order, and
// returns the sequence of the last message it gave fn (0: none). Each
// subject is read on its own, by the stream's index of it, and the
// subjects merged by sequence, so a read of a few subjects does not
// carry the rest of the stream (a call's output, say) over the wire.
//
// Direct get may be answered by any copy of a replicated stream, and a
// copy that lags holds a prefix of the stream: Read then ends early,
// never with a gap. A reader that must have everything up to To checks
// with the leader (NextMsg) and reads on after the sequence it returned.
func Read(ctx context.Context, js jetstream.JetStream, stream string, r Range, fn func(*StoredMsg) error) (uint64, error) {
	to := r.To
	if to == 0 {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, fmt.Errorf("stream %s: %w", stream, err)
		}
		to = s.CachedInfo().State.LastSeq
	}
	if to == 0 || r.From > to {
		return 0, nil
	}
	subjects := r.Subjects
	if len(subjects) == 0 {
		subjects = []string{""}
	}
	cursors := make([]*cursor, len(subjects))
	for i, s := range subjects {
		cursors[i] = &cursor{subject: s, from: r.From, since: r.Since}
	}
	var last uint64
	for {
		var next *cursor
		for _, c := range cursors {
			if err := c.fill(ctx, js, stream, to); err != nil {
				return last, err
			}
			if len(c.page) > 0 && (next == nil || c.page[0].Sequence < next.page[0].Sequence) {
				next = c
			}
		}
		if next == nil {
			return last, nil
		}
		m := next.page[0]
		next.page[0] = nil // the page's array outlives the message
		next.page = next.page[1:]
		if m.Sequence <= last {
			continue // under two of the subjects: given once
		}
		err := fn(m)
		if err != nil && !errors.Is(err, ErrStop) {
			return last, err
		}
		last = m.Sequence
		if err != nil {
			return last, nil
		}
	}
}

// cursor reads one subject of a Read, a page at a time.
type cursor struct {
	subject string // "": every subject
	from    uint64 // the next sequence to ask for; 0: from since
	since   time.Time
	page    []*StoredMsg
	done    bool
}

// fill reads the cursor's next page when it has used up the last one
// and the stream holds more under its subject up to to.
func (c *cursor) fill(ctx context.Context, js jetstream.JetStream, stream string, to uint64) error {
	if len(c.page) > 0 || c.done {
		return nil
	}
	req := getRequest{Batch: pageSize, MaxBytes: pageBytes, NextBySubj: c.subject, to: to}
	switch {
	case c.from > 0:
		req.Seq = c.from
	case !c.since.IsZero():
		since := c.since.UTC()
		req.StartTime = &since
	default:
		req.Seq = 1 // the stream's first, wherever it is now
	}
	ctx, cancel := context.WithTimeout(ctx, pageWait)
	defer cancel()
	page, eob, err := directGet(ctx, js, stream, req)
	if err != nil {
		return err
	}
	for i, m := range page {
		if m.Sequence > to {
			page = page[:i]
			c.done = true
			break
		}
	}
	c.page = page
	if len(page) > 0 {
		c.from = page[len(page)-1].Sequence + 1
	}
	// eob is nil when nothing at all was left; its pending count is the
	// answering copy's, under the subject, after the page.
	if len(page) == 0 || eob == nil || eob.Get("Nats-Num-Pending") == "0" || c.from > to {
		c.done = true
	}
	return nil
}

// LastMsg asks stream's leader for the last message under subject:
// STREAM.MSG.GET, not direct get, which a copy that lags may answer.
// jetstream.ErrMsgNotFound when there is none.
func LastMsg(ctx context.Context, js jetstream.JetStream, stream, subject string) (*StoredMsg, error) {
	return leaderGet(ctx, js, stream, map[string]any{"last_by_subj": subject})
}

// NextMsg asks stream's leader for the first message at or after
// sequence seq under subject ("": any). jetstream.ErrMsgNotFound when
// there is none.
func NextMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64, subject string) (*StoredMsg, error) {
	req := map[string]any{"seq": max(seq, 1)}
	if subject != "" {
		req["next_by_subj"] = subject
	}
	return leaderGet(ctx, js, stream, req)
}

// leaderGet sends one STREAM.MSG.GET request. API errors come back as
// *jetstream.APIError, so that a caller tells a stream electing its
// leader (503) from one that refuses.
func leaderGet(ctx context.Context, js jetstream.JetStream, stream string, req map[string]any) (*StoredMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pageWait)
		defer cancel()
	}
	m, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, fmt.Errorf("get a message of %s: %w", stream, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("get a message of %s: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, fmt.Errorf("get a message of %s: an answer with no message", stream)
	}
	out := &StoredMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Time: resp.Message.Time, Data: resp.Message.Data, Header: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		if out.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("get a message of %s: %w", stream, err)
		}
	}
	return out, nil
}
