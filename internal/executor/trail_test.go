package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/metrics"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// capTrail sets the audit stream's cap and retention, as an operator
// would, and returns its info.
func capTrail(t *testing.T, js jetstream.JetStream, maxBytes int64, maxAge time.Duration) *jetstream.StreamInfo {
	t.Helper()
	ctx := context.Background()
	// The records' large fields are kept beside the stream, to its cap
	// (events.Outline): the trail is both.
	for _, name := range []string{events.BlobStream, events.AuditStream} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.MaxBytes, cfg.MaxAge = maxBytes, maxAge
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// shareBurst is what ex's budget lets one principal record at once of
// the trail, as last derived from the stream.
func shareBurst(ex *Executor) float64 {
	ex.budget.mu.Lock()
	defer ex.budget.mu.Unlock()
	return ex.budget.share.burst
}

// callAs sends an invocation of glob whose pattern is pad bytes long
// after the call's id (so that no two calls' patterns are one blob), as
// principal, straight on the principal's subject, and returns its result.
// A pattern past 1 KiB is refused INVALID_TOOL_PARAMS: recorded all the
// same, which is what a flood is after.
func callAs(t *testing.T, nc *nats.Conn, principal, id string, pad int) *events.Result {
	t.Helper()
	return globAs(t, nc, principal, id, id+strings.Repeat("x", pad))
}

// globAs sends a glob call for pattern on principal's own subject, as
// that principal (the subject is what an executor trusts), and returns
// its result.
func globAs(t *testing.T, nc *nats.Conn, principal, id, pattern string) *events.Result {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"pattern": pattern})
	data, err := events.Encode(&events.Invocation{Header: events.Header{ID: id, Sender: events.Identity{ID: principal}}, Tool: "glob", Args: args})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(events.InvokeSubject(principal), data, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res, err := events.Decode[events.Result](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestAPacedFloodEvictsNoOneElsesRecords: mallory sends invocations of
// 32 KiB into a trail of 4 MiB, as fast as its pace allows (below 4 MiB
// a second). It is refused, RATE_LIMITED, once it has had its share of
// the trail (a quarter of it), well before the trail is full; alice's
// invocation, recorded before the flood, is still where it was, and
// alice's calls still run.
func TestAPacedFloodEvictsNoOneElsesRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced, c.TrailCheckEvery = true, 10*time.Millisecond })
	js := e.bus.JetStream()
	capTrail(t, js, 4<<20, time.Hour)
	testkit.EventuallyWithin(t, 10*time.Second, "the budget follows the trail's cap", func() bool { return shareBurst(e.exec) == 1<<20 })
	nc := bustest.Connect(t, e.bus).Conn()

	if res := callAs(t, nc, "alice", "alice-1", 16); res.Error != nil {
		t.Fatalf("alice's call: %s %s", errType(res), res.LLMContent)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	var evidence *jetstream.RawStreamMsg
	testkit.EventuallyWithin(t, 10*time.Second, "alice's invocation is in the trail", func() bool {
		evidence, err = stream.GetLastMsgForSubject(ctx, events.SubjectInvoke+".alice")
		return err == nil
	})

	limited, ran := 0, 0
	for i := 0; i < 200 && limited == 0; i++ {
		switch res := callAs(t, nc, "mallory", fmt.Sprintf("flood-%d", i), 32<<10); errType(res) {
		case events.ErrRateLimited:
			limited++
			if res.Error.RetryAfterMillis <= 0 {
				t.Errorf("RATE_LIMITED with no retry-after: %+v", res.Error)
			}
		case "", events.ErrInvalidParams:
			ran++
		default:
			t.Fatalf("flood call %d: %s %s", i, errType(res), res.LLMContent)
		}
	}
	if limited == 0 {
		t.Fatalf("200 calls of 32 KiB into a trail of 4 MiB: none refused")
	}
	// A quarter of 4 MiB is 32 calls of 32 KiB, and one more overdrawn.
	if ran < 20 || ran > 34 {
		t.Errorf("mallory ran %d calls of 32 KiB before it was refused, want about 32 (its share of the trail)", ran)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fill := float64(info.State.Bytes) / float64(info.Config.MaxBytes); fill >= DefaultTrailHighWater {
		t.Errorf("the trail is %.0f%% full after one principal's flood", fill*100)
	}
	got, err := stream.GetMsg(ctx, evidence.Sequence)
	if err != nil || string(got.Data) != string(evidence.Data) {
		t.Fatalf("alice's invocation, #%d, after mallory's flood: %v", evidence.Sequence, err)
	}
	if res := callAs(t, nc, "alice", "alice-2", 16); res.Error != nil {
		t.Errorf("alice after the flood: %s %s", errType(res), res.LLMContent)
	}
}

// TestTheShareIsSplitAmongTheFleet: each executor keeps its own budgets,
// and a principal's calls spread over them all: with two executors in
// the catalogue, each lets a principal have half of its share.
func TestTheShareIsSplitAmongTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced, c.TrailCheckEvery = true, 10*time.Millisecond })
	capTrail(t, e.bus.JetStream(), 4<<20, time.Hour)
	testkit.EventuallyWithin(t, 10*time.Second, "one executor's budget", func() bool { return shareBurst(e.exec) == 1<<20 })
	e.hostTools(t, "executor@b", []tool.Tool{echoTool("say_b")})
	testkit.EventuallyWithin(t, 10*time.Second, "the budget of one of two executors", func() bool { return shareBurst(e.exec) == 512<<10 })
}

