// Package counters keeps the counts an executor judges calls by, beside
// the executor that asks for them: the loop guards' counts and the
// policy's rates, kept in memory by every executor and told to the
// others over the bus (Fleet); the rates a policy asks to be exact,
// counted on the bus itself (Exact); and the slots of the limits of
// calls at once, leased from a bucket (Slots).
package counters

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// A Fleet keeps, in memory, the fleet's count of every key it has heard
// of. A call's increment is added to the count here at once and told to
// the other executors on events.CountSubject, without waiting for
// anyone; what the others tell is added as it arrives. So counting costs
// a call no round trip, and the count a call is shown holds every call
// this executor counted, and every call another executor counted whose
// message has arrived: it misses at most what the others counted in the
// time one message takes to cross the bus (docs/fleet.md).
//
// Why not leases of each key's budget from the bus: most of the keys
// (a caller's call with its arguments, for the repeats) are new for most
// calls, and a lease per new key is a round trip per call again.
//
// What is not kept:
//   - a count past its Until (the end of its window, or of an idle
//     session) is forgotten: it starts from zero again;
//   - past MaxKeys counts, the one changed longest ago is dropped, and
//     starts from zero again if counted anew. A caller that floods
//     distinct calls pushes out the oldest counts, of every caller:
//     per-principal budgets and limits are what bound it;
//   - an executor that starts late knows what it hears from then on,
//     and one cut off from the bus misses what is told meanwhile.
//
// A Fleet is safe for concurrent use. Close stops it.
type Fleet struct {
	nc   *nats.Conn
	self string // events.Counted.From of this Fleet's messages
	max  int
	log  *slog.Logger
	now  func() time.Time
	sub  *nats.Subscription
	// heard counts the messages of other executors taken in, told
	// those this Fleet published.
	heard, told atomic.Int64

	mu     sync.Mutex
	closed bool
	keys   map[string]*entry
	// newest and oldest end the list of entries in the order they were
	// last changed.
	newest, oldest *entry
}

type entry struct {
	key string
	n   int64
	// until is when n is forgotten, in Unix nanoseconds.
	until        int64
	newer, older *entry
}

// DefaultMaxKeys is how many counts a Fleet keeps by default: a call
// makes three new ones at most (its session's, and its repeats' in this
// window and the next), so about 170,000 calls of other callers since a
// count last changed, in about 70 MB (BenchmarkMemory).
const DefaultMaxKeys = 1 << 19

// maxKeep bounds how long a count another executor tells of is kept:
// the longest window is a day (policy.MaxLimitPer), as is a session's
// idle time.
const maxKeep = 25 * time.Hour

// Errors of Add.
var (
	ErrClosed       = errors.New("the counters are closed")
	ErrDisconnected = errors.New("not connected to the bus: the other executors' counts are not heard")
)

// Config is what Open needs.
type Config struct {
	// Executor is the executor's id; its messages are named after it.
	Executor string
	// MaxKeys bounds the counts kept (DefaultMaxKeys when 0).
	MaxKeys int
	Logger  *slog.Logger
}

// Increment is what Add adds to one count.
type Increment struct {
	// Key names the count: letters, digits, '.', '_' and '-', at most
	// events.MaxCountKey bytes.
	Key string
	// N is added; negative to take back what a refused call added.
	N int64
	// Until is when the count may be forgotten. The latest Until a
	// count was given holds.
	Until time.Time
	// Most, when above 0, is what the count may reach: an increment
	// that would take it past is not made.
	Most int64
}

