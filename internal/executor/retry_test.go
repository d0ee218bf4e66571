package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// hostedTwice is a tool hosted by the env's executor, where it answers
// at once, and by a second executor on a connection of its own, where it
// reports that it started, blocks, and counts its runs: the executor to
// kill mid-call.
type hostedTwice struct {
	name     string
	started  chan struct{} // a run began on the doomed executor
	doomed   atomic.Int32  // runs on the doomed executor
	survivor atomic.Int32  // runs on the env's executor
}

func newHostedTwice(name string) *hostedTwice {
	return &hostedTwice{name: name, started: make(chan struct{}, 8)}
}

func (h *hostedTwice) tool(kind events.Kind, doomed bool) tool.Tool {
	spec := events.ToolSpec{Name: h.name, Kind: kind, Description: "answers, or blocks on the doomed executor",
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)}
	return tool.Func(spec, func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
		if !doomed {
			h.survivor.Add(1)
			return tool.Text("answered by the survivor"), nil
		}
		h.doomed.Add(1)
		c.Progress("started\n") // the caller hears of the call, and whether it may retry it
		h.started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
}

// lostMidCall calls h's tool until a call lands on the doomed executor
// (the queue group hands it to either), kills that executor's connection
// once the caller heard the call started, and returns the call's result
// and id.
func lostMidCall(t *testing.T, e *env, h *hostedTwice, doomedConn interface{ Close() }) (*events.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 64 {
		id := fmt.Sprintf("%s-%d", h.name, i)
		heard := make(chan struct{}, 1)
		done := make(chan *events.Result, 1)
		go func() {
			res, err := e.client.InvokeWatch(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: h.name, Args: json.RawMessage(`{"n":1}`)},
				&invoke.Watch{Progress: func(string) {
					select {
					case heard <- struct{}{}:
					default:
					}
				}})
			if err != nil {
				t.Errorf("invoke: %v", err)
			}
			done <- res
		}()
		select {
		case res := <-done:
			if res == nil || res.Error != nil {
				t.Fatalf("a call the survivor took failed: %+v", res)
			}
			continue // the survivor took it: call again
		case <-heard:
		}
		<-h.started
		doomedConn.Close() // the executor's host dies: no result, no heartbeat
		select {
		case res := <-done:
			return res, id
		case <-ctx.Done():
			t.Fatal("the caller hung")
		}
	}
	t.Fatal("no call reached the doomed executor")
	return nil, ""
}

// TestALostReadIsRetriedOnce: a read whose executor dies mid-call is
// tried again under its id, as attempt 2, by the caller; the survivor
// runs it, and the call has one terminal result, the retry's, with both
// attempts in the trail.
func TestALostReadIsRetriedOnce(t *testing.T) {
	t.Parallel()
	h := newHostedTwice("slow_read")
	e := newEnv(t, func(c *Config) { c.Tools = append(c.Tools, h.tool(events.KindRead, false)) })
	_, conn := e.hostTools(t, "executor@doomed", []tool.Tool{h.tool(events.KindRead, true)}, sameWorkspace(e))
	res, id := lostMidCall(t, e, h, conn.Conn())
	if res.Error != nil || res.LLMContent != "answered by the survivor" || res.Attempt != 2 {
		t.Fatalf("got %s %q attempt %d, want the survivor's answer to attempt 2", errType(res), res.LLMContent, res.Attempt)
	}
	if res.Policy == nil || !res.Policy.Idempotent {
		t.Errorf("the retry's decision %+v does not say idempotent", res.Policy)
	}
	if got := h.doomed.Load(); got != 1 {
		t.Errorf("the doomed executor ran the call %d times, want 1", got)
	}
	r := trailOf(t, e, id)
	if got := attemptsOf(r); got != "[1:PENDING 2:OK]" {
		t.Errorf("the trail holds attempts %s, want the lost first and the retry", got)
	}
	if r.Outcome != audit.OutcomeOK || r.Attempt != 2 || r.LateResults != 0 || r.CallerRecord != nil || r.ReusedID {
		t.Errorf("the call's record: outcome %s of attempt %d, %d late, caller's record %+v, reused %v; want one terminal result, attempt 2's OK",
			r.Outcome, r.Attempt, r.LateResults, r.CallerRecord, r.ReusedID)
	}
}

