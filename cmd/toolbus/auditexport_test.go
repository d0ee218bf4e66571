package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	collogpb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// producer publishes a session's events on a bus's trail, a few hundred
// a second, with messages of subjects an export does not write among
// them (a call's output), until stopped.
type producer struct {
	stop chan struct{}
	done chan error
}

func startProducer(js jetstream.JetStream) *producer {
	p := &producer{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() { p.done <- p.run(js) }()
	return p
}

func (p *producer) run(js jetstream.JetStream) error {
	// The pace keeps the stream small; the exports' correctness does not
	// rest on it.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return nil
		case <-tick.C:
		}
		id := fmt.Sprintf("inv-%05d", i)
		var (
			subject string
			data    []byte
			err     error
		)
		switch i % 4 {
		case 0:
			subject = events.SubjectInvoke + ".agent"
			data, err = events.Encode(&events.Invocation{Header: events.Header{ID: id, Sender: events.Identity{ID: "agent"}}, Tool: "read_file"})
		case 1:
			subject = events.SubjectStep
			data, err = events.Encode(&events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: id, Tool: "read_file", Step: "validated"})
		case 2:
			subject, data = events.SubjectProgressPrefix+id, []byte("output")
		case 3:
			subject = events.SubjectResult
			// A traced call's result names its span: an OTLP export's
			// record of it is in its trace.
			trace := fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
			data, err = events.Encode(&events.Result{Header: events.Header{Sender: events.Identity{ID: "executor"}, Trace: trace}, InvocationID: id})
		}
		if err != nil {
			return err
		}
		if _, err := js.Publish(context.Background(), subject, data); err != nil {
			return err
		}
	}
}

// finish stops the producer and fails the test if it failed.
func (p *producer) finish(t *testing.T) {
	t.Helper()
	close(p.stop)
	if err := <-p.done; err != nil {
		t.Fatalf("producing events: %v", err)
	}
}

// trailSeqs is the sequence of every event an export writes that the
// stream holds, in order.
func trailSeqs(t *testing.T, js jetstream.JetStream) []uint64 {
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

// lineSeqs are the sequences of an export's lines: every line whole and
// one an export writes.
func lineSeqs(t *testing.T, data []byte) []uint64 {
	t.Helper()
	var seqs []uint64
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		seq, err := audit.LineSeq(sc.Bytes())
		if err != nil {
			t.Fatalf("line %d of the export: %v: %.200q", len(seqs)+1, err, sc.Bytes())
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

// outputSeqs are the sequences of the complete lines of the export file
// at path: what an export wrote so far, a line it is writing left out.
func outputSeqs(t *testing.T, path string) []uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return lineSeqs(t, data[:bytes.LastIndexByte(data, '\n')+1])
}

// exactlyOnce fails the test unless got is want: every event of the
// trail once, in order.
func exactlyOnce(t *testing.T, got, want []uint64) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	seen := map[uint64]int{}
	for _, s := range got {
		seen[s]++
	}
	var twice, missing []uint64
	for s, n := range seen {
		if n > 1 {
			twice = append(twice, s)
		}
	}
	for _, s := range want {
		if seen[s] == 0 {
			missing = append(missing, s)
		}
	}
	t.Fatalf("the export holds %d events, the trail %d: twice %v, missing %v; in order: %v", len(got), len(want), twice, missing, slices.IsSorted(got))
}

// endBy sends d sig and returns how it ended.
func endBy(t *testing.T, d *daemon, sig syscall.Signal) error {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
		return err
	case <-time.After(logWait):
		t.Fatalf("%s did not end on %v; stderr:\n%s", d.cmd.Path, sig, d.output.String())
		return nil
	}
}

// TestAuditExportFollowResumesAfterSIGTERM is the test: events
// are produced while `audit export --follow --output FILE` runs; it is
// stopped mid-stream and started again, the events stop coming, and once
// it has caught up the file holds every event of the trail exactly once,
// in order.
func TestAuditExportFollowResumesAfterSIGTERM(t *testing.T) {
	t.Parallel()
	exportAcrossStops(t, syscall.SIGTERM)
}

// TestAuditExportFollowResumesAfterSIGKILL: the same with an export
// killed, and a line it was writing when killed left torn in its file.
func TestAuditExportFollowResumesAfterSIGKILL(t *testing.T) {
	t.Parallel()
	exportAcrossStops(t, syscall.SIGKILL)
}