// Open starts a Fleet on nc: it hears the other executors' counts from
// the moment it returns.
func Open(nc *nats.Conn, cfg Config) (*Fleet, error) {
	if cfg.Executor == "" {
		return nil, errors.New("counters: no executor id")
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	f := &Fleet{nc: nc, self: cfg.Executor + "#" + hex.EncodeToString(nonce[:]), max: cfg.MaxKeys, log: cfg.Logger,
		now: time.Now, keys: map[string]*entry{}}
	if len(f.self) > events.MaxCountFrom {
		return nil, fmt.Errorf("counters: the executor id has more than %d bytes", events.MaxCountFrom-len(nonce)*2-1)
	}
	if f.max <= 0 {
		f.max = DefaultMaxKeys
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	var err error
	if f.sub, err = nc.Subscribe(events.CountSubject, f.take); err != nil {
		return nil, fmt.Errorf("counters: %w", err)
	}
	// Counts are small and taken in at once; a backlog past these is a
	// host in trouble, whose dropped messages the connection reports.
	_ = f.sub.SetPendingLimits(1<<20, 256<<20)
	// The server has the subscription once this returns: whatever is
	// counted after Open reaches this Fleet.
	if err := nc.Flush(); err != nil {
		_ = f.sub.Unsubscribe()
		return nil, fmt.Errorf("counters: %w", err)
	}
	return f, nil
}

// Close stops hearing the other executors; Add fails from then on.
func (f *Fleet) Close() {
	f.mu.Lock()
	f.closed = true
	f.keys, f.newest, f.oldest = nil, nil, nil
	f.mu.Unlock()
	_ = f.sub.Unsubscribe()
}

// Heard is how many messages of other executors this Fleet took in.
func (f *Fleet) Heard() int64 { return f.heard.Load() }

// Told is how many messages this Fleet published: once another Fleet
// has heard as many of it, it holds every count this one made before.
func (f *Fleet) Told() int64 { return f.told.Load() }

// Value is the count of key as this Fleet knows it.
func (f *Fleet) Value(key string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.keys[key]; e != nil && e.until > f.now().UnixNano() {
		return e.n
	}
	return 0
}

// Add makes every increment, or none: when one would take its count
// past its Most, nothing is added or told, over is its index and counts
// hold the counts up to it as they were. Otherwise over is -1, counts
// hold the new counts, and the increments are told to the fleet.
func (f *Fleet) Add(incs ...Increment) (counts []int64, over int, err error) {
	for _, in := range incs {
		if !events.ValidCountKey(in.Key) || in.N == 0 || in.N > events.MaxCountN || in.N < -events.MaxCountN {
			return nil, -1, fmt.Errorf("counters: no such increment: %q %+d", in.Key, in.N)
		}
	}
	if !f.nc.IsConnected() {
		return nil, -1, ErrDisconnected
	}
	counts = make([]int64, len(incs))
	now := f.now().UnixNano()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, -1, ErrClosed
	}
	for i, in := range incs {
		if in.Most > 0 {
			if cur := f.valueLocked(in.Key, now); cur+in.N > in.Most {
				for j := i - 1; j >= 0; j-- {
					f.addLocked(incs[j].Key, -incs[j].N, 0, now)
				}
				f.mu.Unlock()
				counts[i] = cur
				return counts, i, nil
			}
		}
		counts[i] = f.addLocked(in.Key, in.N, in.Until.UnixNano(), now)
	}
	f.mu.Unlock()
	if err := f.tell(incs); err != nil {
		return nil, -1, err
	}
	return counts, -1, nil
}

// tell publishes incs to the other executors.
func (f *Fleet) tell(incs []Increment) error {
	for len(incs) > 0 {
		part := incs[:min(len(incs), events.MaxCountAdds)]
		incs = incs[len(part):]
		c := events.Counted{V: events.CountVersion, From: f.self, Adds: make([]events.CountAdd, len(part))}
		for i, in := range part {
			c.Adds[i] = events.CountAdd{Key: in.Key, N: in.N, Until: in.Until.UnixMilli()}
		}
		data, err := events.EncodeCounted(&c)
		if err != nil {
			return fmt.Errorf("counters: %w", err)
		}
		if err := f.nc.Publish(events.CountSubject, data); err != nil {
			return fmt.Errorf("counters: the count was not told to the fleet: %w", err)
		}
		f.told.Add(1)
	}
	return nil
}

// take adds what another executor counted.
func (f *Fleet) take(m *nats.Msg) {
	c, err := events.DecodeCounted(m.Data)
	if err != nil {
		f.log.Warn("a count message from the bus does not read", "err", err)
		return
	}
	if c.From == f.self {
		return
	}
	now := f.now()
	nowN, keep := now.UnixNano(), now.Add(maxKeep).UnixMilli()
	f.mu.Lock()
	if !f.closed {
		for _, a := range c.Adds {
			until := min(a.Until, keep)
			if until*int64(time.Millisecond) <= nowN {
				continue // its window ended
			}
			if a.N < 0 && f.keys[a.Key] == nil {
				continue // taken back from a count this one never had, or dropped
			}
			f.addLocked(a.Key, a.N, until*int64(time.Millisecond), nowN)
		}
	}
	f.mu.Unlock()
	f.heard.Add(1)
}

// valueLocked is key's count at now.
func (f *Fleet) valueLocked(key string, now int64) int64 {
	if e := f.keys[key]; e != nil && e.until > now {
		return e.n
	}
	return 0
}

// addLocked adds n to key's count, which lasts until until at least,
// and returns the new count. A count is never below 0.
func (f *Fleet) addLocked(key string, n, until, now int64) int64 {
	e := f.keys[key]
	switch {
	case e == nil:
		if n < 0 {
			return 0
		}
		f.makeRoomLocked(now)
		e = &entry{key: key}
		f.keys[key] = e
	case e.until <= now:
		e.n, e.until = 0, 0
		f.unlinkLocked(e)
	default:
		f.unlinkLocked(e)
	}
	f.pushLocked(e)
	switch {
	case n > 0 && e.n > (1<<63-1)-n:
		e.n = 1<<63 - 1
	default:
		e.n = max(e.n+n, 0)
	}
	e.until = max(e.until, until)
	return e.n
}

// makeRoomLocked drops the oldest entries that are forgotten already, a
// few at a time, and the oldest of all while the map is full.
func (f *Fleet) makeRoomLocked(now int64) {
	for range 4 {
		if f.oldest == nil || f.oldest.until > now {
			break
		}
		f.dropLocked(f.oldest)
	}
	for len(f.keys) >= f.max && f.oldest != nil {
		f.dropLocked(f.oldest)
	}
}

func (f *Fleet) dropLocked(e *entry) {
	f.unlinkLocked(e)
	delete(f.keys, e.key)
}

func (f *Fleet) pushLocked(e *entry) {
	e.older, e.newer = f.newest, nil
	if f.newest != nil {
		f.newest.newer = e
	}
	f.newest = e
	if f.oldest == nil {
		f.oldest = e
	}
}

func (f *Fleet) unlinkLocked(e *entry) {
	if e.newer != nil {
		e.newer.older = e.older
	} else if f.newest == e {
		f.newest = e.older
	}
	if e.older != nil {
		e.older.newer = e.newer
	} else if f.oldest == e {
		f.oldest = e.newer
	}
	e.newer, e.older = nil, nil
}