// TestALostWriteIsNotRetried: a write whose executor dies mid-call ends
// EXECUTOR_LOST for its caller, and nothing runs it again.
func TestALostWriteIsNotRetried(t *testing.T) {
	t.Parallel()
	h := newHostedTwice("slow_write")
	e := newEnv(t, func(c *Config) { c.Tools = append(c.Tools, h.tool(events.KindEdit, false)) })
	_, conn := e.hostTools(t, "executor@doomed", []tool.Tool{h.tool(events.KindEdit, true)}, sameWorkspace(e))
	startApprover(t, e.bus, answer(events.ProceedOnce))
	res, id := lostMidCall(t, e, h, conn.Conn())
	if errType(res) != events.ErrExecutorLost || res.Attempt != 0 {
		t.Fatalf("got %s %q attempt %d, want EXECUTOR_LOST of the first attempt", errType(res), res.LLMContent, res.Attempt)
	}
	r := trailOf(t, e, id)
	if len(r.Attempts) != 0 || r.Outcome != audit.OutcomeNoExecutorResult || r.CallerRecord == nil || r.CallerRecord.Outcome != string(events.ErrExecutorLost) {
		t.Errorf("the call's record: attempts %s, outcome %s, caller's record %+v; want one attempt, lost", attemptsOf(r), r.Outcome, r.CallerRecord)
	}
	if h.doomed.Load() != 1 {
		t.Errorf("the doomed executor ran it %d times, want 1", h.doomed.Load())
	}
}

