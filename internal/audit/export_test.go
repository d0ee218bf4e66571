package audit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// collector is a sink that keeps the lines it is given.
type collector struct {
	mu    sync.Mutex
	lines []audit.Line
}

func (c *collector) Write(_ context.Context, batch []audit.Line) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, batch...)
	return nil
}

// seqs are the sequences of the lines kept so far.
func (c *collector) seqs() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]uint64, len(c.lines))
	for i, l := range c.lines {
		out[i] = l.Seq
	}
	return out
}

// counting is a sink that counts what it passes on.
type counting struct {
	audit.Sink
	mu sync.Mutex
	n  int
}

func (c *counting) Write(ctx context.Context, batch []audit.Line) error {
	err := c.Sink.Write(ctx, batch)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.n += len(batch)
	}
	return err
}

func (c *counting) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// following is a Follow running on its own goroutine.
type following struct {
	cancel context.CancelFunc
	done   chan error
}

func follow(js jetstream.JetStream, cfg audit.FollowConfig, sink audit.Sink) *following {
	ctx, cancel := context.WithCancel(context.Background())
	f := &following{cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- audit.Follow(ctx, js, cfg, sink) }()
	return f
}

// stop stops the follow as a signal does, and returns what it returned.
func (f *following) stop(t *testing.T) error {
	t.Helper()
	f.cancel()
	select {
	case err := <-f.done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Follow did not return within a minute of its stop")
		return nil
	}
}

// since is a start before every event of a test's bus.
var since = time.Unix(1, 0)

// publish stores an event of type e on subject.
func publish(t testing.TB, js jetstream.JetStream, subject string, e events.Envelope) uint64 {
	t.Helper()
	data, err := events.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return publishRaw(t, js, subject, data)
}

func publishRaw(t testing.TB, js jetstream.JetStream, subject string, data []byte) uint64 {
	t.Helper()
	ack, err := js.Publish(context.Background(), subject, data)
	if err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
	return ack.Sequence
}

// produce publishes the events of a session on the trail until stop is
// closed, with messages of subjects an export does not write among them
// (a call's output, a catalogue change).
func produce(js jetstream.JetStream, stop <-chan struct{}) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if err := produceOne(js, i); err != nil {
			return err
		}
	}
}

// produceOne publishes the i-th message of produce's session.
func produceOne(js jetstream.JetStream, i int) error {
	id := fmt.Sprintf("inv-%04d", i)
	var (
		subject string
		e       events.Envelope
		data    []byte
	)
	switch i % 5 {
	case 0:
		subject, e = events.SubjectInvoke+".agent", &events.Invocation{Header: events.Header{ID: id, Sender: events.Identity{ID: "agent"}}, Tool: "read_file"}
	case 1:
		subject, e = events.SubjectStep, &events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: id, Tool: "read_file", Step: "validated"}
	case 2:
		subject, data = events.SubjectProgressPrefix+id, []byte("some output")
	case 3:
		subject, e = events.SubjectResult, &events.Result{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: id}
	case 4:
		subject, data = events.SubjectCatalogChanged, []byte(`{}`)
	}
	if e != nil {
		var err error
		if data, err = events.Encode(e); err != nil {
			return err
		}
	}
	_, err := js.Publish(context.Background(), subject, data)
	return err
}

// produceN publishes the first n messages of produce's session.
func produceN(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	for i := range n {
		if err := produceOne(js, i); err != nil {
			t.Fatal(err)
		}
	}
}