// TestTheFleetFailsClosedNearTheCap: sixteen principals, each within its
// own budget, together push a trail of 2 MiB to its high-water mark.
// From there every call is refused, AUDIT_FULL, unrun and unrecorded;
// the metrics show the fill and the refusals, and /readyz fails. Nothing
// is evicted meanwhile. Once the operator raises the cap, calls run
// again and the executor is ready again.
func TestTheFleetFailsClosedNearTheCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced, c.TrailCheckEvery = true, 10*time.Millisecond })
	js := e.bus.JetStream()
	before := capTrail(t, js, 2<<20, time.Hour)
	testkit.EventuallyWithin(t, 10*time.Second, "the budget follows the trail's cap", func() bool { return shareBurst(e.exec) == 512<<10 })
	m := metrics.New("executor")
	m.WatchTrail(e.exec.TrailFill, e.exec.TrailRefusals)
	m.Ready("audit trail", func(context.Context) error { return e.exec.TrailHealth() })
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		r, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		body, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(body)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before the flood: %d %s", code, body)
	}

	nc := bustest.Connect(t, e.bus).Conn()
	full := -1
	for i := 0; i < 600 && full < 0; i++ {
		res := callAs(t, nc, fmt.Sprintf("p%d", i%16), fmt.Sprintf("c-%d", i), 16<<10)
		switch errType(res) {
		case events.ErrAuditFull:
			full = i
		case "", events.ErrRateLimited, events.ErrInvalidParams:
		default:
			t.Fatalf("call %d: %s %s", i, errType(res), res.LLMContent)
		}
	}
	if full < 0 {
		t.Fatal("600 calls of 16 KiB into a trail of 2 MiB: none refused AUDIT_FULL")
	}
	res := callAs(t, nc, "newcomer", "n-1", 16)
	if errType(res) != events.ErrAuditFull || !strings.Contains(res.LLMContent, "not run") {
		t.Fatalf("a call of a principal that recorded nothing yet, near the cap: %s %s", errType(res), res.LLMContent)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, events.SubjectInvoke+".newcomer"); err == nil {
		t.Error("a call refused AUDIT_FULL was recorded")
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != before.State.FirstSeq {
		t.Errorf("the trail's first record was #%d, and is #%d: records were evicted", before.State.FirstSeq, info.State.FirstSeq)
	}
	if e.exec.TrailHealth() == nil || e.exec.TrailRefusals() < 2 {
		t.Errorf("near the cap: health %v, %d refusals", e.exec.TrailHealth(), e.exec.TrailRefusals())
	}
	testkit.EventuallyWithin(t, 5*time.Second, "the fill is seen past the high-water mark", func() bool { return e.exec.TrailFill() >= DefaultTrailHighWater })
	if code, body := get("/readyz"); code == http.StatusOK || !strings.Contains(body, "audit trail") {
		t.Errorf("/readyz near the cap: %d %s", code, body)
	}
	_, body := get("/metrics")
	if fill := metricValue(t, body, "toolbus_audit_trail_fill"); fill < DefaultTrailHighWater {
		t.Errorf("/metrics near the cap: toolbus_audit_trail_fill %g", fill)
	}
	if n := metricValue(t, body, "toolbus_audit_full_refusals_total"); n < 2 {
		t.Errorf("/metrics near the cap: toolbus_audit_full_refusals_total %g", n)
	}

	capTrail(t, js, 64<<20, time.Hour)
	testkit.EventuallyWithin(t, 10*time.Second, "calls run once the cap is raised", func() bool {
		return callAs(t, nc, "newcomer", fmt.Sprintf("n-%d", time.Now().UnixNano()), 16).Error == nil
	})
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once the cap is raised: %d %s", code, body)
	}
}

