package executor

import (
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// The executor's intake of new calls is its membership of the queue
// groups that hand out invocations and batches. A call's records are sent
// without waiting (bus.Recorder), up to a window of records the audit
// stream has not acknowledged yet; a full window makes every record wait
// for room. So when the window is full the executor leaves those groups:
// the fleet's other executors take the calls, /readyz says why
// (TrailHealth), and the calls it has go on, their records sent again
// until stored. It joins again once half the window is acknowledged. It
// looks at the window as often as at the stream's fill (watchTrail).
//
// The subjects the executor alone serves stay: calls forwarded to it by
// name, cancels, claims, output reads. Nothing else of a call waits on
// the window but its records.

// queueSub is one subscription of the intake, made again on joining.
type queueSub struct {
	subject, queue string
	handle         nats.MsgHandler
}

// intake holds the intake's subscriptions.
type intake struct {
	nc      *nats.Conn
	mu      sync.Mutex
	specs   []queueSub
	subs    []*nats.Subscription // nil while left
	left    bool
	stopped bool
}

// add subscribes spec now and keeps it for joining again.
func (in *intake) add(spec queueSub) error {
	sub, err := in.subscribe(spec)
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.specs = append(in.specs, spec)
	in.subs = append(in.subs, sub)
	return nil
}

func (in *intake) subscribe(spec queueSub) (*nats.Subscription, error) {
	sub, err := in.nc.QueueSubscribe(spec.subject, spec.queue, spec.handle)
	if err != nil {
		return nil, fmt.Errorf("executor: subscribe %s: %w", spec.subject, err)
	}
	// Calls run on their own goroutines; the subscription only hands
	// them out, so its pending limits can stay generous.
	_ = sub.SetPendingLimits(1<<20, 1<<30)
	return sub, nil
}

// leave drains the intake's subscriptions: what reached the executor
// already is taken, nothing more comes. It reports whether it left now.
func (in *intake) leave() (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.left || in.stopped {
		return false, nil
	}
	in.left = true
	return true, in.drainLocked()
}

// join subscribes the intake again. It reports whether it joined now.
func (in *intake) join() (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.left || in.stopped {
		return false, nil
	}
	var errs []error
	for _, spec := range in.specs {
		sub, err := in.subscribe(spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		in.subs = append(in.subs, sub)
	}
	in.left = false
	return true, errors.Join(errs...)
}

// stop drains the intake for good: no join after it.
func (in *intake) stop() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.stopped = true
	return in.drainLocked()
}

func (in *intake) drainLocked() error {
	var errs []error
	for _, sub := range in.subs {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	in.subs = nil
	return errors.Join(errs...)
}

// isLeft reports whether the executor left its queue groups.
func (in *intake) isLeft() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.left
}

// pending reports whether an invocation waits in one of the intake's
// subscriptions (behind).
func (in *intake) pending() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, sub := range in.subs {
		if n, _, err := sub.Pending(); err == nil && n > 0 {
			return true
		}
	}
	return false
}

// followWindow leaves the intake when the recorder's window is full and
// joins it again once half of it is acknowledged (see above).
func (e *Executor) followWindow() {
	pending, size := e.rec.Window()
	switch {
	case pending >= size:
		if left, err := e.intake.leave(); left {
			e.log.Error("the audit stream is not acknowledging records: leaving the queue groups until it does, so that other executors take the calls",
				"unacknowledged", pending, "window", size, "err", err)
		}
	case pending <= size/2 && e.intake.isLeft():
		if joined, err := e.intake.join(); joined {
			e.log.Info("the audit stream acknowledges records again: taking calls", "unacknowledged", pending, "window", size, "err", err)
		}
	}
}