func exportAcrossStops(t *testing.T, sig syscall.Signal) {
	b := bustest.Start(t, "")
	js := b.JetStream()
	out := filepath.Join(t.TempDir(), "audit.jsonl")
	export := func() *daemon {
		return startDaemon(t, "toolbus", "audit", "export", "--follow", "--output", out, "--since", "1h", "--nats", b.URL())
	}
	p := startProducer(js)

	first := export()
	testkit.Eventually(t, "the first export writes", func() bool { return len(outputSeqs(t, out)) >= 50 })
	err := endBy(t, first, sig)
	switch sig {
	case syscall.SIGTERM:
		if err != nil {
			t.Fatalf("a stop by SIGTERM: %v; stderr:\n%s", err, first.output.String())
		}
	case syscall.SIGKILL:
		// Killed as it wrote a line: the start of one is left.
		written := outputSeqs(t, out)
		torn := fmt.Sprintf(`{"seq":%d,"time":"2026-01-01T00:0`, written[len(written)-1]+1)
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(torn); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	kept := outputSeqs(t, out)
	stopped := len(kept)

	second := export()
	testkit.Eventually(t, "the second export writes", func() bool { return len(outputSeqs(t, out)) >= stopped+50 })
	p.finish(t)
	want := trailSeqs(t, js)
	testkit.Eventually(t, "the second export catches up", func() bool {
		got := outputSeqs(t, out)
		return len(got) > 0 && got[len(got)-1] >= want[len(want)-1]
	})
	if err := endBy(t, second, syscall.SIGTERM); err != nil {
		t.Fatalf("a stop by SIGTERM: %v; stderr:\n%s", err, second.output.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("\n")) {
		t.Errorf("the export ends in a torn line: %.100q", data[bytes.LastIndexByte(data, '\n')+1:])
	}
	exactlyOnce(t, lineSeqs(t, data), want)
	if !strings.Contains(second.output.String(), fmt.Sprintf("after=%d\n", kept[stopped-1])) {
		t.Errorf("the second export did not say where it went on (after #%d):\n%s", kept[stopped-1], second.output.String())
	}
}

// TestAuditExportFollowToStdoutResumesFromItsCheckpoint: an export to
// stdout with --checkpoint, stopped by SIGTERM mid-stream and started
// again, has written every event exactly once, and its checkpoint holds
// the last one's sequence.
func TestAuditExportFollowToStdoutResumesFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	checkpoint := filepath.Join(t.TempDir(), "export.seq")
	var (
		mu    sync.Mutex
		lines []string
	)
	written := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(lines)
	}
	export := func() *daemon {
		d := startDaemon(t, "toolbus", "audit", "export", "--follow", "--checkpoint", checkpoint, "--since", "1h", "--nats", b.URL())
		read := make(chan struct{})
		go func() {
			defer close(read)
			for l := range d.lines {
				mu.Lock()
				lines = append(lines, l)
				mu.Unlock()
			}
		}()
		t.Cleanup(func() { <-read })
		return d
	}
	p := startProducer(js)

	first := export()
	testkit.Eventually(t, "the first export writes", func() bool { return written() >= 50 })
	if err := endBy(t, first, syscall.SIGTERM); err != nil {
		t.Fatalf("a stop by SIGTERM: %v; stderr:\n%s", err, first.output.String())
	}
	stopped := written()

	second := export()
	testkit.Eventually(t, "the second export writes", func() bool { return written() >= stopped+50 })
	p.finish(t)
	want := trailSeqs(t, js)
	testkit.Eventually(t, "the second export catches up", func() bool { return written() >= len(want) })
	if err := endBy(t, second, syscall.SIGTERM); err != nil {
		t.Fatalf("a stop by SIGTERM: %v; stderr:\n%s", err, second.output.String())
	}
	mu.Lock()
	got := lineSeqs(t, []byte(strings.Join(lines, "\n")))
	mu.Unlock()
	exactlyOnce(t, got, want)
	if data, err := os.ReadFile(checkpoint); err != nil || string(data) != fmt.Sprintf("%d\n", want[len(want)-1]) {
		t.Errorf("the checkpoint holds %q (%v), want the last event's sequence, %d", data, err, want[len(want)-1])
	}
}

