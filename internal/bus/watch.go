package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WatchCatchUp is how often a Watch reads what its bucket holds beyond
// the last change it gave, and checks that it is in step with it.
var WatchCatchUp = 2 * time.Second

// WatchGrace is how long a Watch may fail to read its bucket, or stay
// behind it, before Health reports it: a reconnection or a cluster
// electing a leader takes a few seconds, and is no news.
var WatchGrace = 10 * time.Second

// Watch follows bucket like its WatchAll, for a reader that may only
// direct-get it: every key's last value, then a nil entry, then each
// change as the bucket republishes it on live + "." + key, which only
// those stored after the values read are taken from. ctx bounds the
// first read; Stop ends the watch, and nothing else does.
//
// A republished change is a plain message: one sent while the
// connection reconnects, or while a starting cluster's routes carry no
// interest yet, is lost, and the first read may come from a copy that
// lags. The watch stays true to the bucket all the same:
//
//   - A bucket's messages are numbered without holes, and each is
//     republished. A change that comes after a hole is given only once
//     what the hole held has been read from the bucket, so a lost change
//     is never passed over: passed over, it would stay lost until its key
//     changed again, which for a catalogue shard may be never.
//   - Every WatchCatchUp the watch reads what the bucket holds after the
//     last change it gave, for changes lost at the end.
//   - A bucket whose last number fell below the last change given, or
//     that was made anew, is read whole again: its numbers no longer mean
//     what they did.
//   - A bucket that keeps one value per key holds one message per key:
//     when it holds another number of keys than the watch has given, the
//     watch reads it whole again and gives the difference.
//
// Each of these is logged when it happens; Health says when the watch
// is out of step for longer than WatchGrace.
func Watch(ctx context.Context, js jetstream.JetStream, bucket, live string, log *slog.Logger) (*Watcher, error) {
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{js: js, bucket: bucket, live: live, stream: "KV_" + bucket, filter: "$KV." + bucket + ".>", log: log,
		updates: make(chan jetstream.KeyValueEntry, 256), stopped: make(chan struct{}), changes: make(chan struct{}, 1),
		given: make(map[string]uint64)}
	// Changes are taken from before the read, so none falls between;
	// they wait in the subscription's queue, which has no bound: a
	// change dropped would be a key left stale.
	sub, err := js.Conn().Subscribe(live+".>", func(m *nats.Msg) {
		w.mu.Lock()
		w.waiting = append(w.waiting, m)
		w.mu.Unlock()
		select {
		case w.changes <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	// A bucket just made in a cluster may have no direct-get responder
	// for a while: a watcher that starts then waits for one. When the
	// bucket was made is known from the start: one made anew keeps its
	// numbers from 1, and may hold as many as the old one.
	var msgs []*StoredMsg
	err = retryTransient(ctx, func() error {
		s, err := js.Stream(ctx, w.stream)
		if err != nil {
			return err
		}
		w.created = s.CachedInfo().Created
		msgs, w.upTo, err = LastOfEach(ctx, js, w.stream, w.filter)
		return err
	})
	if err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	w.done.Add(1)
	go w.run(sub, msgs)
	return w, nil
}

// Watcher is a running Watch. It implements jetstream.KeyWatcher; its
// methods are safe for concurrent use.
type Watcher struct {
	js                           jetstream.JetStream
	bucket, live, stream, filter string
	log                          *slog.Logger

	updates  chan jetstream.KeyValueEntry
	stopped  chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup

	// waiting are the republished changes not yet taken, in the order
	// they came; changes says there are some.
	mu      sync.Mutex
	waiting []*nats.Msg
	changes chan struct{}

	// The state of the watch, the run goroutine's alone: the number of
	// the last message of the bucket up to which every message was given
	// (upTo), the number of each key's last message given (deletions
	// too), when the bucket's stream was made, and whether a read failed
	// since the last tick (holes then wait for the next one).
	upTo       uint64
	given      map[string]uint64
	created    time.Time
	readFailed bool

	hmu    sync.Mutex
	health watchHealth
}

// watchHealth is what Health reports from.
type watchHealth struct {
	failed      error // the last read of the bucket failed so
	failedSince time.Time
	behindSince time.Time // zero: in step at the last check
	at, last    uint64    // upTo, and the bucket's last number, then
	stopped     bool
}

// Updates implements jetstream.KeyWatcher.
func (w *Watcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop implements jetstream.KeyWatcher; it waits for the watcher's
// goroutine to end.
func (w *Watcher) Stop() error {
	w.stopOnce.Do(func() { close(w.stopped) })
	w.done.Wait()
	return nil
}

// Health reports how the watch is out of step with its bucket, nil when
// it is not: it has failed to read the bucket, or has stayed behind it,
// for longer than WatchGrace, or it was stopped.
func (w *Watcher) Health() error {
	w.hmu.Lock()
	h := w.health
	w.hmu.Unlock()
	now := time.Now()
	var errs []error
	if h.stopped {
		errs = append(errs, fmt.Errorf("the watch of bucket %s has stopped", w.bucket))
	}
	if h.failed != nil && now.Sub(h.failedSince) >= WatchGrace {
		errs = append(errs, fmt.Errorf("bucket %s not read since %s: %w", w.bucket, h.failedSince.Format(time.RFC3339), h.failed))
	}
	if !h.behindSince.IsZero() && now.Sub(h.behindSince) >= WatchGrace {
		errs = append(errs, fmt.Errorf("behind bucket %s since %s: at #%d, the bucket at #%d", w.bucket, h.behindSince.Format(time.RFC3339), h.at, h.last))
	}
	return errors.Join(errs...)
}

// run gives the values read at the start, then the changes, until Stop.
func (w *Watcher) run(sub *nats.Subscription, initial []*StoredMsg) {
	defer w.done.Done()
	defer close(w.updates)
	defer sub.Unsubscribe()
	defer func() {
		w.hmu.Lock()
		w.health.stopped = true
		w.hmu.Unlock()
	}()
	for _, m := range initial {
		if !w.give(m) {
			return
		}
	}
	if !w.send(nil) {
		return
	}
	tick := time.NewTicker(WatchCatchUp)
	defer tick.Stop()
	// Stop ends a read under way too.
	alive, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-w.stopped:
			stop()
		case <-alive.Done():
		}
	}()
	for {
		select {
		case <-w.stopped:
			return
		case <-tick.C:
			w.readFailed = false
			if !w.check(alive) {
				return
			}
		case <-w.changes:
			if !w.takeWaiting(alive) {
				return
			}
		}
	}
}

// takeWaiting gives the republished changes that came, in order. A
// change after a hole waits until what the hole held is read; if that
// read fails, the changes left are dropped, as the next tick reads them
// from the bucket.
func (w *Watcher) takeWaiting(ctx context.Context) bool {
	w.mu.Lock()
	batch := w.waiting
	w.waiting = nil
	w.mu.Unlock()
	for _, m := range batch {
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil || seq <= w.upTo {
			continue
		}
		if seq != w.upTo+1 {
			if w.readFailed {
				return true
			}
			w.log.Info("a change of a bucket was not heard; reading it from the bucket", "bucket", w.bucket, "at", w.upTo, "heard", seq)
			ok, live := w.catchUp(ctx, 0)
			if !live {
				return false
			}
			if !ok || seq != w.upTo+1 {
				if seq <= w.upTo {
					continue
				}
				return true
			}
		}
		at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		key := strings.TrimPrefix(m.Subject, w.live+".")
		if !w.give(&StoredMsg{Subject: "$KV." + w.bucket + "." + key, Sequence: seq, Time: at, Header: m.Header, Data: m.Data}) {
			return false
		}
	}
	return true
}

// catchUp gives what the bucket holds after upTo, up to its message
// numbered to (0: its last now). ok says the read worked; live is false
// once the watch stops.
func (w *Watcher) catchUp(ctx context.Context, to uint64) (ok, live bool) {
	rctx, cancel := context.WithTimeout(ctx, pageWait)
	defer cancel()
	var msgs []*StoredMsg
	_, err := Read(rctx, w.js, w.stream, Range{From: w.upTo + 1, To: to, Subjects: []string{w.filter}}, func(m *StoredMsg) error {
		msgs = append(msgs, m)
		return nil
	})
	for _, m := range msgs {
		if !w.give(m) {
			return false, false
		}
	}
	if err != nil {
		w.readFailed = true
		w.failed(err)
		return false, true
	}
	return true, true
}

// check is a tick's look at the bucket: it catches up with what the
// bucket holds, and reads it whole again when the bucket went back, was
// made anew, or holds another number of keys than were given.
func (w *Watcher) check(ctx context.Context) bool {
	ictx, cancel := context.WithTimeout(ctx, pageWait)
	s, err := w.js.Stream(ictx, w.stream)
	cancel()
	if err != nil {
		w.readFailed = true
		w.failed(err)
		return true
	}
	info := s.CachedInfo()
	state := info.State
	switch {
	case !info.Created.Equal(w.created):
		return w.resync(ctx, info.Created, state.Msgs, "the bucket was made anew")
	case state.LastSeq < w.upTo:
		return w.resync(ctx, info.Created, state.Msgs, fmt.Sprintf("the bucket went back from #%d to #%d", w.upTo, state.LastSeq))
	}
	// Nothing is left before the bucket's first message (an empty
	// bucket's first is past its last): no read can give it, and the
	// watch is in step up to there.
	if state.FirstSeq > w.upTo+1 {
		w.upTo = state.FirstSeq - 1
	}
	if state.LastSeq > w.upTo {
		ok, live := w.catchUp(ctx, state.LastSeq)
		if !live {
			return false
		}
		if !ok {
			return true
		}
	}
	// One message per key: as many keys given as the bucket holds. The
	// counts are compared only in step, of the same view of the bucket.
	if w.upTo == state.LastSeq && info.Config.MaxMsgsPerSubject == 1 && uint64(len(w.given)) != state.Msgs {
		return w.resync(ctx, time.Time{}, state.Msgs, fmt.Sprintf("%d keys given, the bucket holds %d", len(w.given), state.Msgs))
	}
	w.hmu.Lock()
	w.health.failed = nil
	w.health.at, w.health.last = w.upTo, state.LastSeq
	switch {
	case w.upTo >= state.LastSeq:
		w.health.behindSince = time.Time{}
	case w.health.behindSince.IsZero():
		w.health.behindSince = time.Now()
	}
	w.hmu.Unlock()
	return true
}

// resync reads the bucket whole and gives what differs from what was
// given: each key whose last message is another, and a deletion of each
// key the bucket no longer holds. When the bucket's numbers no longer
// mean what they did (it was made anew, at created, or went back), every
// key's value is given, and created is noted once it has been. held is
// how many messages the bucket's leader says it holds.
func (w *Watcher) resync(ctx context.Context, created time.Time, held uint64, why string) bool {
	renumbered := !created.IsZero()
	rctx, cancel := context.WithTimeout(ctx, pageWait)
	msgs, upTo, err := LastOfEach(rctx, w.js, w.stream, w.filter)
	cancel()
	if err != nil {
		w.failed(fmt.Errorf("%s, and reading it whole failed: %w", why, err))
		return true
	}
	if !renumbered && (upTo < w.upTo && len(msgs) > 0 || len(msgs) == 0 && held > 0) {
		// A copy of a cluster's stream that lags answered: it would
		// take back keys made since. The next tick reads again.
		return true
	}
	old := w.given
	w.given = make(map[string]uint64, len(msgs))
	changed := 0
	for _, m := range msgs {
		key := strings.TrimPrefix(m.Subject, "$KV."+w.bucket+".")
		seq, had := old[key]
		delete(old, key)
		if had && seq == m.Sequence && !renumbered {
			w.given[key] = seq
			continue
		}
		changed++
		if !w.give(m) {
			return false
		}
	}
	for key := range old {
		changed++
		if !w.send(&entry{bucket: w.bucket, key: key, revision: upTo, created: time.Now(), op: jetstream.KeyValueDelete}) {
			return false
		}
	}
	w.upTo = max(upTo, w.upToOf(msgs))
	if renumbered {
		w.created = created
	}
	w.log.Warn("a watch was out of step with its bucket; read it whole again", "bucket", w.bucket, "why", why, "changes", changed)
	w.hmu.Lock()
	w.health.failed = nil
	w.health.behindSince = time.Time{}
	w.hmu.Unlock()
	return true
}

// upToOf is the number of the last of msgs, 0 for none.
func (w *Watcher) upToOf(msgs []*StoredMsg) uint64 {
	if len(msgs) == 0 {
		return 0
	}
	return msgs[len(msgs)-1].Sequence
}

// give gives m as its key's change and counts it given.
func (w *Watcher) give(m *StoredMsg) bool {
	key := strings.TrimPrefix(m.Subject, "$KV."+w.bucket+".")
	w.given[key] = m.Sequence
	w.upTo = m.Sequence
	return w.send(entryOf(w.bucket, key, m.Sequence, m.Time, m.Header, m.Data))
}

// failed notes that a read of the bucket failed with err.
func (w *Watcher) failed(err error) {
	w.hmu.Lock()
	defer w.hmu.Unlock()
	if w.health.failed == nil {
		w.health.failedSince = time.Now()
	}
	w.health.failed = err
}

func (w *Watcher) send(e jetstream.KeyValueEntry) bool {
	select {
	case w.updates <- e:
		return true
	case <-w.stopped:
		return false
	}
}