// trail is the sequence of every event an export writes that the stream
// holds, in order.
func trail(t testing.TB, js jetstream.JetStream) []uint64 {
	t.Helper()
	var seqs []uint64
	_, err := bus.Read(context.Background(), js, events.AuditStream, bus.Range{Subjects: audit.Subjects}, func(m *bus.StoredMsg) error {
		seqs = append(seqs, m.Sequence)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// fileSeqs are the sequences of the lines of the export file at path.
func fileSeqs(t testing.TB, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seqs []uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		seq, err := audit.LineSeq(sc.Bytes())
		if err != nil {
			t.Fatalf("line %d of the export: %v", len(seqs)+1, err)
		}
		seqs = append(seqs, seq)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// TestExportFollowsEveryEventOnceAcrossStops: an export to a file,
// stopped while events come and started again from what the file holds,
// has written every event of the trail once, in order, and nothing else.
func TestExportFollowsEveryEventOnceAcrossStops(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	stopProducing, produced := make(chan struct{}), make(chan error, 1)
	go func() { produced <- produce(js, stopProducing) }()

	// Two stops while events come; the third run catches up once they
	// stop coming.
	for run := 1; run <= 3; run++ {
		file, after, err := audit.OpenExportFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fileSeqs(t, path); len(got) > 0 && got[len(got)-1] != after {
			t.Fatalf("run %d goes on after #%d; the file ends at #%d", run, after, got[len(got)-1])
		}
		sink := &counting{Sink: file}
		f := follow(js, audit.FollowConfig{After: after, Since: since}, sink)
		testkit.Eventually(t, "an export that writes", func() bool { return sink.written() >= 50 })
		if run == 3 {
			close(stopProducing)
			if err := <-produced; err != nil {
				t.Fatal(err)
			}
			want := trail(t, js)
			testkit.Eventually(t, "an export that catches up", func() bool {
				got := fileSeqs(t, path)
				return len(got) > 0 && got[len(got)-1] == want[len(want)-1]
			})
		}
		if err := f.stop(t); err != nil {
			t.Fatalf("run %d: a stop returned %v", run, err)
		}
		file.Close()
	}
	got, want := fileSeqs(t, path), trail(t, js)
	if !slices.Equal(got, want) {
		t.Errorf("the export holds %d events, the trail %d:\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
}

// TestExportedLines: each line says where the event is in the stream,
// what it is and whose, with the event itself, its secrets hidden and
// its large fields put back (or, when the trail lost them, a note).
func TestExportedLines(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	const token = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
	inv := publish(t, js, events.SubjectInvoke+".agent", &events.Invocation{Header: events.Header{ID: "inv-1", Sender: events.Identity{ID: "agent"}}, Tool: "run_shell_command",
		Args: json.RawMessage(`{"command":"echo GITHUB_TOKEN=` + token + `"}`)})
	step := publish(t, js, events.SubjectStep, &events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}, Principal: "agent", Call: "call-1"}, InvocationID: "inv-1", Tool: "run_shell_command", Step: "validated"})
	publishRaw(t, js, events.SubjectProgressPrefix+"inv-1", []byte("output"))
	garbage := publishRaw(t, js, events.SubjectStep, []byte("not json "+token))
	// A record with large arguments, kept by digest, and one whose blob
	// the trail does not hold.
	big, err := events.Encode(&events.Invocation{Header: events.Header{ID: "inv-2", Sender: events.Identity{ID: "agent"}}, Tool: "write_file",
		Args: json.RawMessage(`{"content":"` + strings.Repeat("a", 40<<10) + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	outlined, blobs := events.Outline(big, events.MaxInlineRecord)
	if len(blobs) != 1 {
		t.Fatalf("the record was outlined into %d blobs", len(blobs))
	}
	publishRaw(t, js, blobs[0].Ref.Subject(), blobs[0].Data)
	whole := publishRaw(t, js, events.SubjectInvoke+".agent", outlined)
	lost := publishRaw(t, js, events.SubjectInvoke+".agent", []byte(strings.Replace(string(outlined), blobs[0].Ref.SHA256, strings.Repeat("0", 64), 1)))

	var c collector
	f := follow(js, audit.FollowConfig{Since: since}, &c)
	testkit.Eventually(t, "every event exported", func() bool { return slices.Contains(c.seqs(), lost) })
	if err := f.stop(t); err != nil {
		t.Fatal(err)
	}
	if got, want := c.seqs(), []uint64{inv, step, garbage, whole, lost}; !slices.Equal(got, want) {
		t.Fatalf("exported %v, want %v", got, want)
	}
	l := c.lines
	if l[0].Subject != events.SubjectInvoke+".agent" || l[0].Kind != events.SubjectInvoke || l[0].Principal != "agent" || l[0].Invocation != "inv-1" || l[0].Time.IsZero() {
		t.Errorf("the invocation's line: %+v", l[0])
	}
	if l[1].Kind != events.SubjectStep || l[1].Principal != "" || l[1].Invocation != "inv-1" || l[1].Call != "call-1" {
		t.Errorf("the step's line: %+v", l[1])
	}
	for _, x := range l {
		if strings.Contains(string(x.Event), token) {
			t.Errorf("#%d shows the token: %s", x.Seq, x.Event)
		}
		if !json.Valid(x.Event) {
			t.Errorf("#%d: the event is not JSON: %s", x.Seq, x.Event)
		}
	}
	if !strings.Contains(string(l[2].Event), "not json") {
		t.Errorf("an event that is not JSON is shown as a string: %s", l[2].Event)
	}
	if l[3].Invocation != "inv-2" || l[3].Incomplete != "" || !strings.Contains(string(l[3].Event), strings.Repeat("a", 40<<10)) {
		t.Errorf("a record with its large field put back: incomplete %q, %d bytes", l[3].Incomplete, len(l[3].Event))
	}
	if l[4].Incomplete == "" || strings.Contains(string(l[4].Event), strings.Repeat("a", 40<<10)) {
		t.Errorf("a record whose large field is lost: incomplete %q, %.200s", l[4].Incomplete, l[4].Event)
	}
}

// TestExportFromNow: a first start without Since begins at the events
// stored after it.
func TestExportFromNow(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	publish(t, js, events.SubjectStep, &events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: "before", Tool: "read_file", Step: "validated"})
	var c collector
	log := &logged{}
	f := follow(js, audit.FollowConfig{Logger: slog.New(log)}, &c)
	defer f.stop(t)
	testkit.Eventually(t, "the export's start", func() bool { return log.has("exporting the audit trail from now on") })
	after := publish(t, js, events.SubjectStep, &events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: "after", Tool: "read_file", Step: "validated"})
	testkit.Eventually(t, "the event after the start exported", func() bool { return len(c.seqs()) > 0 })
	if got := c.seqs(); !slices.Equal(got, []uint64{after}) {
		t.Errorf("exported %v, want [%d] alone", got, after)
	}
}

// logged is a slog handler that keeps the messages logged.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logged) WithGroup(string) slog.Handler            { return l }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message + " "
	r.Attrs(func(a slog.Attr) bool {
		msg += a.String() + " "
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
	return nil
}

func (l *logged) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.msgs, func(m string) bool { return strings.Contains(m, s) })
}

// pushOut publishes a call's output, which an export does not write,
// until the stream no longer holds sequence seq, and returns the
// stream's first sequence then.
func pushOut(t *testing.T, js jetstream.JetStream, s jetstream.Stream, seq uint64) uint64 {
	t.Helper()
	for {
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.FirstSeq > seq {
			return info.State.FirstSeq
		}
		publishRaw(t, js, events.SubjectProgressPrefix+"flood", []byte(strings.Repeat("o", 1000)))
	}
}

// TestExportReportsAGap: an export that goes on after events the stream
// no longer holds says which and stops, unless told to go on past them,
// which it notes.
func TestExportReportsAGap(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	s := audittest.SmallTrail(t, js)
	produceN(t, js, 10)
	first := pushOut(t, js, s, 10)
	kept := publish(t, js, events.SubjectStep, &events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: "kept", Tool: "read_file", Step: "validated"})

	var c collector
	ctx, cancel := context.WithTimeout(context.Background(), testkit.DefaultWait)
	defer cancel()
	err := audit.Follow(ctx, js, audit.FollowConfig{After: 4}, &c)
	want := fmt.Sprintf("#5..#%d are gone", first-1)
	if !errors.Is(err, audit.ErrGap) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want ErrGap saying %q", err, want)
	}
	if len(c.seqs()) != 0 {
		t.Errorf("exported %v past a gap", c.seqs())
	}

	log := &logged{}
	f := follow(js, audit.FollowConfig{After: 4, AcceptGaps: true, Logger: slog.New(log)}, &c)
	testkit.Eventually(t, "the event after the gap exported", func() bool { return slices.Contains(c.seqs(), kept) })
	if err := f.stop(t); err != nil {
		t.Fatal(err)
	}
	if !log.has(want) {
		t.Errorf("the gap accepted was not noted: %q", log.msgs)
	}
	if got := c.seqs(); !slices.Equal(got, []uint64{kept}) {
		t.Errorf("exported %v, want [%d]", got, kept)
	}
}

// TestExportReadsPastOtherSubjects: while an export waits for events, a
// call's output fills the stream and pushes out what it had read. That
// is no gap: the export read past those messages, which it does not
// write, before they went.
func TestExportReadsPastOtherSubjects(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	s := audittest.SmallTrail(t, js)
	produceN(t, js, 10)
	var c collector
	log := &logged{}
	f := follow(js, audit.FollowConfig{Since: since, Logger: slog.New(log)}, &c)
	want := trail(t, js)
	testkit.Eventually(t, "the trail exported", func() bool { return len(c.seqs()) == len(want) })
	// The output comes a little at a time, each read past before more
	// comes, until what was read first is gone.
	for {
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.FirstSeq > want[len(want)-1]+1 {
			break
		}
		var last uint64
		for range 25 {
			last = publishRaw(t, js, events.SubjectProgressPrefix+"flood", []byte(strings.Repeat("o", 1000)))
		}
		testkit.Eventually(t, "the export read past the output", func() bool { return log.has(fmt.Sprintf("through=%d ", last)) })
	}
	next := publish(t, js, events.SubjectStep, &events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: "next", Tool: "read_file", Step: "validated"})
	testkit.Eventually(t, "the next event exported", func() bool { return slices.Contains(c.seqs(), next) })
	if err := f.stop(t); err != nil {
		t.Fatalf("got %v, want no gap", err)
	}
	if got := c.seqs(); !slices.Equal(got, append(want, next)) {
		t.Errorf("exported %v, want %v", got, append(want, next))
	}
}