// TestAuditExportFollowRefusesWhatItDidNotWrite: an output file or a
// checkpoint an export did not write, and flags that do not go together,
// are refused before anything is read or written.
func TestAuditExportFollowRefusesWhatItDidNotWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	const content = "my notes\nnot an export\n"
	if err := os.WriteFile(notes, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	// No bus listens there: a refusal comes before any connection.
	url := "nats://" + testkit.UnusedAddr(t)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--output", notes}, 1, "not written by an audit export"},
		{[]string{"--checkpoint", notes}, 1, "not written by an audit export"},
		{[]string{"--output", filepath.Join(dir, "a"), "--checkpoint", filepath.Join(dir, "b")}, 2, "its own checkpoint"},
		{[]string{"--tool", "read_file"}, 2, "--tool"},
		{[]string{"--until", "1h"}, 2, "--until"},
		{[]string{"--format", "otlp", "--output", filepath.Join(dir, "d")}, 2, "--output does not go with it"},
		{[]string{"--format", "opa-decision-log", "--output", filepath.Join(dir, "e")}, 2, "--output does not go with it"},
		{[]string{"--format", "xml"}, 2, "want jsonl, or otlp or opa-decision-log"},
	} {
		args := append([]string{"audit", "export", "--follow", "--nats", url}, c.args...)
		if _, errOut, code := toolbus(t, args...); code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("%v: exit %d, %s; want exit %d saying %q", c.args, code, errOut, c.code, c.says)
		}
	}
	if _, errOut, code := toolbus(t, "audit", "export", "--output", filepath.Join(dir, "c"), "--nats", url); code != 2 || !strings.Contains(errOut, "goes with --follow") {
		t.Errorf("--output without --follow: exit %d, %s", code, errOut)
	}
	for _, format := range []string{"otlp", "opa-decision-log"} {
		if _, errOut, code := toolbus(t, "audit", "export", "--format", format, "--nats", url); code != 2 || !strings.Contains(errOut, "goes with --follow") {
			t.Errorf("--format %s without --follow: exit %d, %s", format, code, errOut)
		}
	}
	if data, _ := os.ReadFile(notes); string(data) != content {
		t.Errorf("a refused file was changed: %q", data)
	}
}

