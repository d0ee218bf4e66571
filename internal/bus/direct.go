package bus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// A member that lives in an account of its own (an agent, the MCP
// facade: internal/auth) may not make consumers in the services account,
// whose deliver subject would be its to choose. It reads a bucket with
// JetStream's direct get, which answers only the requester and writes
// nothing, and follows it on the subject the bucket republishes its
// changes to. Watch is the bucket's WatchAll made of the two.

// ErrNoStream means no stream answered a direct get: none of that name is
// on the bus, or, in a cluster, the one just made does not answer yet.
var ErrNoStream = errors.New("no such stream on the bus")

// noStream is the error of a direct get no one answered: no such stream,
// or, in a cluster, one just made whose direct-get responders are not up
// yet, which a caller waits out (Transient: nats.ErrNoResponders).
func noStream(stream string) error {
	return fmt.Errorf("%w: %s (%w)", ErrNoStream, stream, nats.ErrNoResponders)
}

// errTooManyResults is the server's refusal of a multi_last get that
// matches more subjects than it answers at once (1024 in nats-server
// 2.15), however it is paged.
var errTooManyResults = errors.New("too many subjects for one multi-last get")

// StoredMsg is one message of a stream, as direct get gives it.
type StoredMsg struct {
	Subject  string
	Sequence uint64
	Time     time.Time
	Header   nats.Header
	Data     []byte
}

// LastOfEach reads the last message of each subject under filter that
// stream holds, in stream order, and the stream's last sequence when it
// read them: what a watcher already has when it starts from there.
func LastOfEach(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]*StoredMsg, uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if !ServerAtLeast(js.Conn(), 2, 11) {
		return lastOfEachByReading(ctx, js, stream, filter) // no multi_last before 2.11
	}
	var (
		out  []*StoredMsg
		upTo uint64
		from uint64
	)
	for {
		req := getRequest{MultiLast: []string{filter}}
		if upTo > 0 {
			// The next page, of the same view of the stream.
			req.Seq, req.UpToSeq = from, upTo
		}
		page, eob, err := directGet(ctx, js, stream, req)
		if errors.Is(err, errTooManyResults) && len(out) == 0 {
			return lastOfEachByReading(ctx, js, stream, filter)
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, page...)
		if eob == nil {
			return out, upTo, nil // no message under filter
		}
		upTo, _ = strconv.ParseUint(eob.Get("Nats-UpTo-Sequence"), 10, 64)
		if eob.Get("Nats-Num-Pending") == "0" || len(page) == 0 {
			return out, upTo, nil
		}
		from = page[len(page)-1].Sequence + 1
	}
}

// getRequest is one direct get: the message at or after Seq (under
// NextBySubj), or from nats-server 2.11 on, a batch of them (Batch,
// MaxBytes, from Seq or StartTime) or the last message of each subject
// (MultiLast, up to UpToSeq).
type getRequest struct {
	Seq        uint64     `json:"seq,omitempty"`
	NextBySubj string     `json:"next_by_subj,omitempty"`
	StartTime  *time.Time `json:"start_time,omitempty"`
	Batch      int        `json:"batch,omitempty"`
	MaxBytes   int        `json:"max_bytes,omitempty"`
	MultiLast  []string   `json:"multi_last,omitempty"`
	UpToSeq    uint64     `json:"up_to_seq,omitempty"`
	// to bounds a batch asked for one message at a time (oneByOne),
	// where a server with batches ends the batch past it the same.
	to uint64
}

// directGet sends one direct get of stream and gathers its answers until
// the end of the batch. eob is the end's header; nil when nothing
// matched. A server before 2.11 has its batch asked for one message at a
// time (oneByOne).
func directGet(ctx context.Context, js jetstream.JetStream, stream string, req getRequest) (msgs []*StoredMsg, eob nats.Header, err error) {
	batch := req.Batch > 0 || len(req.MultiLast) > 0
	if (req.Batch > 0 || req.StartTime != nil) && !ServerAtLeast(js.Conn(), 2, 11) {
		return oneByOne(ctx, js, stream, req)
	}
	nc := js.Conn()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	if !batch {
		// One answer: the connection's own reply subscription takes it.
		m, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: apiPrefix(js) + "DIRECT.GET." + stream, Data: body, Header: nats.Header{}})
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, nil, noStream(stream)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("direct get of %s: %w", stream, err)
		}
		msg, err := storedOf(m, stream)
		if msg == nil || err != nil {
			return nil, nil, err
		}
		return []*StoredMsg{msg}, nil, nil
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishMsg(&nats.Msg{Subject: apiPrefix(js) + "DIRECT.GET." + stream, Reply: inbox, Data: body, Header: nats.Header{}}); err != nil {
		return nil, nil, err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if errors.Is(err, nats.ErrNoResponders) {
			// nats.go hands the server's 503 to a synchronous
			// subscription as an error.
			return nil, nil, noStream(stream)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("direct get of %s: %w", stream, err)
		}
		if m.Header.Get("Status") == "204" {
			return msgs, m.Header, nil // the batch's end
		}
		msg, err := storedOf(m, stream)
		if err != nil {
			return nil, nil, err
		}
		if msg == nil {
			return msgs, nil, nil
		}
		msgs = append(msgs, msg)
	}
}

