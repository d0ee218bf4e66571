// Package audittest reads the audit stream in tests: what it holds of the
// results of each invocation.
package audittest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// Count is what the audit stream holds of one invocation's results: its
// terminal results (exactly one, when all is well) and its late ones.
type Count struct{ Terminal, Late int }

// ResultsOf waits until the audit stream holds a result for each of ids,
// for at most a minute, and then counts as Results does. Results reads the
// stream as it is when called, and a result published just before (by a
// caller giving up, on a connection of its own) may not be stored yet:
// the stream takes in published messages on its own goroutine.
func ResultsOf(t testing.TB, js jetstream.JetStream, ids []string) map[string]*Count {
	t.Helper()
	var counts map[string]*Count
	testkit.Poll(time.Minute, func() bool {
		counts = Results(t, js, true)
		for _, id := range ids {
			if counts[id] == nil {
				return false
			}
		}
		return true
	})
	return counts
}

// Results reads every tool.result in the audit stream, up to the last one
// there when it is called, with an ordered consumer, and counts them per
// invocation id. With mayBeEmpty set, an empty stream gives an empty map;
// otherwise it fails the test.
func Results(t testing.TB, js jetstream.JetStream, mayBeEmpty bool) map[string]*Count {
	t.Helper()
	// Results are the executors' (SubjectResult) and the callers' own
	// records of calls no executor could end (CallerResultSubject).
	subjects := []string{events.SubjectResult, events.CallerResultSubject("*")}
	var counts map[string]*Count
	scanRetrying(t, js, subjects, mayBeEmpty, func() { counts = map[string]*Count{} }, func(data []byte) error {
		res, err := events.Decode[events.Result](data)
		if err != nil {
			return fmt.Errorf("a result in the audit stream does not decode: %w", err)
		}
		c := counts[res.InvocationID]
		if c == nil {
			c = &Count{}
			counts[res.InvocationID] = c
		}
		if res.Late {
			c.Late++
		} else {
			c.Terminal++
		}
		return nil
	})
	return counts
}

// Invocations reads every record of an invocation in the audit stream
// (what the executors took), as Results does, and counts them per id.
func Invocations(t testing.TB, js jetstream.JetStream) map[string]int {
	t.Helper()
	var counts map[string]int
	scanRetrying(t, js, []string{events.SubjectInvoke + ".*"}, true, func() { counts = map[string]int{} }, func(data []byte) error {
		inv, err := events.Decode[events.Invocation](data)
		if err != nil {
			return fmt.Errorf("an invocation in the audit stream does not decode: %w", err)
		}
		counts[inv.ID]++
		return nil
	})
	return counts
}

// scanRetrying calls each for every message on subjects, up to the last
// one there, after reset; a read that fails is made again, from reset.
func scanRetrying(t testing.TB, js jetstream.JetStream, subjects []string, mayBeEmpty bool, reset func(), each func([]byte) error) {
	t.Helper()
	// In a cluster that just lost a node, the stream's new leader may not
	// answer reads for a while: a read that fails is made again.
	var err error
	if !testkit.Poll(time.Minute, func() bool {
		reset()
		var empty bool
		empty, err = scan(js, subjects, each)
		if err == nil && empty && !mayBeEmpty {
			t.Fatal("nothing on " + strings.Join(subjects, ", ") + " in the audit stream")
		}
		return err == nil
	}) {
		t.Fatalf("reading the audit stream: %v", err)
	}
}

func scan(js jetstream.JetStream, subjects []string, each func([]byte) error) (empty bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		return false, err
	}
	var last uint64
	for _, subject := range subjects {
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		last = max(last, m.Sequence)
	}
	if last == 0 {
		return true, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: subjects, InactiveThreshold: 30 * time.Second})
	if err != nil {
		return false, err
	}
	// No-wait fetches, drained to their end: a fetch left waiting would
	// outlive the read (and the test's leak check).
	idle := time.Now()
	for tries := 0; ; {
		batch, err := cons.FetchNoWait(2000)
		if err != nil {
			return false, err
		}
		n, done := 0, false
		var failed error
		for m := range batch.Messages() {
			n++
			if done || failed != nil {
				continue
			}
			if failed = each(m.Data()); failed != nil {
				continue
			}
			if meta, err := m.Metadata(); err != nil || meta.Sequence.Stream >= last {
				done = true
			}
		}
		if failed != nil {
			return false, failed
		}
		if done {
			return false, nil
		}
		err = batch.Error()
		if n == 0 && errors.Is(err, nats.ErrNoResponders) && tries < 20 {
			// The consumer is on another node of a cluster, whose
			// interest has not reached this connection's node yet.
			tries++
			time.Sleep(time.Duration(tries) * 50 * time.Millisecond)
			continue
		}
		if err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return false, err
		}
		if n > 0 {
			idle = time.Now()
		} else if time.Since(idle) > 10*time.Second {
			return false, errors.New("the audit stream ended before its last message")
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// HookRuns waits until the audit stream holds at least want tool.hook
// events about invocation id, for at most a minute (events are stored on
// the stream's own goroutine), and returns those it holds then, in order.
func HookRuns(t testing.TB, js jetstream.JetStream, id string, want int) []*events.HookRun {
	t.Helper()
	var runs []*events.HookRun
	testkit.Poll(time.Minute, func() bool {
		runs = nil
		for _, r := range Envelopes[events.HookRun](t, js, events.SubjectHook) {
			if r.InvocationID == id {
				runs = append(runs, r)
			}
		}
		return len(runs) >= want
	})
	return runs
}

// Envelopes reads every envelope of type T on subject in the audit stream,
// up to the last one there when it is called; none when it holds none.
func Envelopes[T any, PT interface {
	*T
	events.Envelope
}](t testing.TB, js jetstream.JetStream, subject string) []PT {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return nil // none yet
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []PT
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("reading the audit stream: %v", err)
		}
		e, err := events.Decode[T, PT](m.Data())
		if err != nil {
			t.Fatalf("an envelope on %s in the audit stream does not decode: %v", subject, err)
		}
		out = append(out, e)
		if meta, err := m.Metadata(); err != nil || meta.Sequence.Stream >= last.Sequence {
			return out
		}
	}
}

// Decisions reads every decision event in the audit stream: those
// published on their own and those folded into the executors' records of
// results (events.Result.Decision), up to the last one there when it is
// called.
func Decisions(t testing.TB, js jetstream.JetStream) []*events.Decision {
	t.Helper()
	out := Envelopes[events.Decision](t, js, events.SubjectDecision)
	for _, r := range Envelopes[events.Result](t, js, events.SubjectResult) {
		if r.Decision != nil {
			out = append(out, r.Decision)
		}
	}
	return out
}

// SmallTrail makes the audit stream keep 64 KiB and let its oldest go
// when full, as its age limit would in time: a test pushes events out by
// publishing more. It returns the stream.
func SmallTrail(t testing.TB, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxBytes, cfg.Discard = 64<<10, jetstream.DiscardOld
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return s
}
