package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// waitIdle waits until ex runs no call: every result it will send is sent.
func waitIdle(t testing.TB, ex *Executor) {
	t.Helper()
	var n int
	if !testkit.Poll(60*time.Second, func() bool {
		ex.mu.Lock()
		n = len(ex.running)
		ex.mu.Unlock()
		return n == 0
	}) {
		t.Fatalf("%d calls still running", n)
	}
}

// TestParallelLargeReadsGetOneResultEach: 64 callers, each on a connection
// of its own, read a 20 MB file at once. Storing 64 whole outputs takes
// seconds and overflows the store's queue if sent all at once; every
// caller still gets its one result, and the audit stream holds exactly one
// terminal result per invocation and no late one. None is refused: a
// call waits for no fleet-wide write but its own record.
func TestParallelLargeReadsGetOneResultEach(t *testing.T) {
	testkit.Heavy(t, "a flood of 64 outputs of 20 MB")
	e := newEnv(t, func(c *Config) { c.OutputStoreBytes = 2 << 30 })
	line := strings.Repeat("a", 9999) + "\n"
	os.WriteFile(filepath.Join(e.ws.Root(), "big.txt"), []byte(strings.Repeat(line, 2000)), 0o644) // 20,000,000 bytes
	const calls = 64
	clients := make([]*invoke.Client, calls)
	for i := range clients {
		clients[i] = invoke.NewClient(bustest.Connect(t, e.bus).Conn(), events.Identity{ID: fmt.Sprintf("agent:%d", i)}, "")
		defer clients[i].Close()
	}
	results := make([]*events.Result, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("big-read-%d", i)}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"big.txt"}`)}
			res, err := clients[i].Invoke(ctx, inv, nil)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	kept := 0
	for i, res := range results {
		if res == nil {
			continue
		}
		// No call is refused for the bus's slowness: nothing on its way
		// waits for a fleet-wide write but its own record.
		if res.Error != nil {
			t.Errorf("call %d: %s %s", i, res.Error.Type, res.Error.Message)
			continue
		}
		if !res.Truncated {
			t.Errorf("call %d: a 20 MB result was not capped", i)
		}
		if res.OutputRef != "" {
			kept++
		}
	}
	t.Logf("%d of %d whole outputs kept in the object store", kept, calls)
	waitIdle(t, e.exec)
	ids := make([]string, calls)
	for i := range ids {
		ids[i] = fmt.Sprintf("big-read-%d", i)
	}
	counts := audittest.ResultsOf(t, e.bus.JetStream(), ids)
	for i := range calls {
		c := counts[ids[i]]
		if c == nil || c.Terminal != 1 || c.Late != 0 {
			t.Errorf("big-read-%d: %+v terminal/late results in the audit stream, want exactly one terminal", i, c)
		}
	}
}

// TestGivingUpMakesTheExecutorsResultLate: a caller whose deadline passes
// publishes its own TIMEOUT; the executor's result for the call is
// recorded as late, and a call whose caller gave up before it arrived is
// not run at all.
func TestGivingUpMakesTheExecutorsResultLate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan struct{}, 1)
	var ran int
	var mu sync.Mutex
	slow := tool.Func(events.ToolSpec{Name: "slow", Kind: events.KindRead, Description: "waits for its context"}, func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
		mu.Lock()
		ran++
		mu.Unlock()
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	slowHost, _ := e.hostTools(t, "executor@slow", []tool.Tool{slow})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *events.Result, 1)
	go func() {
		res, err := e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "given-up"}, Tool: "slow", Args: json.RawMessage(`{}`)}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-started
	cancel()
	if res := <-done; errType(res) != events.ErrCancelled {
		t.Errorf("the caller's own result: %s %s", errType(res), res.LLMContent)
	}

	// A give-up that overtakes its call: the call is refused, not run.
	if e.client.GiveUp("overtaken", "test") {
		t.Fatal("an executor says it sent the result of a call none has seen")
	}
	// Cancels and invocations come in on subscriptions of their own; the
	// test lets the give-up arrive first, as it does when a call waits.
	testkit.Eventually(t, "both executors hold the give-up", func() bool {
		for _, ex := range []*Executor{e.exec, slowHost} {
			ex.mu.Lock()
			_, ok := ex.abandoned.ids[abandonKey(events.Unproven, "overtaken", 0)]
			ex.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
	nc := bustest.Connect(t, e.bus).Conn()
	inv, _ := events.Encode(&events.Invocation{Header: events.Header{ID: "overtaken", Sender: events.Identity{ID: "agent:test"}}, Tool: "slow", Args: json.RawMessage(`{}`)})
	if err := nc.Publish(events.InvokeSubject(""), inv); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the overtaken call's result is recorded", func() bool {
		c := audittest.Results(t, e.bus.JetStream(), true)["overtaken"]
		return c != nil
	})
	waitIdle(t, e.exec)
	counts := audittest.ResultsOf(t, e.bus.JetStream(), []string{"given-up", "overtaken"})
	if c := counts["given-up"]; c == nil || c.Terminal != 1 || c.Late != 1 {
		t.Errorf("given-up: %+v, want the caller's terminal result and the executor's late one", c)
	}
	if c := counts["overtaken"]; c == nil || c.Terminal != 0 || c.Late != 1 {
		t.Errorf("overtaken: %+v, want only the executor's late refusal", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != 1 {
		t.Errorf("the tool ran %d times; the overtaken call must not run", ran)
	}
}

// standIn answers the invoke protocol on a bare bus as an executor that
// stays silent (no heartbeat) for longer than invoke.LostAfter would allow: it
// takes invocations and answers claims while claiming is set.
type standIn struct {
	mu       sync.Mutex
	reply    string
	claiming bool
	claims   int
	cancels  []*events.CancelRequest
}

func startStandIn(t *testing.T, b *bus.Bus) *standIn {
	t.Helper()
	nc := bustest.Connect(t, b).Conn()
	s := &standIn{claiming: true}
	subs := []struct {
		subject string
		handle  nats.MsgHandler
	}{
		{events.InvokeSubject("*"), func(m *nats.Msg) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.reply = m.Reply
			if !s.claiming {
				// One heartbeat, then silence: the caller knows whom to ask.
				beat := nats.NewMsg(m.Reply)
				beat.Header.Set(events.KindHeader, events.KindHeartbeat)
				beat.Header.Set(events.ExecutorHeader, "executor@stand-in")
				nc.PublishMsg(beat)
			}
		}},
		{events.ClaimAllSubject, func(m *nats.Msg) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.claims++
			if s.claiming {
				answer := nats.NewMsg(m.Reply)
				answer.Header.Set(events.ExecutorHeader, "executor@stand-in")
				answer.Data = []byte(events.ClaimRunning)
				m.RespondMsg(answer)
			}
		}},
		{events.ClaimSubject("executor@stand-in"), func(m *nats.Msg) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.claims++
			answer := []byte(events.ClaimUnknown)
			if s.claiming {
				answer = []byte(events.ClaimRunning)
			}
			m.Respond(answer)
		}},
		{events.CancelSubject("*"), func(m *nats.Msg) {
			req, err := events.Decode[events.CancelRequest](m.Data)
			if err == nil {
				s.mu.Lock()
				s.cancels = append(s.cancels, req)
				s.mu.Unlock()
			}
		}},
	}
	for _, sub := range subs {
		if _, err := nc.Subscribe(sub.subject, sub.handle); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	return s
}

// TestACallThatIsClaimedIsNotLost: a caller that hears nothing for
// invoke.LostAfter asks, and waits for a call an executor still claims; once no
// executor claims it, the call is lost, and the caller says it gave up.
func TestACallThatIsClaimedIsNotLost(t *testing.T) {
	// Its own bus; it waits out the liveness timers, which overlap with
	// other tests' waits.
	t.Parallel()
	b := bustest.Start(t, "")
	s := startStandIn(t, b)
	c := invoke.NewClient(bustest.Connect(t, b).Conn(), events.Identity{ID: "agent:test"}, "")
	defer c.Close()
	done := make(chan *events.Result, 1)
	go func() {
		res, err := c.Invoke(context.Background(), &events.Invocation{Header: events.Header{ID: "claimed"}, Tool: "x", Args: json.RawMessage(`{}`)}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	// Past the first LostAfter: the caller asked and was told to wait.
	testkit.Eventually(t, "the caller asked for a claim twice", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.claims >= 2 })
	select {
	case res := <-done:
		t.Fatalf("a claimed call ended: %s %s", errType(res), res.LLMContent)
	default:
	}
	s.mu.Lock()
	reply := s.reply
	s.mu.Unlock()
	data, _ := events.Encode(&events.Result{Header: events.Header{Sender: events.Identity{ID: "executor@stand-in"}}, InvocationID: "claimed", Tool: "x", LLMContent: "done at last"})
	nc := bustest.Connect(t, b).Conn()
	nc.Publish(reply, data)
	if res := <-done; res.Error != nil || res.LLMContent != "done at last" {
		t.Errorf("got %s %q", errType(res), res.LLMContent)
	}

	// The executor a heartbeat named says it does not run the next call:
	// it is lost, and given up first.
	s.mu.Lock()
	s.claiming = false
	s.mu.Unlock()
	res, err := c.Invoke(context.Background(), &events.Invocation{Header: events.Header{ID: "unclaimed"}, Tool: "x", Args: json.RawMessage(`{}`)}, nil)
	if err != nil || errType(res) != events.ErrExecutorLost {
		t.Fatalf("unclaimed call: %v %s", err, errType(res))
	}
	testkit.Eventually(t, "the caller gave the unclaimed call up", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, req := range s.cancels {
			if req.InvocationID == "unclaimed" && req.GaveUp {
				return true
			}
		}
		return false
	})
}

// TestAGiveUpThatCrossesTheResultLeavesOneTerminalResult: a caller whose
// wait ends as the executor sends the result gives up while the result is
// on its way. Whichever comes first at the executor, the give-up or the
// end of the call, the audit stream holds one terminal result for the
// call: the executor's, which the caller then takes, or the caller's, with
// the executor's marked Late. The tool here ends its caller's wait itself
// as it returns, the narrowest crossing there is.
func TestAGiveUpThatCrossesTheResultLeavesOneTerminalResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	ends := map[string]context.CancelFunc{}
	crossing := tool.Func(events.ToolSpec{Name: "crossing", Kind: events.KindRead, Description: "ends its caller's wait as it returns"}, func(_ context.Context, c *tool.Call) (*tool.Output, error) {
		mu.Lock()
		end := ends[c.ID]
		mu.Unlock()
		end()
		return tool.Text("done"), nil
	})
	e.hostTools(t, "executor@crossing", []tool.Tool{crossing})

	const calls = 60
	results := map[string]*events.Result{}
	for i := range calls {
		id := fmt.Sprintf("crossing-%d", i)
		ctx, cancel := context.WithCancel(context.Background())
		mu.Lock()
		ends[id] = cancel
		mu.Unlock()
		res, err := e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: "crossing", Args: json.RawMessage(`{}`)}, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		results[id] = res
	}
	waitIdle(t, e.exec)
	counts := audittest.ResultsOf(t, e.bus.JetStream(), slices.Collect(maps.Keys(results)))
	took := 0
	for id, res := range results {
		c := counts[id]
		if c == nil || c.Terminal != 1 {
			t.Errorf("%s: %+v terminal results in the audit stream, want exactly one (the caller got %s %q)", id, c, errType(res), res.LLMContent)
		}
		if res.Error == nil {
			took++
		}
	}
	t.Logf("%d of %d callers took the executor's result, the rest gave up first", took, calls)
}

// TestAnExecutorBehindOnItsInvocationsIsNotTakenForLost: a caller that
// hears nothing asks whether an executor runs its call. An executor that
// has not looked at the invocation yet (it waits in the executor's queue,
// as under load) does not say it does not know the call, which would make
// the caller give up on a call about to run: it says it is behind, and the
// caller waits on, and gets the call's result.
func TestAnExecutorBehindOnItsInvocationsIsNotTakenForLost(t *testing.T) {
	// Its own bus; it waits out the liveness timers, which overlap with
	// other tests' waits.
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	hold := func(m *nats.Msg) {
		if strings.Contains(string(m.Data), `"held-up"`) {
			<-release
		}
	}
	e.exec.beforeAccept.Store(&hold)
	claims := make(chan string, 16)
	watcher := bustest.Connect(t, e.bus).Conn()
	watcher.Subscribe(events.ClaimAllSubject, func(m *nats.Msg) { claims <- string(m.Data) })
	watcher.Flush()
	done := make(chan *events.Result, 1)
	go func() {
		res, err := e.client.Invoke(context.Background(), &events.Invocation{Header: events.Header{ID: "held-up"}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	// Two claims answered while the invocation is held: with "unknown"
	// the caller would have given up after the first.
	for range 2 {
		select {
		case id := <-claims:
			if id != "held-up" {
				t.Fatalf("claim for %q", id)
			}
		case res := <-done:
			t.Fatalf("the call ended while the executor was behind: %s %s", errType(res), res.LLMContent)
		}
	}
	close(release)
	if res := <-done; res.Error != nil || !strings.Contains(res.LLMContent, "# hello") {
		t.Fatalf("got %s %q", errType(res), res.LLMContent)
	}
	counts := audittest.ResultsOf(t, e.bus.JetStream(), []string{"held-up"})
	if c := counts["held-up"]; c == nil || c.Terminal != 1 || c.Late != 0 {
		t.Errorf("%+v terminal/late results in the audit stream, want exactly one terminal", c)
	}
}

// A result lost on its way to the caller (the bus node between them went
// with it in its sockets) is sent again when the caller gives up on the
// call: the give-up becomes the result, and the trail still holds one.
// The loss is made for sure here: the caller's inbox has no subscriber
// when the executor sends the result.
func TestALostResultIsSentAgainWhenTheCallerGivesUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := bustest.Connect(t, e.bus).Conn()
	inbox := nc.NewRespInbox()
	inv, _ := events.Encode(&events.Invocation{Header: events.Header{ID: "lost-result", Sender: events.Identity{ID: "agent:test"}},
		Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)})
	if err := nc.PublishRequest(events.InvokeSubject(""), inbox, inv); err != nil {
		t.Fatal(err)
	}
	if c := audittest.ResultsOf(t, e.bus.JetStream(), []string{"lost-result"})["lost-result"]; c == nil || c.Terminal != 1 {
		t.Fatalf("the executor's result: %+v", c)
	}
	results, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	// The server has the subscription before the give-up goes out on
	// another connection: otherwise the result sent again could pass it.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if !e.client.GiveUp("lost-result", "no executor claims it") {
		t.Fatal("the executor that sent the result did not say so")
	}
	m, err := results.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the result was not sent again: %v", err)
	}
	res, err := events.Decode[events.Result](m.Data)
	if err != nil || res.InvocationID != "lost-result" || res.Error != nil || !strings.Contains(res.LLMContent, "# hello") {
		t.Fatalf("sent again: %+v %v", res, err)
	}
	if c := audittest.Results(t, e.bus.JetStream(), false)["lost-result"]; c.Terminal != 1 || c.Late != 0 {
		t.Errorf("the trail after the give-up: %+v, want the one terminal result", c)
	}
}
