package executor

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// Loop guards: a model that loops calls the same tool with the same
// arguments again and again, or simply never stops calling. For every
// call, the policy is shown how many calls its caller's session made and
// how many times the caller made this very call lately
// (policy.SessionCounts), counted fleet-wide in the counter stream
// events.SessionStream, so that every executor sees the same numbers.
//
// Calls are counted under who makes them (counted): the proven
// principal, or, without identities, the caller's claimed id. A session
// is counted under that and the session's name together: a caller naming
// another principal's session counts its own calls, never that
// principal's. A call that names no session is counted in its caller's
// own bucket, as a session that never ends. Repeats are counted under the
// caller alone, whatever session each call named: a loop that renames its
// session, or drops it, goes on counting. The names are the caller's
// choice (any bytes): the subjects hold their hashes. An agent that names
// a new session for every call starts its session's calls from zero each
// time; per-principal limits are what bound it.
//
// Each counted call adds one to each of three counters, in one round
// trip: the session's calls, and the caller's repeats of this call in
// the current window and in the next. A window's counter then holds the
// calls of the window before it and its own, so the repeats a call sees are those of
// the last repeatWindow at least and of twice that at most, read from the
// acknowledgements alone. A counter the stream has not changed for
// sessionMaxAge is dropped: a session idle that long starts again from
// zero. So is the oldest counter when the stream is full
// (sessionStreamBytes, a hundred thousand calls of other sessions
// since, or more): a flood of calls is what rate limits are for.
//
// The counters are read only for a policy that reads input.session
// (policy.Policy.ReadsSession); under any other, a call costs nothing
// here. When they cannot be counted (the bus is in trouble) the call is
// not judged: it fails, never decided without them.

// Bounds of the session counters.
const (
	repeatWindow       = 5 * time.Minute
	sessionMaxAge      = 24 * time.Hour
	sessionStreamBytes = 64 << 20
	// countWait bounds the wait for the counters on the way of one call.
	countWait = 5 * time.Second
)

// sessionCounter adds to the session counters and reads the values the
// stream's acknowledgements carry: they arrive on one subscription of its
// own, each routed to the call that waits for it.
type sessionCounter struct {
	nc     *nats.Conn
	prefix string // of the acknowledgements' subjects: prefix + a number
	sub    *nats.Subscription

	mu      sync.Mutex
	seq     uint64
	waiting map[uint64]ackSlot
}

// ackSlot is where the acknowledgement of one increment goes: the i-th
// of a call's counters.
type ackSlot struct {
	i  int
	ch chan<- counterAck
}

type counterAck struct {
	i     int
	value int64
	err   error
}

// openSessionCounter makes the counter stream, or brings an existing one
// to its config, and subscribes to the acknowledgements.
func openSessionCounter(ctx context.Context, js jetstream.JetStream, nc *nats.Conn) (*sessionCounter, error) {
	if err := ensureSessionStream(ctx, js); err != nil {
		return nil, err
	}
	s := &sessionCounter{nc: nc, waiting: map[uint64]ackSlot{}}
	s.prefix = nc.NewRespInbox() + "."
	var err error
	if s.sub, err = nc.Subscribe(s.prefix+"*", s.acked); err != nil {
		return nil, fmt.Errorf("session counters: %w", err)
	}
	_ = s.sub.SetPendingLimits(-1, -1) // acknowledgements are small and handled at once
	return s, nil
}

// ensureSessionStream makes the counter stream, or brings an existing
// one to its config.
func ensureSessionStream(ctx context.Context, js jetstream.JetStream) error {
	_, err := bus.EnsureStream(ctx, js, jetstream.StreamConfig{
		Name:        events.SessionStream,
		Description: "toolbus: calls counted per session and per repeated call, for the loop guards",
		Subjects:    []string{events.SessionSubjectPrefix + ">"},
		// In memory: an increment is stored in about half the time a file
		// takes, and these counts are worth less than that: a bus that
		// restarts forgets them, as a session idle for a day is forgotten.
		Storage:           jetstream.MemoryStorage,
		MaxAge:            sessionMaxAge,
		MaxBytes:          sessionStreamBytes,
		MaxMsgsPerSubject: 1, // a counter's last message holds its value
		Discard:           jetstream.DiscardOld,
		AllowMsgCounter:   true,
	})
	if err != nil {
		return fmt.Errorf("session counters: %w", err)
	}
	return nil
}

