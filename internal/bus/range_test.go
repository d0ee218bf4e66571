package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// publishAll puts n messages in the audit stream, the i-th on
// subjects[i%len(subjects)] with i as its data, and waits until it holds
// them.
func publishAll(t *testing.T, b *bus.Bus, n int, subjects ...string) {
	t.Helper()
	nc := b.Conn()
	for i := range n {
		if err := nc.Publish(subjects[i%len(subjects)], []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 20*time.Second, "the stream holds every message", func() bool {
		s, err := b.JetStream().Stream(context.Background(), events.AuditStream)
		return err == nil && s.CachedInfo().State.Msgs >= uint64(n)
	})
}

// readAll reads r of the audit stream and returns the messages' data as
// numbers.
func readAll(t *testing.T, b *bus.Bus, r bus.Range) ([]int, uint64) {
	t.Helper()
	var got []int
	last, err := bus.Read(context.Background(), b.JetStream(), events.AuditStream, r, func(m *bus.StoredMsg) error {
		i, err := strconv.Atoi(string(m.Data))
		if err != nil {
			return err
		}
		got = append(got, i)
		return nil
	})
	if err != nil {
		t.Fatalf("read %+v: %v", r, err)
	}
	return got, last
}

// A read takes the subjects asked for, in stream order, across many
// pages, and nothing else; bounds, a start time and a stop hold.
func TestReadTakesItsSubjectsInOrder(t *testing.T) {
	b := bustest.Start(t, "")
	const n = 9000 // pages of 2,000: several per subject
	publishAll(t, b, n, "tool.test.a", "tool.test.b", "tool.test.big")
	want := func(from, to int) []int {
		var out []int
		for i := from; i <= to; i++ {
			if i%3 != 2 {
				out = append(out, i)
			}
		}
		return out
	}
	got, last := readAll(t, b, bus.Range{Subjects: []string{"tool.test.a", "tool.test.b"}})
	if !slices.Equal(got, want(0, n-1)) || last != n-1 {
		t.Fatalf("two subjects of three: %d messages up to sequence %d, want %d up to %d", len(got), last, len(want(0, n-1)), n-1)
	}
	// Subjects that overlap give each message once.
	if got, _ := readAll(t, b, bus.Range{Subjects: []string{"tool.test.*", "tool.test.a"}}); len(got) != n || !slices.IsSorted(got) {
		t.Errorf("overlapping subjects: %d messages, want %d once each, in order", len(got), n)
	}
	// Sequences are the data plus one.
	if got, last := readAll(t, b, bus.Range{From: 101, To: 4100}); len(got) != 4000 || got[0] != 100 || last != 4100 {
		t.Errorf("every subject from 101 to 4100: %d messages from %v, last %d", len(got), got[:1], last)
	}
	if got, _ := readAll(t, b, bus.Range{From: 2, To: 20, Subjects: []string{"tool.test.b"}}); !slices.Equal(got, []int{1, 4, 7, 10, 13, 16, 19}) {
		t.Errorf("one subject from 2 to 20: %v", got)
	}
	if got, last := readAll(t, b, bus.Range{From: n + 1}); len(got) != 0 || last != 0 {
		t.Errorf("after the last: %v, last %d", got, last)
	}

	// The first message at or after a time, as a checkpoint's verify
	// looks for it.
	time.Sleep(10 * time.Millisecond)
	since := time.Now()
	publishAll(t, b, n+3, "tool.test.later")
	var first uint64
	_, err := bus.Read(context.Background(), b.JetStream(), events.AuditStream, bus.Range{Since: since}, func(m *bus.StoredMsg) error {
		first = m.Sequence
		return bus.ErrStop
	})
	if err != nil || first != n+1 {
		t.Errorf("the first since a time: %d, %v; want %d", first, err, n+1)
	}
	if got, _ := readAll(t, b, bus.Range{Since: since, Subjects: []string{"tool.test.a"}}); len(got) != 0 {
		t.Errorf("a subject since a time after its last: %v", got)
	}
	boom := errors.New("boom")
	if last, err := bus.Read(context.Background(), b.JetStream(), events.AuditStream, bus.Range{}, func(m *bus.StoredMsg) error {
		if m.Sequence == 3 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) || last != 2 {
		t.Errorf("fn's error: %v after %d", err, last)
	}
}

// The leader's answers: the last message of a subject, the next one
// after a sequence.
func TestLeaderMessages(t *testing.T) {
	b := bustest.Start(t, "")
	publishAll(t, b, 10, "tool.test.a", "tool.test.b")
	ctx := context.Background()
	m, err := bus.LastMsg(ctx, b.JetStream(), events.AuditStream, "tool.test.a")
	if err != nil || string(m.Data) != "8" || m.Subject != "tool.test.a" || m.Time.IsZero() {
		t.Errorf("last of a: %+v %v", m, err)
	}
	if m, err := bus.NextMsg(ctx, b.JetStream(), events.AuditStream, 3, "tool.test.b"); err != nil || string(m.Data) != "3" || m.Sequence != 4 {
		t.Errorf("next b from 3: %+v %v", m, err)
	}
	if _, err := bus.NextMsg(ctx, b.JetStream(), events.AuditStream, 11, ""); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("next after the last: %v", err)
	}
	if _, err := bus.LastMsg(ctx, b.JetStream(), events.AuditStream, "tool.test.none"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("last of nothing: %v", err)
	}
}

// An audit stream made before readers read it by direct get is given
// direct get when its owner starts again, and the stream of
// confirmations beside it, which copies the confirmations it holds.
func TestAnExistingAuditStreamIsGivenDirectGet(t *testing.T) {
	dir := t.TempDir()
	b := bustest.Start(t, dir)
	ctx := context.Background()
	js := b.JetStream()
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect {
		t.Fatal("a new audit stream does not allow direct get")
	}
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, events.ConfirmStream); err != nil {
		t.Fatal(err)
	}
	publishAll(t, b, 4, events.SubjectConfirm, "tool.test.a")
	bustest.Stop(t, b)

	b = bustest.Start(t, dir)
	js = b.JetStream()
	if s, err := js.Stream(ctx, events.AuditStream); err != nil || !s.CachedInfo().Config.AllowDirect {
		t.Fatalf("after the owner's restart: %v", err)
	}
	if got, _ := readAll(t, b, bus.Range{}); len(got) != 4 {
		t.Errorf("read by direct get: %v", got)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the confirmations are copied", func() bool {
		s, err := js.Stream(ctx, events.ConfirmStream)
		return err == nil && s.CachedInfo().State.Msgs == 2
	})
}