// TestAuditExportFollowReportsAGap: an export whose checkpoint is behind
// what the stream still holds (its oldest aged out while the export was
// stopped) says which events are gone and exits 1, its checkpoint as it
// was; --accept-gaps goes on past them.
func TestAuditExportFollowReportsAGap(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	ctx := context.Background()
	stream := audittest.SmallTrail(t, js)
	step, err := events.Encode(&events.Step{Header: events.Header{Sender: events.Identity{ID: "executor"}}, InvocationID: "old", Tool: "read_file", Step: "validated"})
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.StreamInfo
	for info == nil || info.State.FirstSeq <= 10 {
		if _, err := js.Publish(ctx, events.SubjectStep, step); err != nil {
			t.Fatal(err)
		}
		if info, err = stream.Info(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := filepath.Join(t.TempDir(), "export.seq")
	if err := os.WriteFile(checkpoint, []byte("5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := toolbus(t, "audit", "export", "--follow", "--checkpoint", checkpoint, "--nats", b.URL())
	if gone := fmt.Sprintf("#6..#%d are gone", info.State.FirstSeq-1); code != 1 || !strings.Contains(errOut, gone) {
		t.Errorf("exit %d, %s; want exit 1 saying %q", code, errOut, gone)
	}
	if data, _ := os.ReadFile(checkpoint); string(data) != "5\n" {
		t.Errorf("the checkpoint was moved to %q", data)
	}

	d := startDaemon(t, "toolbus", "audit", "export", "--follow", "--checkpoint", checkpoint, "--accept-gaps", "--nats", b.URL())
	d.waitLog(t, "going on past a gap")
	line := d.waitLine(t, `"seq":`)
	if seq, err := audit.LineSeq([]byte(line)); err != nil || seq < info.State.FirstSeq {
		t.Errorf("the first line past the gap is #%d (%v), want #%d or later", seq, err, info.State.FirstSeq)
	}
	d.stop(t)
}

// collector is an OTLP/HTTP logs receiver: it decodes each export
// request as OpenTelemetry's protobuf, keeps the sequence attribute of
// every record it takes, and refuses requests while told to.
type collector struct {
	mu      sync.Mutex
	seqs    []uint64
	service string
	refuse  bool
	refused int
	bad     []string // what was wrong with a record
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req collogpb.ExportLogsServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if r.URL.Path != "/v1/logs" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		http.Error(w, fmt.Sprintf("not an OTLP logs request: %s %s: %v", r.URL.Path, r.Header.Get("Content-Type"), err), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse {
		c.refused++
		http.Error(w, "refused by the test", http.StatusBadRequest)
		return
	}
	for _, rl := range req.GetResourceLogs() {
		for _, a := range rl.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				c.service = a.GetValue().GetStringValue()
			}
		}
		for _, sl := range rl.GetScopeLogs() {
			for _, lr := range sl.GetLogRecords() {
				var seq int64
				for _, a := range lr.GetAttributes() {
					if a.GetKey() == audit.AttrSeq {
						seq = a.GetValue().GetIntValue()
					}
				}
				body := lr.GetBody().GetStringValue()
				if seq <= 0 || lr.GetTimeUnixNano() == 0 || lr.GetEventName() == "" || !json.Valid([]byte(body)) {
					c.bad = append(c.bad, fmt.Sprintf("seq %d, time %d, event %q, body %.100q", seq, lr.GetTimeUnixNano(), lr.GetEventName(), body))
				}
				var h struct {
					Trace string `json:"trace"`
				}
				json.Unmarshal([]byte(body), &h)
				if got := fmt.Sprintf("%x", lr.GetTraceId()); h.Trace != "" && got != audit.TraceID(h.Trace) {
					c.bad = append(c.bad, fmt.Sprintf("seq %d names trace %s, its record is in trace %q", seq, h.Trace, got))
				}
				c.seqs = append(c.seqs, uint64(seq))
			}
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (c *collector) taken() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seqs)
}

func (c *collector) setRefuse(refuse bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse = refuse
}

// TestAuditExportFollowToOTLPResumesFromItsCheckpoint: an export to an
// OTLP collector (a real OTLP/HTTP receiver, in the test) with
// --checkpoint, stopped by SIGTERM mid-stream, then refused by the
// collector (it exits 1, its checkpoint where it was), then started
// again: the collector has taken every event exactly once, each a log
// record with its sequence.
func TestAuditExportFollowToOTLPResumesFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	js := b.JetStream()
	col := &collector{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	checkpoint := filepath.Join(t.TempDir(), "export.seq")
	env := []string{"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=" + srv.URL + "/v1/logs", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_PROTOCOL="}
	args := []string{"audit", "export", "--follow", "--format", "otlp", "--checkpoint", checkpoint, "--since", "1h", "--nats", b.URL()}
	p := startProducer(js)

	first := startDaemonWith(t, env, "toolbus", args...)
	testkit.Eventually(t, "the collector takes events", func() bool { return len(col.taken()) >= 50 })
	if err := endBy(t, first, syscall.SIGTERM); err != nil {
		t.Fatalf("a stop by SIGTERM: %v; stderr:\n%s", err, first.output.String())
	}
	stopped := col.taken()
	if data, err := os.ReadFile(checkpoint); err != nil || string(data) != fmt.Sprintf("%d\n", stopped[len(stopped)-1]) {
		t.Fatalf("after a stop the checkpoint holds %q (%v), want the last event taken, #%d", data, err, stopped[len(stopped)-1])
	}

	col.setRefuse(true)
	refused := startDaemonWith(t, env, "toolbus", args...)
	select {
	case err := <-refused.done:
		if code := refused.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(refused.output.String(), "OTLP export") {
			t.Errorf("an export the collector refuses: exit %d (%v), %s", code, err, refused.output.String())
		}
	case <-time.After(logWait):
		t.Fatalf("an export the collector refuses did not end; stderr:\n%s", refused.output.String())
	}
	if data, _ := os.ReadFile(checkpoint); string(data) != fmt.Sprintf("%d\n", stopped[len(stopped)-1]) {
		t.Errorf("a batch the collector refused moved the checkpoint to %q", data)
	}
	col.setRefuse(false)

	second := startDaemonWith(t, env, "toolbus", args...)
	testkit.Eventually(t, "the collector takes more events", func() bool { return len(col.taken()) >= len(stopped)+50 })
	p.finish(t)
	want := trailSeqs(t, js)
	testkit.Eventually(t, "the export catches up", func() bool {
		got := col.taken()
		return len(got) > 0 && got[len(got)-1] >= want[len(want)-1]
	})
	if err := endBy(t, second, syscall.SIGTERM); err != nil {
		t.Fatalf("a stop by SIGTERM: %v; stderr:\n%s", err, second.output.String())
	}
	exactlyOnce(t, col.taken(), want)
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.refused == 0 || col.service != "toolbus" || len(col.bad) > 0 {
		t.Errorf("refused %d requests, service %q, records not as sent: %q", col.refused, col.service, col.bad)
	}
}