func (s *sessionCounter) close() {
	if s != nil && s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
}

// acked routes an acknowledgement to the call waiting for it.
func (s *sessionCounter) acked(m *nats.Msg) {
	n, err := strconv.ParseUint(m.Subject[len(s.prefix):], 36, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	slot, ok := s.waiting[n]
	delete(s.waiting, n)
	s.mu.Unlock()
	if ok {
		v, err := counterValue(m, events.SessionStream)
		slot.ch <- counterAck{i: slot.i, value: v, err: err}
	}
}

// count adds one to the counters of the subjects given, at once, and
// returns their new values, in order.
func (s *sessionCounter) count(ctx context.Context, subjects ...string) ([]int64, error) {
	ch := make(chan counterAck, len(subjects))
	msgs := make([]*nats.Msg, len(subjects))
	seqs := make([]uint64, len(subjects))
	s.mu.Lock()
	for i, subject := range subjects {
		s.seq++
		seqs[i] = s.seq
		s.waiting[s.seq] = ackSlot{i: i, ch: ch}
		msgs[i] = &nats.Msg{Subject: subject, Reply: s.prefix + strconv.FormatUint(s.seq, 36), Header: incrOne}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, n := range seqs {
			delete(s.waiting, n)
		}
		s.mu.Unlock()
	}()
	for _, m := range msgs {
		if err := s.nc.PublishMsg(m); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, countWait)
	defer cancel()
	values := make([]int64, len(subjects))
	for range subjects {
		select {
		case a := <-ch:
			if a.err != nil {
				return nil, a.err
			}
			values[a.i] = a.value
		case <-ctx.Done():
			return nil, fmt.Errorf("no acknowledgement from %s: %w", events.SessionStream, ctx.Err())
		}
	}
	return values, nil
}

// incrOne is the header of an increment by one; the server only reads it.
var incrOne = nats.Header{incrHeader: []string{"+1"}}

// sessionCounts counts the call in its session (or its caller's calls
// without one) and returns the counts the policy is shown; nil when the
// policy has no need of them.
func (c *call) sessionCounts(pol *policy.Policy, args map[string]any) (*policy.SessionCounts, error) {
	if !pol.ReadsSession() {
		return nil, nil
	}
	canonical, err := json.Marshal(args) // keys sorted, numbers as written
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	who := c.counted()
	key := counterKey(who, c.inv.Sender.Session)
	call := counterKey(who, c.tool.Name, string(canonical))
	current, next := repeatCounters(call, time.Now())
	values, err := c.e.sessions.count(c.ctx, events.SessionSubjectPrefix+"calls."+key, current, next)
	if err != nil {
		return nil, err
	}
	return &policy.SessionCounts{Calls: values[0], Repeats: values[1]}, nil
}

// repeatCounters are the subjects of the repeat counters of call (its
// counterKey) at now: the current window's, which the call reads, and
// the next one's, which the calls of the next window read.
func repeatCounters(call string, now time.Time) (current, next string) {
	w := now.UnixNano() / int64(repeatWindow)
	return events.SessionSubjectPrefix + "repeats." + strconv.FormatInt(w, 10) + "." + call,
		events.SessionSubjectPrefix + "repeats." + strconv.FormatInt(w+1, 10) + "." + call
}

// counted is who the loop guards count a call under: the proven
// principal, which is the caller whatever it names itself; without
// identities, where every caller is the unproven principal, the id the
// caller claims, so that two agents' calls are not taken for one loop.
func (c *call) counted() string {
	if c.principal != events.Unproven {
		return c.principal
	}
	return events.Unproven + "\x00" + c.inv.Sender.ID
}

// counterKey is a subject token for the parts given: their SHA-256, each
// part length-prefixed so that no two lists of parts share one, cut to
// 128 bits and base64url-encoded.
func counterKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		writeLen(h, len(p))
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:16])
}

func writeLen(h hash.Hash, n int) {
	var b [binary.MaxVarintLen64]byte
	h.Write(b[:binary.PutUvarint(b[:], uint64(n))])
}