// TestExportOfAnotherStream: an export whose last event is past the
// stream's end is another stream's: it is refused.
func TestExportOfAnotherStream(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	produceN(t, js, 5)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.DefaultWait)
	defer cancel()
	err := audit.Follow(ctx, js, audit.FollowConfig{After: 1000}, &collector{})
	if err == nil || !strings.Contains(err.Error(), "another stream") {
		t.Errorf("got %v, want the export refused", err)
	}
}

// failing is a sink that fails from its first write on.
type failing struct {
	mu     sync.Mutex
	writes int
}

var errFull = errors.New("no space left on device")

func (f *failing) Write(context.Context, []audit.Line) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	return errFull
}

// TestExportStopsWhenItsSinkFails: a batch the sink could not take ends
// the export with the sink's error, and is not given to it again.
func TestExportStopsWhenItsSinkFails(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	// More events than one batch holds, for the read to fail midway.
	step, err := events.Encode(&events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: "many", Tool: "read_file", Step: "validated"})
	if err != nil {
		t.Fatal(err)
	}
	for range 1500 {
		if _, err := js.PublishAsync(events.SubjectStep, step); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(testkit.DefaultWait):
		t.Fatal("the stream did not take the events")
	}
	var sink failing
	ctx, cancel := context.WithTimeout(context.Background(), testkit.DefaultWait)
	defer cancel()
	if err := audit.Follow(ctx, js, audit.FollowConfig{Since: since}, &sink); !errors.Is(err, errFull) {
		t.Errorf("got %v, want the sink's error", err)
	}
	if sink.writes != 1 {
		t.Errorf("the sink was given %d batches, want the one it failed", sink.writes)
	}
}