// TestACallTheTrailRefusesNeverRuns: the trail is left with 2 KiB of
// room, and the executors do not look at it again (as between two of
// their looks). A call of 8 KiB, of a tool with a side effect, comes: the
// stream refuses its invocation, and the call ends AUDIT_FULL without
// running, on the executor that took it ("here") and on one it would
// have been forwarded to ("forwarded"). A read, which changes nothing,
// runs while its invocation is stored, but its result does not leave
// ("a read").
func TestACallTheTrailRefusesNeverRuns(t *testing.T) {
	t.Parallel()
	blind := func(c *Config) { c.TrailCheckEvery = time.Hour }
	marking := func(name string, kind events.Kind, runs *atomic.Int64) tool.Tool {
		return tool.Func(events.ToolSpec{Name: name, Kind: kind, Description: "leaves a mark",
			Parameters: json.RawMessage(`{"type":"object","properties":{"pad":{"type":"string"}}}`)},
			func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
				runs.Add(1)
				return tool.Text("marked"), nil
			})
	}
	marker := func(name string, runs *atomic.Int64) tool.Tool { return marking(name, events.KindEdit, runs) }
	// leaveRoom leaves the trail 2 KiB of room.
	leaveRoom := func(t *testing.T, e *env) {
		t.Helper()
		js := e.bus.JetStream()
		s, err := js.Stream(context.Background(), events.AuditStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		capTrail(t, js, int64(info.State.Bytes)+2<<10, time.Hour)
	}
	pad := `{"pad":"` + strings.Repeat("x", 8<<10) + `"}`

	t.Run("here", func(t *testing.T) {
		var runs atomic.Int64
		e := newEnv(t, blind, func(c *Config) { c.Tools = append(c.Tools, marker("mark", &runs)) })
		startApprover(t, e.bus, answer(events.ProceedOnce))
		waitTool(t, e.exec, "mark")
		if res := e.call(t, "mark", `{}`); res.Error != nil || runs.Load() != 1 {
			t.Fatalf("a call with room in the trail: %s %s (%d runs)", errType(res), res.LLMContent, runs.Load())
		}
		leaveRoom(t, e)
		if e.exec.TrailHealth() != nil {
			t.Fatal("the executor refuses calls before the trail refused one")
		}
		if res := e.call(t, "mark", pad); errType(res) != events.ErrAuditFull {
			t.Errorf("a call the trail refused: %s %s", errType(res), res.LLMContent)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("a call whose invocation the trail refused ran (%d runs)", n-1)
		}
		if e.exec.TrailHealth() == nil || e.exec.TrailRefusals() != 1 {
			t.Errorf("after the trail refused a record: health %v, %d refusals", e.exec.TrailHealth(), e.exec.TrailRefusals())
		}
	})

	t.Run("a read", func(t *testing.T) {
		var runs atomic.Int64
		e := newEnv(t, blind, func(c *Config) { c.Tools = append(c.Tools, marking("peek", events.KindRead, &runs)) })
		waitTool(t, e.exec, "peek")
		leaveRoom(t, e)
		if res := e.call(t, "peek", pad); errType(res) != events.ErrAuditFull || strings.Contains(res.LLMContent, "marked") {
			t.Errorf("a read the trail refused: %s %q, want AUDIT_FULL and nothing it read", errType(res), res.LLMContent)
		}
	})

	t.Run("forwarded", func(t *testing.T) {
		var runs atomic.Int64
		e := newEnv(t, blind)
		startApprover(t, e.bus, answer(events.ProceedOnce))
		other, _ := e.hostTools(t, "executor@b", []tool.Tool{marker("mark_b", &runs)}, blind)
		leaveRoom(t, e)
		// mark_b is hosted on executor@b alone: a call executor@test
		// takes would be forwarded there, and executor@b runs what is
		// forwarded to it without looking at the trail.
		for i := 0; i < 40 && e.exec.TrailRefusals() == 0; i++ {
			if res := e.call(t, "mark_b", pad); errType(res) != events.ErrAuditFull {
				t.Errorf("a call of mark_b the trail refused: %s %s", errType(res), res.LLMContent)
			}
		}
		if e.exec.TrailRefusals() == 0 {
			t.Fatalf("executor@test took none of 40 calls (executor@b refused %d)", other.TrailRefusals())
		}
		if n := runs.Load(); n != 0 {
			t.Fatalf("calls whose invocation the trail refused ran %d times", n)
		}
	})
}

