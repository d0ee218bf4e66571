package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// A caller records the result it gave its agent for a call no executor
// ended (EXECUTOR_LOST, a deadline with no executor to tell): the audit
// trail then holds a terminal record for every call. It does not publish
// into the audit stream itself: it sends the record to an executor on
// events.CallerRecordSubject, and the executor checks it and records it
// on events.CallerResultSubject of the principal the bus proved. So what
// a caller puts into the trail is bounded like its calls (budget.go),
// and its records can only be what a caller's record is:
//   - a Result that decodes, of at most maxCallerRecord bytes;
//   - naming the caller itself (or one it speaks for: principal/…);
//   - a failure a caller gives on its own: EXECUTOR_LOST, TIMEOUT or
//     CANCELLED, never a success or a verdict;
//   - one per call: a second, different record of the same id is refused
//     (the same record sent again is acknowledged, not kept twice).

// maxCallerRecord bounds a caller's record: the few sentences of the
// failure it told its agent.
const maxCallerRecord = 16 << 10

// callerRecordsAtOnce bounds the records being stored at once; past it a
// caller is told to send again.
const callerRecordsAtOnce = 64

// callerGaveUpTypes are the failures a caller's record may carry.
var callerGaveUpTypes = []events.ErrorType{events.ErrExecutorLost, events.ErrTimeout, events.ErrCancelled}

func (e *Executor) handleCallerRecord(m *nats.Msg) {
	principal := e.principalOf(m, false)
	refuse := func(format string, args ...any) {
		if m.Reply != "" {
			_ = m.Respond([]byte("refused: " + fmt.Sprintf(format, args...)))
		}
	}
	if len(m.Data) > maxCallerRecord {
		refuse("a caller's record is at most %d bytes; this one has %d", maxCallerRecord, len(m.Data))
		return
	}
	res, err := events.Decode[events.Result](m.Data)
	if err != nil {
		refuse("%v", err)
		return
	}
	if _, err := events.Caller(res.Sender, principal, principal != events.Unproven); err != nil {
		refuse("%v", err)
		return
	}
	if res.Error == nil || !slices.Contains(callerGaveUpTypes, res.Error.Type) {
		refuse("a caller records only a call it gave up on, with one of %v", callerGaveUpTypes)
		return
	}
	if ok, _ := e.budget.admit(principal, len(m.Data), time.Now()); !ok {
		refuse("this caller had more recorded lately than one caller may; send it again later")
		return
	}
	select {
	case e.callerRecords <- struct{}{}:
	default:
		refuse("the executor is storing many records; send it again")
		return
	}
	e.mu.Lock()
	select {
	case <-e.stopping:
		e.mu.Unlock()
		<-e.callerRecords
		refuse("the executor is stopping; send it again")
		return
	default:
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		defer func() { <-e.callerRecords }()
		ctx, cancel := context.WithTimeout(context.Background(), idWait)
		defer cancel()
		if err := e.keepCallerRecord(ctx, principal, res.InvocationID, m.Data); err != nil {
			refuse("%v", err)
			return
		}
		_ = m.Respond([]byte(events.CallerRecordKept))
	}()
}

// keepCallerRecord records a caller's record of call id, once.
func (e *Executor) keepCallerRecord(ctx context.Context, principal, id string, data []byte) error {
	key := IDKey(principal, id) + ".caller"
	sum := sha256.Sum256(data)
	err := bus.RetryWhile(ctx, bus.Transient, func() error {
		_, err := e.ids.kv.Create(ctx, key, sum[:])
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		if old, gerr := e.ids.kv.Get(ctx, key); gerr != nil || !bytes.Equal(old.Value(), sum[:]) {
			return fmt.Errorf("call %q has a caller's record already", id)
		}
		// The same record again: stored before, or being stored; the
		// message id makes the stream keep it once.
	} else if err != nil {
		return fmt.Errorf("the executor could not check for an earlier record: %w", err)
	}
	return bus.RecordOnce(ctx, e.nc, events.CallerResultSubject(principal), "caller-result."+principal+"."+id, data)
}