// trailOf is the audit's record of call id, once it has ended.
func trailOf(t *testing.T, e *env, id string) *audit.Record {
	t.Helper()
	var r *audit.Record
	testkit.Eventually(t, "the call's record ends", func() bool {
		recs, _, err := audit.Read(context.Background(), e.bus.JetStream(), audit.Query{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			return false
		}
		r = recs[0]
		return r.Outcome != audit.OutcomePending
	})
	return r
}

// attemptsOf says the attempts of r: "[1:PENDING 2:OK]".
func attemptsOf(r *audit.Record) string {
	var out []string
	for _, a := range r.Attempts {
		out = append(out, fmt.Sprintf("%d:%s", a.Attempt, a.Outcome))
	}
	return fmt.Sprint(out)
}

// TestRetriesAnAttackerSends: a caller that sends attempts itself gets a
// second run only of an idempotent call it made, that told it it may be
// retried, with the same tool and arguments, once.
func TestRetriesAnAttackerSends(t *testing.T) {
	t.Parallel()
	var writes atomic.Int32
	// Both say something before they end: a call's first word to its
	// caller is what writes its retry ticket, when it may be retried.
	write := tool.Func(events.ToolSpec{Name: "note_write", Kind: events.KindEdit, Description: "writes a note",
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
			c.Progress("writing\n")
			writes.Add(1)
			return tool.Text("written"), nil
		})
	read := tool.Func(events.ToolSpec{Name: "note_read", Kind: events.KindRead, Description: "reads a note",
		Parameters: json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"}}}`)},
		func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
			c.Progress("reading\n")
			return tool.Text("read"), nil
		})
	e := newEnv(t, func(c *Config) { c.Tools = append(c.Tools, write, read) })
	startApprover(t, e.bus, answer(events.ProceedOnce))
	call := func(id, name, args string, attempt int) *events.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: name, Args: json.RawMessage(args), Attempt: attempt}, nil)
		if err != nil {
			t.Fatalf("invoke: %v", err)
		}
		// The executor releases a call just after its result: the next
		// attempt finds it gone, as a retry of a lost call would.
		waitIdle(t, e.exec)
		return res
	}
	refused := func(what string, res *events.Result, says string) {
		t.Helper()
		if errType(res) != events.ErrInvocationIDReused || !strings.Contains(res.LLMContent, says) {
			t.Errorf("%s: got %s %q, want INVOCATION_ID_REUSED saying %q", what, errType(res), res.LLMContent, says)
		}
	}
	const note = `{"text":"hi"}`
	if res := call("w1", "note_write", note, 0); res.Error != nil {
		t.Fatalf("the write: %s %s", errType(res), res.LLMContent)
	}
	// A write is never retried: its caller was never told it may be,
	// and no ticket says it was.
	refused("attempt 2 of a write", call("w1", "note_write", note, 2), "made no first attempt")
	refused("attempt 3 of a write", call("w1", "note_write", note, 3), "at most 2 times")
	refused("attempt 50 of a write", call("w1", "note_write", note, 50), "at most 2 times")
	refused("attempt 2 again", call("w1", "note_write", note, 2), "made no first attempt")
	if n := writes.Load(); n != 1 {
		t.Errorf("the write ran %d times, want 1", n)
	}
	// The trail shows every attempt, each refused, and the write's one
	// terminal result, its first attempt's.
	if r := trailOf(t, e, "w1"); r.Outcome != audit.OutcomeOK || r.Attempt != 0 ||
		attemptsOf(r) != "[1:OK 2:INVOCATION_ID_REUSED 3:INVOCATION_ID_REUSED 50:INVOCATION_ID_REUSED 2:INVOCATION_ID_REUSED]" {
		t.Errorf("the write's record: outcome %s of attempt %d, attempts %s", r.Outcome, r.Attempt, attemptsOf(r))
	}

	const readme = `{"file_path":"README.md"}`
	if res := call("r1", "note_read", readme, 0); res.Error != nil {
		t.Fatalf("the read: %s %s", errType(res), res.LLMContent)
	}
	refused("attempt 2 with other arguments", call("r1", "note_read", `{"file_path":"secret.txt"}`, 2), "names another tool")
	refused("attempt 2 of another tool", call("r1", "read_file", readme, 2), "names another tool")
	refused("attempt 2 of an id never used", call("r-none", "note_read", readme, 2), "made no first attempt")
	// A read that ended before it said a word told its caller nothing of
	// a retry, and has no ticket.
	if res := call("r-quiet", "read_file", readme, 0); res.Error != nil {
		t.Fatalf("a quiet read: %s %s", errType(res), res.LLMContent)
	}
	refused("attempt 2 of a read that said nothing", call("r-quiet", "read_file", readme, 2), "made no first attempt")
	// The refusals above were refused before the id's second attempt
	// was taken: the one retry there may be is still there, once.
	if res := call("r1", "note_read", readme, 2); res.Error != nil || res.Attempt != 2 {
		t.Fatalf("the retry of a read: %s %s attempt %d", errType(res), res.LLMContent, res.Attempt)
	}
	refused("the same retry again", call("r1", "note_read", readme, 2), "before")

	// A retry that asks for a longer deadline than a call may have gets
	// the longest there is, where a first attempt is refused.
	long := func(id string, attempt int) *events.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: "note_read", Args: json.RawMessage(readme),
			Attempt: attempt, TimeoutMillis: (100 * time.Hour).Milliseconds()}, nil)
		if err != nil {
			t.Fatalf("invoke: %v", err)
		}
		waitIdle(t, e.exec)
		return res
	}
	if res := call("r2", "note_read", readme, 0); res.Error != nil {
		t.Fatalf("the read: %s %s", errType(res), res.LLMContent)
	}
	if res := long("r2", 2); res.Error != nil {
		t.Errorf("a retry asking for 100h: %s %s, want it run", errType(res), res.LLMContent)
	}
	if res := long("r3", 0); errType(res) != events.ErrInvalidParams {
		t.Errorf("a first attempt asking for 100h: %s %s, want INVALID_TOOL_PARAMS", errType(res), res.LLMContent)
	}
	if n := writes.Load(); n != 1 {
		t.Errorf("the write ran %d times, want 1", n)
	}
}

