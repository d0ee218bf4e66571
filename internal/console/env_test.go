package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.NATSObjectPutLeak()) }

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
	console   *Server
}

func newEnv(t *testing.T) *env { return newEnvAs(t, "approver:ada") }

// newEnvAs starts a fleet whose console answers as approverID.
func newEnvAs(t *testing.T, approverID string) *env {
	t.Helper()
	f := executortest.Start(t)
	b := f.Bus
	e := &env{bus: b, ws: f.Workspace, exec: f.Executor, client: f.Client}
	var err error

	// The console runs on a connection of its own, as `toolbus console`
	// does on another machine.
	conn := bustest.Connect(t, b)
	e.allowlist, err = executor.OpenAllowlistBucket(context.Background(), conn.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	e.approver, err = approve.Start(context.Background(), conn.Conn(), conn.JetStream(),
		approve.Config{Identity: events.Identity{ID: approverID}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.approver.Stop)
	e.console, err = Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, Listen: "127.0.0.1:0", Logger: bustest.Quiet()})
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

// signIn returns an HTTP client holding a session cookie, and the page's
// CSRF token.
func (e *env) signIn(t *testing.T) (*http.Client, string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	resp, err := c.Get(e.console.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign in: status %d", resp.StatusCode)
	}
	page := readAll(t, resp)
	_, after, ok := strings.Cut(page, `name="toolbus-csrf" content="`)
	csrf, _, ok2 := strings.Cut(after, `"`)
	if !ok || !ok2 || csrf == "" {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return c, csrf
}

// writeWorkspaceFile puts a file into the workspace, for a diff with
// context.
func (e *env) writeWorkspaceFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.ws.Root(), name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