// storedOf is one answer of a direct get of stream: a stored message, nil
// for none (404), or why there is no answer.
func storedOf(m *nats.Msg, stream string) (*StoredMsg, error) {
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return nil, nil
	case "503":
		return nil, noStream(stream)
	case "413":
		return nil, fmt.Errorf("direct get of %s: %w", stream, errTooManyResults)
	default:
		return nil, fmt.Errorf("direct get of %s: status %s %s", stream, status, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get of %s: a message without its sequence", stream)
	}
	at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return &StoredMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq, Time: at, Header: m.Header, Data: m.Data}, nil
}

// oneByOne is a batch's direct get for a server before 2.11, which
// answers one message a request: a round trip per message. Its end says
// only whether more may be left (Nats-Num-Pending 0 or 1), where a
// batch's end counts them.
func oneByOne(ctx context.Context, js jetstream.JetStream, stream string, req getRequest) ([]*StoredMsg, nats.Header, error) {
	seq := max(req.Seq, 1)
	if req.StartTime != nil {
		first, err := firstAtOrAfter(ctx, js, stream, *req.StartTime)
		if err != nil || first == 0 {
			return nil, nil, err
		}
		seq = first
	}
	var (
		msgs []*StoredMsg
		size int
	)
	for len(msgs) < max(req.Batch, 1) && (req.MaxBytes == 0 || size < req.MaxBytes) {
		m, err := getOne(ctx, js, stream, seq, req.NextBySubj)
		if err != nil {
			return nil, nil, err
		}
		if m != nil && req.to > 0 && m.Sequence > req.to {
			m = nil // past the read's end: as good as none
		}
		if m == nil {
			if len(msgs) == 0 {
				return nil, nil, nil
			}
			return msgs, nats.Header{"Nats-Num-Pending": []string{"0"}}, nil
		}
		msgs = append(msgs, m)
		size += len(m.Data)
		seq = m.Sequence + 1
	}
	return msgs, nats.Header{"Nats-Num-Pending": []string{"1"}}, nil
}

// getOne is the message of stream at or after seq, under subject when it
// is not empty; nil when there is none.
func getOne(ctx context.Context, js jetstream.JetStream, stream string, seq uint64, subject string) (*StoredMsg, error) {
	msgs, _, err := directGet(ctx, js, stream, getRequest{Seq: seq, NextBySubj: subject})
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	return msgs[0], nil
}

// firstAtOrAfter is the first sequence of stream stored at or after t,
// found by bisecting the stream's sequences (their times only grow); 0
// when none is.
func firstAtOrAfter(ctx context.Context, js jetstream.JetStream, stream string, t time.Time) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	state := s.CachedInfo().State
	lo, hi := max(state.FirstSeq, 1), state.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := getOne(ctx, js, stream, mid, "")
		if err != nil {
			return 0, err
		}
		if m == nil || !m.Time.Before(t) {
			hi = mid
		} else {
			lo = m.Sequence + 1
		}
	}
	if lo > state.LastSeq {
		return 0, nil
	}
	return lo, nil
}

// apiPrefix is where js sends its JetStream API requests, with the dot.
func apiPrefix(js jetstream.JetStream) string {
	p := js.Options().APIPrefix
	if p == "" {
		return "$JS.API."
	}
	return strings.TrimSuffix(p, ".") + "."
}

// entryOf is a stored message of a bucket as its entry.
func entryOf(bucket, key string, seq uint64, at time.Time, h nats.Header, data []byte) jetstream.KeyValueEntry {
	op := jetstream.KeyValuePut
	switch h.Get("KV-Operation") {
	case "DEL":
		op = jetstream.KeyValueDelete
	case "PURGE":
		op = jetstream.KeyValuePurge
	}
	return &entry{bucket: bucket, key: key, value: data, revision: seq, created: at, op: op}
}

type entry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e *entry) Bucket() string                  { return e.bucket }
func (e *entry) Key() string                     { return e.key }
func (e *entry) Value() []byte                   { return e.value }
func (e *entry) Revision() uint64                { return e.revision }
func (e *entry) Created() time.Time              { return e.created }
func (e *entry) Delta() uint64                   { return 0 }
func (e *entry) Operation() jetstream.KeyValueOp { return e.op }

// lastOfEachByReading is LastOfEach for a filter that matches more
// subjects than a multi_last get answers: every message under filter is
// read (bus.Read), the last of each subject kept. A bucket that keeps
// one value per key (the catalogue) costs the same either way.
func lastOfEachByReading(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]*StoredMsg, uint64, error) {
	last := map[string]*StoredMsg{}
	upTo, err := Read(ctx, js, stream, Range{Subjects: []string{filter}}, func(m *StoredMsg) error {
		last[m.Subject] = m
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]*StoredMsg, 0, len(last))
	for _, m := range last {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *StoredMsg) int { return cmp.Compare(a.Sequence, b.Sequence) })
	return out, upTo, nil
}

// Blobs reads the audit trail's large fields from events.BlobStream by
// direct get of the subject each one's digest names (an auditor may read
// nothing else of it). Checking the bytes against the digest is the
// reader's (events.Inline, events.CheckBlob). The zero Blobs is not
// usable: NewBlobs.
type Blobs struct {
	js     jetstream.JetStream
	stream jetstream.Stream // looked up on the first read
}

// NewBlobs reads blobs through js.
func NewBlobs(js jetstream.JetStream) *Blobs { return &Blobs{js: js} }

// Fetch returns the bytes stored under ref's digest.
func (b *Blobs) Fetch(ctx context.Context, ref events.BlobRef) ([]byte, error) {
	if b.stream == nil {
		s, err := b.js.Stream(ctx, events.BlobStream)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", events.BlobStream, err)
		}
		b.stream = s
	}
	m, err := b.stream.GetLastMsgForSubject(ctx, ref.Subject())
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}