// In a cluster, each stream keeps its copies and answers direct gets;
// turned off on the replicated audit stream, direct get is turned on
// again by a part that connects, and the confirmations come to their
// stream.
func TestDirectGetInACluster(t *testing.T) {
	nodes := bustest.StartCluster(t, 3, 3)
	ctx := context.Background()
	js := nodes[0].JetStream()
	for _, name := range []string{events.AuditStream, events.ConfirmStream} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := s.CachedInfo().Config; !c.AllowDirect || c.Replicas != 3 {
			t.Errorf("%s: direct %v, %d copies", name, c.AllowDirect, c.Replicas)
		}
	}
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	c := bustest.Connect(t, nodes[1])
	if s, err := js.Stream(ctx, events.AuditStream); err != nil || !s.CachedInfo().Config.AllowDirect {
		t.Fatalf("after a part connected: %v", err)
	}
	publishAll(t, c, 30, events.SubjectConfirm, "tool.test.a", "tool.test.b")
	for _, n := range nodes {
		n := n
		testkit.EventuallyWithin(t, 20*time.Second, fmt.Sprintf("every message read through %s", n.Conn().ConnectedServerName()), func() bool {
			got, err := readQuietly(n, bus.Range{Subjects: []string{"tool.test.a", "tool.test.b"}})
			return err == nil && len(got) == 20
		})
	}
	testkit.EventuallyWithin(t, 20*time.Second, "the confirmations are copied", func() bool {
		var n int
		_, err := bus.Read(ctx, js, events.ConfirmStream, bus.Range{}, func(*bus.StoredMsg) error { n++; return nil })
		return err == nil && n == 10
	})
}

// readQuietly is readAll that returns its error.
func readQuietly(b *bus.Bus, r bus.Range) ([]string, error) {
	var got []string
	_, err := bus.Read(context.Background(), b.JetStream(), events.AuditStream, r, func(m *bus.StoredMsg) error {
		got = append(got, string(m.Data))
		return nil
	})
	return got, err
}