// sameWorkspace gives an executor e's workspace: a tool hosted by it and
// by e's executor is one tool of one workspace.
func sameWorkspace(e *env) option {
	return func(c *Config) { c.Workspace = e.ws.Root() }
}

// TestARetryIsTakenOnlyAsItsPrincipalsCall: the bucket of taken ids lets
// attempt 2 of an id be taken once, by the principal whose first attempt
// it repeats, for the same call; an old first attempt that kept no sum of
// its call cannot be repeated.
func TestARetryIsTakenOnlyAsItsPrincipalsCall(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	ctx := context.Background()
	ids, err := openTakenIDs(ctx, b.JetStream(), DefaultIDTTL)
	if err != nil {
		t.Fatal(err)
	}
	read := &events.Invocation{Header: events.Header{ID: "x"}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"a"}`)}
	other := &events.Invocation{Header: events.Header{ID: "x"}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"b"}`)}
	if err := ids.take(ctx, "alice", "x", []byte("first"), 0, callSum(read)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, principal string
		attempt         int
		call            *events.Invocation
		want            error
	}{
		{"another principal's retry", "mallory", 2, read, errNoFirstAttempt},
		{"another call", "alice", 2, other, errNotSameCall},
		{"a third attempt", "alice", 3, read, errTooManyAttempts},
		{"the retry", "alice", 2, read, nil},
		{"the retry again", "alice", 2, read, errIDReused},
		{"the first again", "alice", 1, read, errIDReused},
	} {
		err := ids.take(ctx, tt.principal, "x", []byte(tt.name), tt.attempt, callSum(tt.call))
		if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	// A first attempt recorded by an older build: the request's sum and a
	// nonce, no call's.
	if _, err := ids.kv.Create(ctx, IDKey("alice", "old"), make([]byte, 48)); err != nil {
		t.Fatal(err)
	}
	if err := ids.take(ctx, "alice", "old", []byte("retry"), 2, callSum(read)); !errors.Is(err, errNoFirstAttempt) {
		t.Errorf("a retry of an old first attempt: got %v, want %v", err, errNoFirstAttempt)
	}
}

// TestAGiveUpOfTheFirstAttemptLeavesTheRetry: the give-up of a call's
// first attempt, coming while its retry runs, does not stop the retry.
func TestAGiveUpOfTheFirstAttemptLeavesTheRetry(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	slow := tool.Func(events.ToolSpec{Name: "second_waits", Kind: events.KindRead, Description: "its second run waits"},
		func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
			c.Progress("reading\n") // the first attempt's ticket, which its retry needs
			if runs.Add(1) == 2 {
				close(started)
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return tool.Text("read"), nil
		})
	e := newEnv(t, func(c *Config) { c.Tools = append(c.Tools, slow) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(attempt int) (*events.Result, error) {
		return e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "g1"}, Tool: "second_waits", Args: json.RawMessage(`{}`), Attempt: attempt}, nil)
	}
	if res, err := call(0); err != nil || res.Error != nil {
		t.Fatalf("the first attempt: %+v %v", res, err)
	}
	waitIdle(t, e.exec)
	done := make(chan *events.Result, 1)
	go func() {
		res, err := call(2)
		if err != nil {
			t.Errorf("the retry: %v", err)
		}
		done <- res
	}()
	<-started
	e.client.GiveUp("g1", "the first attempt is given up")
	close(release)
	if res := <-done; res == nil || res.Error != nil || res.Late || res.Attempt != 2 {
		t.Errorf("the retry: %+v, want its result, not late", res)
	}
}
