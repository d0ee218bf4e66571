package console

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.NATSLeaks()...) }

// wait bounds how long a test waits for something to appear: a bound on
// a wait, not a measurement.
const wait = 30 * time.Second

// env is a real fleet in one process: a bus, a registry, an executor with
// the built-in tools and the default policy, an agent's client, and the
// console over an approver of its own.
type env struct {
	bus       *bus.Bus
	ws        *builtin.Workspace
	exec      *executor.Executor
	client    *invoke.Client
	approver  *approve.Approver
	allowlist jetstream.KeyValue
	js        jetstream.JetStream // the console's, which the allowlist is read through
	console   *Server
}

func newEnv(t *testing.T) *env { return newEnvAs(t, "approver:ada") }

// newEnvAs starts a fleet whose console answers as approverID. Its
// approver is present from the start, page or no page: the tests of what
// a page shows and sends need not open one before a call asks.
func newEnvAs(t *testing.T, approverID string) *env {
	t.Helper()
	return newEnvWith(t, approve.Config{Identity: events.Identity{ID: approverID}})
}

// newEnvWith starts a fleet whose console answers from an approver
// configured as cfg.
func newEnvWith(t *testing.T, cfg approve.Config) *env {
	t.Helper()
	return newEnvOf(t, cfg, nil, nil)
}

// newEnvOf starts a fleet whose executor configure adjusts (nil: as
// executortest starts it), and whose console answers from an approver
// configured as cfg, started with the Config cc adjusts (nil: as is).
func newEnvOf(t *testing.T, cfg approve.Config, configure func(*executor.Config), cc func(*Config)) *env {
	t.Helper()
	var f *executortest.Fleet
	if configure != nil {
		f = executortest.Start(t, configure)
	} else {
		f = executortest.Start(t)
	}
	b := f.Bus
	e := &env{bus: b, ws: f.Workspace, exec: f.Executor, client: f.Client}
	var err error

	// The console runs on a connection of its own, as `toolbus console`
	// does on another machine.
	conn := bustest.Connect(t, b)
	e.js = conn.JetStream()
	e.allowlist, err = executor.OpenAllowlistBucket(context.Background(), conn.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = bustest.Quiet()
	e.approver, err = approve.Start(context.Background(), conn.Conn(), conn.JetStream(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.approver.Stop)
	ccfg := Config{Approver: e.approver, Allowlist: e.allowlist, JetStream: e.js, Listen: "127.0.0.1:0", Logger: bustest.Quiet()}
	if cc != nil {
		cc(&ccfg)
	}
	e.console, err = Start(context.Background(), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.console.Close(ctx); err != nil {
			t.Errorf("close the console: %v", err)
		}
	})
	return e
}

// call is an agent's call running in the background.
type call struct {
	done   chan struct{}
	result *events.Result
	err    error
}

// callAsync makes a call that waits for an approver; it is cancelled, and
// waited for, when the test ends.
func (e *env) callAsync(t *testing.T, id, tool, args string) *call {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &call{done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(c.done)
		c.result, c.err = e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: tool, Args: json.RawMessage(args)}, nil)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return c
}

// wait returns the call's result once it has one.
func (c *call) wait(t *testing.T) *events.Result {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(wait):
		t.Fatal("the call did not end")
	}
	if c.err != nil {
		t.Fatalf("the call failed: %v", c.err)
	}
	return c.result
}

// waitPending returns the invocation's request once the approver has it.
func (e *env) waitPending(t *testing.T, id string) approve.Request {
	t.Helper()
	deadline := time.After(wait)
	for {
		st, changed := e.approver.Snapshot()
		for _, r := range st.Pending {
			if r.InvocationID == id {
				return r
			}
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no pending request for %s", id)
		}
	}
}

// pendingNow reports whether the invocation still waits, and the answers
// the executor refused for it.
func (e *env) pendingNow(id string) (bool, []events.ConfirmRejected) {
	st, _ := e.approver.Snapshot()
	rs := st.OfInvocation(id)
	if len(rs) == 0 {
		return false, nil
	}
	return rs[0].Pending(), rs[0].Rejected
}

// bearer is the header a script signs in with.
func (e *env) bearer() map[string]string {
	return map[string]string{"Authorization": "Bearer " + e.console.Token()}
}

// eventStream is a page's stream of events, read in the background.
type eventStream struct {
	events chan sse
	ended  chan struct{}
	bytes  atomic.Int64 // bytes read, keep-alives included
	// close closes the stream, as a page that goes away does, and
	// waits until it is read to its end.
	close func()
}

type sse struct {
	name string
	data []byte
}

// stream connects to the console's event stream as a page does; it is
// closed when the test ends.
func (e *env) stream(t *testing.T) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", e.console.BaseURL()+"api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.console.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("the event stream: status %d, Content-Type %q", resp.StatusCode, ct)
	}
	s := &eventStream{events: make(chan sse, 1024), ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		r := bufio.NewReaderSize(resp.Body, 1<<16)
		var ev sse
		for {
			line, err := r.ReadBytes('\n')
			s.bytes.Add(int64(len(line)))
			if err != nil {
				return
			}
			line = bytes.TrimSuffix(line, []byte("\n"))
			switch {
			case bytes.HasPrefix(line, []byte("event: ")):
				ev.name = string(line[len("event: "):])
			case bytes.HasPrefix(line, []byte("data: ")):
				ev.data = append(ev.data, line[len("data: "):]...)
			case len(line) == 0 && ev.name != "":
				s.events <- ev
				ev = sse{}
			}
		}
	}()
	var once sync.Once
	s.close = func() {
		once.Do(func() {
			cancel()
			resp.Body.Close()
			<-s.ended
		})
	}
	t.Cleanup(s.close)
	return s
}

// next returns the next event.
func (s *eventStream) next(t *testing.T) (string, []byte) {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev.name, ev.data
	case <-s.ended:
		t.Fatal("the event stream ended")
	case <-time.After(wait):
		t.Fatal("no event on the stream")
	}
	return "", nil
}

// change returns the next event, which must be a change.
func (s *eventStream) change(t *testing.T) change {
	t.Helper()
	name, data := s.next(t)
	var c change
	if name != "change" || json.Unmarshal(data, &c) != nil {
		t.Fatalf("want a change, got %s %s", name, data)
	}
	return c
}

// pendingKey reports whether the request with key still waits, and the
// answers the executor refused for it.
func (e *env) pendingKey(key string) (bool, []events.ConfirmRejected) {
	st, _ := e.approver.Snapshot()
	r, ok := st.Find(key)
	return ok && r.Pending(), r.Rejected
}

// writeWorkspaceFile puts a file into the workspace, for a diff with
// context.
func (e *env) writeWorkspaceFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.ws.Root(), name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ask publishes a confirmation request as an executor does, for a call
// that no executor of this fleet runs, and returns what answers to it
// arrive: the request of another executor, as far as the console can tell.
func (e *env) ask(t *testing.T, req events.ConfirmRequest) *nats.Subscription {
	t.Helper()
	nc := bustest.Connect(t, e.bus).Conn()
	if req.Sender.ID == "" {
		req.Sender = events.Identity{ID: "executor@elsewhere", Role: "executor"}
	}
	if req.AnswerTo == "" {
		req.AnswerTo = events.AnswerSubjectPrefix + nuid.Next()
	}
	answers, err := nc.SubscribeSync(req.AnswerTo + ".>")
	if err != nil {
		t.Fatal(err)
	}
	data, err := events.Encode(&req)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(events.SubjectConfirm, data); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return answers
}