// metricValue is the value of the unlabelled metric name in a /metrics
// page.
func metricValue(t *testing.T, page, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// fillTrailTo fills the audit stream with records of no principal's and
// caps it so that it is exactly tenths/10 full (a fraction that float64
// division gives back exactly), and returns its bytes and cap. A record
// of the fleet's own that comes meanwhile (a registration) spoils the
// sum; it is tried again.
func fillTrailTo(t *testing.T, js jetstream.JetStream, tenths int64) (bytes, maxBytes int64) {
	t.Helper()
	ctx := context.Background()
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() int64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int64(info.State.Bytes)
	}
	put := func(n int64) {
		t.Helper()
		if _, err := js.Publish(ctx, "tool.test.filler", []byte(strings.Repeat("f", int(n)))); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		capTrail(t, js, 64<<20, time.Hour)
		before := stored()
		put(64 << 10)
		overhead := stored() - before - 64<<10
		// One more record, sized so that the stream's bytes are a
		// multiple of tenths.
		b := stored()
		put(1024 + (tenths-(b+overhead+1024)%tenths)%tenths)
		if bytes = stored(); bytes%tenths != 0 {
			continue
		}
		maxBytes = bytes / tenths * 10
		capTrail(t, js, maxBytes, time.Hour)
		if stored() == bytes {
			return bytes, maxBytes
		}
	}
	t.Fatal("the trail never held still for ten tries")
	return 0, 0
}

