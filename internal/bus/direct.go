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

// ErrNoStream means the stream asked for is not on the bus.
var ErrNoStream = errors.New("no such stream on the bus")

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
	var (
		out  []*StoredMsg
		upTo uint64
		from uint64
	)
	for {
		req := map[string]any{"multi_last": []string{filter}}
		if upTo > 0 {
			// The next page, of the same view of the stream.
			req["seq"], req["up_to_seq"] = from, upTo
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

// directGet sends one direct get of stream and gathers its answers until
// the end of the batch. eob is the end's header; nil when nothing
// matched.
func directGet(ctx context.Context, js jetstream.JetStream, stream string, req any) (msgs []*StoredMsg, eob nats.Header, err error) {
	nc := js.Conn()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
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
			// subscription as an error: no stream answers direct gets.
			return nil, nil, fmt.Errorf("%w: %s", ErrNoStream, stream)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("direct get of %s: %w", stream, err)
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "204":
			return msgs, m.Header, nil
		case "404":
			return msgs, nil, nil
		case "503":
			return nil, nil, fmt.Errorf("%w: %s", ErrNoStream, stream)
		case "413":
			return nil, nil, fmt.Errorf("direct get of %s: %w", stream, errTooManyResults)
		default:
			return nil, nil, fmt.Errorf("direct get of %s: status %s %s", stream, status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("direct get of %s: a message without its sequence", stream)
		}
		at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		msgs = append(msgs, &StoredMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq, Time: at, Header: m.Header, Data: m.Data})
	}
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