// TestTheMarkRefusesWhileTheTrailHasRoom: the trail is at its high-water
// mark exactly, with a tenth of its cap still free. The executor's next
// look refuses every call from there on, AUDIT_FULL, unrun and
// unrecorded, whatever the invocation holds (a malformed one included),
// and tells the caller, /readyz and the log (once) how full the trail is
// and where the mark is. Once the cap is raised, calls run again and the
// log says so.
func TestTheMarkRefusesWhileTheTrailHasRoom(t *testing.T) {
	t.Parallel()
	var log testkit.Buffer
	e := newEnv(t, func(c *Config) {
		c.TrailCheckEvery = time.Hour // the test looks itself
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	js := e.bus.JetStream()
	ctx := context.Background()
	bytes, maxBytes := fillTrailTo(t, js, 9)
	if err := e.exec.checkTrail(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the next looks say nothing more
		if err := e.exec.checkTrail(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if maxBytes-bytes < 8<<10 {
		t.Fatalf("the trail has %d bytes of room, too few for this test", maxBytes-bytes)
	}
	nc := bustest.Connect(t, e.bus).Conn()
	res := callAs(t, nc, "alice", "a-1", 16)
	if errType(res) != events.ErrAuditFull || !strings.Contains(res.LLMContent, "is 90% full, and calls are refused from 90% on") {
		t.Fatalf("a call at the high-water mark: %s %s", errType(res), res.LLMContent)
	}
	if res.InvocationID != "a-1" {
		t.Errorf("the refusal names the call %q, want a-1", res.InvocationID)
	}
	// A malformed invocation is refused the same way, not a crash.
	m, err := nc.Request(events.InvokeSubject("alice"), []byte("{not an invocation"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := events.Decode[events.Result](m.Data); err != nil || errType(res) != events.ErrAuditFull {
		t.Fatalf("a malformed invocation at the high-water mark: %+v %v", res, err)
	}
	if err := e.exec.TrailHealth(); err == nil || !strings.Contains(err.Error(), "is 90.0% full (calls are refused from 90%)") {
		t.Errorf("TrailHealth at the mark: %v", err)
	}
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, events.SubjectInvoke+".alice"); err == nil {
		t.Error("a call refused at the high-water mark was recorded")
	}
	if n := strings.Count(log.String(), "the audit trail is near its size cap"); n != 1 {
		t.Errorf("the log says the trail is near its cap %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `fill=90.0%`) || !strings.Contains(log.String(), "at or past the high-water mark of 90%") {
		t.Errorf("the log does not say how full the trail is:\n%s", log.String())
	}

	capTrail(t, js, 2*maxBytes, time.Hour) // 45% full
	if err := e.exec.checkTrail(ctx); err != nil {
		t.Fatal(err)
	}
	if res := callAs(t, nc, "alice", "a-2", 16); res.Error != nil {
		t.Errorf("a call once the cap was raised: %s %s", errType(res), res.LLMContent)
	}
	if !strings.Contains(log.String(), `the audit trail has room again: taking calls" stream=`+events.AuditStream+` fill=45.0%`) {
		t.Errorf("the log does not say the trail has room again:\n%s", log.String())
	}
	if strings.Contains(log.String(), "could not look") {
		t.Errorf("the log says a look failed:\n%s", log.String())
	}
}

// TestAnExecutorLeavesItsQueueGroupsWhileTheTrailLags: with the audit
// stream gone, an executor's records wait unacknowledged. Once its
// window of them is full it leaves the queue groups of new calls, so that
// a new call finds no one to take it at once (on a fleet, another
// executor) instead of waiting on one that cannot record it, and says so
// on /readyz. When the stream is back, its records are sent again and
// stored, it takes calls again, and each call it had gets its one result.
func TestAnExecutorLeavesItsQueueGroupsWhileTheTrailLags(t *testing.T) {
	t.Parallel()
	const window = 4
	e := newEnv(t, func(c *Config) { c.RecordWindow, c.TrailCheckEvery = window, 20*time.Millisecond })
	read := `{"file_path":"README.md"}`
	if res := e.call(t, "read_file", read); res.Error != nil {
		t.Fatalf("a call with the stream there: %s %q", errType(res), res.LLMContent)
	}
	ctx := context.Background()
	js := e.bus.JetStream()
	if err := js.DeleteStream(ctx, events.AuditStream); err != nil {
		t.Fatal(err)
	}
	results := make(chan *events.Result, window)
	for range window {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			res, err := e.client.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(read)}, nil)
			if err != nil {
				res = &events.Result{Error: &events.ToolError{Type: "INVOKE", Message: err.Error()}}
			}
			results <- res
		}()
	}
	testkit.Eventually(t, "the executor leaves its queue groups", func() bool { return e.exec.TrailHealth() != nil })
	if err := e.exec.TrailHealth(); !strings.Contains(err.Error(), "not taking calls") {
		t.Errorf("/readyz says %q", err)
	}
	if _, err := e.callerConn.Request(events.InvokeSubject("someone"), []byte(`{}`), 10*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a call sent while the executor left its groups: %v, want no responders", err)
	}
	if err := bus.EnsureAudit(ctx, js, bus.Config{AuditMaxAge: bus.DefaultAuditMaxAge}); err != nil {
		t.Fatal(err)
	}
	for range window {
		if res := <-results; res.Error != nil || !strings.Contains(res.LLMContent, "hello") {
			t.Errorf("a call made while the stream was gone: %s %q", errType(res), res.LLMContent)
		}
	}
	testkit.Eventually(t, "the executor takes calls again", func() bool { return e.exec.TrailHealth() == nil })
	if res := e.call(t, "read_file", read); res.Error != nil {
		t.Errorf("a call once the stream is back: %s %q", errType(res), res.LLMContent)
	}
	// Nothing it sent was lost: each call made while the stream was gone
	// is in the new stream, with its result.
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the calls' records stored", func() bool {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(events.SubjectResult))
		return err == nil && info.State.Subjects[events.SubjectResult] >= window+1
	})
}
