package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/notify"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.NATSLeaks()...) }

var secret = []byte("a-shared-secret-of-32-bytes-long")

// console is the base address the links are made from.
const console = "http://127.0.0.1:7878/"

// longConfirm is a confirmation deadline no test waits for.
const longConfirm = time.Hour

// delivery is one POST a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a real HTTP server that keeps what it is sent and answers
// each attempt with what status says (200 when nil).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delivery
	status func(n int) int // n counts the POSTs from 1
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	t.Helper()
	r := &receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), body: body})
		n := len(r.got)
		r.mu.Unlock()
		code := http.StatusOK
		if r.status != nil {
			code = r.status(n)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// waitDeliveries waits until the receiver got n POSTs.
func (r *receiver) waitDeliveries(t *testing.T, n int) []delivery {
	t.Helper()
	testkit.Eventually(t, strconv.Itoa(n)+" deliveries", func() bool { return len(r.deliveries()) >= n })
	return r.deliveries()
}

// checkSigned fails unless d carries a valid signature of its body and
// timestamp under secret, computed here apart from the notifier's code.
func checkSigned(t *testing.T, d delivery) {
	t.Helper()
	ts := d.header.Get(notify.HeaderTimestamp)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts + "." + string(d.body)))
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if got := d.header.Get(notify.HeaderSignature); got != want {
		t.Errorf("signature %q, want %q", got, want)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		t.Errorf("timestamp %q is not the time of sending", ts)
	}
}

// run runs a notifier over src until the test ends.
func run(t *testing.T, cfg notify.Config, src notify.Source) *notify.Notifier {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = secret
	}
	cfg.Logger = bustest.Quiet()
	n, err := notify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx, src) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

// seat starts an approver as id on a connection of its own: present
// from the start unless held says it is present only while held.
func seat(t *testing.T, f *executortest.Fleet, id string, held bool) *approve.Approver {
	t.Helper()
	conn := bustest.Connect(t, f.Bus)
	a, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: id, Role: "approver"},
		PresentWhileHeld: held, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// call invokes a tool in the background; the result comes on the channel.
func call(f *executortest.Fleet, id, tool, args string) <-chan *events.Result {
	out := make(chan *events.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := f.Client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: tool, Args: json.RawMessage(args)}, nil)
		if err != nil {
			res = &events.Result{Error: &events.ToolError{Type: "CLIENT", Message: err.Error()}}
		}
		out <- res
	}()
	return out
}

func result(t *testing.T, ch <-chan *events.Result) *events.Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("the call never returned")
		return nil
	}
}

// waitPending waits until a shows invocation id pending, and returns it.
func waitPending(t *testing.T, a *approve.Approver, id string) approve.Request {
	t.Helper()
	var r approve.Request
	testkit.Eventually(t, "the request of "+id+" pending", func() bool {
		s, _ := a.Snapshot()
		for _, p := range s.Pending {
			if p.InvocationID == id {
				r = p
				return true
			}
		}
		return false
	})
	return r
}

// stats waits until the notifier's counts satisfy ok.
func stats(t *testing.T, n *notify.Notifier, what string, ok func(notify.Stats) bool) notify.Stats {
	t.Helper()
	testkit.Eventually(t, what, func() bool { return ok(n.Stats()) })
	return n.Stats()
}

// secretContent is what the call writes: a payload must not carry it.
const secretContent = "AKIA-not-for-the-webhook-7f3e"

// TestAWaitingCallIsNotifiedOnce: a call the policy asks about, with an
// approver present, gets one signed delivery naming the request, with the
// link that opens the console at it, and without the call's arguments;
// once answered, the call runs and nothing more is sent.
func TestAWaitingCallIsNotifiedOnce(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.ConfirmTimeout = longConfirm })
	ada := seat(t, f, "approver:ada", false)
	rcv := newReceiver(t, nil)
	n := run(t, notify.Config{URL: rcv.URL + "/hook", Console: console}, ada)

	done := call(f, "inv-notified", "write_file", `{"file_path":"secret-notes.txt","content":"`+secretContent+`"}`)
	req := waitPending(t, ada, "inv-notified")
	d := rcv.waitDeliveries(t, 1)[0]
	checkSigned(t, d)
	var p notify.Payload
	if err := json.Unmarshal(d.body, &p); err != nil {
		t.Fatalf("the body is not JSON: %v: %s", err, d.body)
	}
	wantLink := console + "#request=" + url.QueryEscape(req.AnswerTo)
	switch {
	case p.Event != notify.EventWaiting || p.ID != req.ID || d.header.Get(notify.HeaderDelivery) != req.ID:
		t.Errorf("event %q id %q (header %q), want %q and the request's id %q", p.Event, p.ID, d.header.Get(notify.HeaderDelivery), notify.EventWaiting, req.ID)
	case p.AnswerTo != req.AnswerTo || p.InvocationID != "inv-notified" || p.Tool != "write_file" || p.Kind != req.Kind || p.Caller.ID != f.Caller.ID:
		t.Errorf("the payload does not name the request: %s", d.body)
	case p.Reason == "" || p.Reason != req.Reason:
		t.Errorf("reason %q, want the policy's %q", p.Reason, req.Reason)
	case !p.WaitsUntil.Equal(req.Deadline) || !p.RequestedAt.Equal(req.Time):
		t.Errorf("requested %v, waits until %v; want %v, %v", p.RequestedAt, p.WaitsUntil, req.Time, req.Deadline)
	case p.Link != wantLink:
		t.Errorf("link %q, want %q", p.Link, wantLink)
	case d.header.Get("Content-Type") != "application/json" || d.header.Get(notify.HeaderAttempt) != "1":
		t.Errorf("headers: %v", d.header)
	}
	for _, leak := range []string{secretContent, "secret-notes.txt", `"args"`, `"diff"`} {
		if strings.Contains(string(d.body), leak) {
			t.Errorf("the payload carries %q, which only the signed-in console shows: %s", leak, d.body)
		}
	}

	if ack, err := ada.Answer(context.Background(), req.AnswerTo, approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted {
		t.Fatalf("answer: %+v %v", ack, err)
	}
	if res := result(t, done); res.Error != nil {
		t.Fatalf("the approved call: %+v", res.Error)
	}
	s := stats(t, n, "one delivery", func(s notify.Stats) bool { return s.Delivered == 1 })
	if s.Attempts != 1 || s.Failed != 0 || s.Dropped != 0 {
		t.Errorf("stats %+v, want one attempt, delivered", s)
	}
	if got := len(rcv.deliveries()); got != 1 {
		t.Errorf("the receiver got %d deliveries, want 1", got)
	}
}

// TestA500IsRetried: a receiver that answers 500 and then 200 gets the
// same delivery twice, each attempt signed, and it counts as delivered.
func TestA500IsRetried(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.ConfirmTimeout = longConfirm })
	ada := seat(t, f, "approver:ada", false)
	rcv := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	n := run(t, notify.Config{URL: rcv.URL, Console: console, Backoff: 10 * time.Millisecond}, ada)

	done := call(f, "inv-retried", "write_file", `{"file_path":"a.txt","content":"x"}`)
	req := waitPending(t, ada, "inv-retried")
	got := rcv.waitDeliveries(t, 2)
	for i, d := range got {
		checkSigned(t, d)
		if id := d.header.Get(notify.HeaderDelivery); id != req.ID {
			t.Errorf("attempt %d: delivery id %q, want %q", i+1, id, req.ID)
		}
		if a := d.header.Get(notify.HeaderAttempt); a != strconv.Itoa(i+1) {
			t.Errorf("attempt %d: %s %q", i+1, notify.HeaderAttempt, a)
		}
	}
	if string(got[0].body) != string(got[1].body) {
		t.Errorf("a retry sent another body:\n%s\n%s", got[0].body, got[1].body)
	}
	s := stats(t, n, "delivered after a retry", func(s notify.Stats) bool { return s.Delivered == 1 })
	if s.Attempts != 2 || s.Failed != 0 {
		t.Errorf("stats %+v, want 2 attempts", s)
	}
	ada.Answer(context.Background(), req.AnswerTo, approve.Answer{Outcome: events.Cancel})
	result(t, done)
}

// TestNoRetryOnceAnswered: a delivery waiting to be tried again stops
// when its request is answered, and nothing more is sent.
func TestNoRetryOnceAnswered(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.ConfirmTimeout = longConfirm })
	ada := seat(t, f, "approver:ada", false)
	rcv := newReceiver(t, func(int) int { return http.StatusServiceUnavailable })
	// The retry would come in an hour: only the answer ends the wait.
	n := run(t, notify.Config{URL: rcv.URL, Backoff: time.Hour, MaxBackoff: time.Hour}, ada)

	done := call(f, "inv-answered", "write_file", `{"file_path":"a.txt","content":"x"}`)
	req := waitPending(t, ada, "inv-answered")
	rcv.waitDeliveries(t, 1)
	if ack, err := ada.Answer(context.Background(), req.AnswerTo, approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted {
		t.Fatalf("answer: %+v %v", ack, err)
	}
	result(t, done)
	s := stats(t, n, "the delivery ended with its request", func(s notify.Stats) bool { return s.Ended == 1 })
	if s.Attempts != 1 || s.Delivered != 0 || s.Failed != 0 {
		t.Errorf("stats %+v, want one attempt, then ended", s)
	}
	if got := len(rcv.deliveries()); got != 1 {
		t.Errorf("the receiver got %d deliveries, want 1", got)
	}
}

// TestANotifierIsNoApprover: a notifier over an approver nobody holds
// present makes nobody present: a call the policy asks about is denied at
// once, and nothing is sent. Once a person holds the seat, a call waits
// and is notified: the notifier was running all along.
func TestANotifierIsNoApprover(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.ConfirmTimeout = longConfirm })
	watch := seat(t, f, "approver:console", true)
	rcv := newReceiver(t, nil)
	n := run(t, notify.Config{URL: rcv.URL, Console: console}, watch)

	res := result(t, call(f, "inv-nobody", "write_file", `{"file_path":"a.txt","content":"x"}`))
	if res.Error == nil || res.Error.Type != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "no approver is connected") {
		t.Fatalf("with only a notifier, got %+v %q; want POLICY_DENIED: no approver is connected", res.Error, res.LLMContent)
	}
	if watch.Present() {
		t.Error("the notifier's source became present")
	}

	release, err := watch.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	done := call(f, "inv-someone", "write_file", `{"file_path":"a.txt","content":"x"}`)
	req := waitPending(t, watch, "inv-someone")
	d := rcv.waitDeliveries(t, 1)
	var p notify.Payload
	if err := json.Unmarshal(d[0].body, &p); err != nil || p.InvocationID != "inv-someone" {
		t.Fatalf("the first delivery is not the waiting call's (%v): %s", err, d[0].body)
	}
	watch.Answer(context.Background(), req.AnswerTo, approve.Answer{Outcome: events.Cancel})
	result(t, done)
	if s := stats(t, n, "one delivery", func(s notify.Stats) bool { return s.Delivered == 1 }); s.Attempts != 1 {
		t.Errorf("stats %+v: the denied call was notified", s)
	}
}

// static is a Source whose queue never changes.
type static struct{ state approve.State }

func (s static) Snapshot() (approve.State, <-chan struct{}) { return s.state, make(chan struct{}) }

// pendingRequests are n requests that wait for an hour.
func pendingRequests(n int) approve.State {
	var s approve.State
	now := time.Now()
	for i := range n {
		r := approve.Request{ConfirmRequest: events.ConfirmRequest{Header: events.Header{ID: "req-" + strconv.Itoa(i), Time: now},
			InvocationID: "inv-" + strconv.Itoa(i), Tool: "write_file", AnswerTo: "toolbus.answer.t" + strconv.Itoa(i),
			DeadlineMillis: time.Hour.Milliseconds()}, Deadline: now.Add(time.Hour)}
		s.Pending = append(s.Pending, r)
	}
	return s
}

// TestAFloodIsBounded: past the queue, requests are dropped and counted,
// never held; what was queued is delivered.
func TestAFloodIsBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	rcv := newReceiver(t, func(int) int { <-release; return http.StatusOK })
	// Before the receiver closes, which waits for its handlers.
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	n := run(t, notify.Config{URL: rcv.URL, Queue: 2, Workers: 1}, static{pendingRequests(10)})

	rcv.waitDeliveries(t, 1) // the one worker is busy with the first
	s := stats(t, n, "the rest dropped", func(s notify.Stats) bool { return s.Dropped >= 7 })
	once.Do(func() { close(release) })
	s = stats(t, n, "every request delivered or dropped", func(s notify.Stats) bool { return s.Delivered+s.Dropped == 10 })
	if s.Dropped > 8 || s.Failed != 0 {
		t.Errorf("stats %+v: want at most 8 dropped (one in flight, two queued)", s)
	}
}

// TestGivingUp: a refusal (4xx) is not tried again; a receiver that keeps
// failing gets Attempts tries and no more.
func TestGivingUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		status   int
		attempts int64
	}{
		{"refused", http.StatusUnauthorized, 1},
		{"redirected", http.StatusFound, 1},
		{"failing", http.StatusBadGateway, 3},
		{"rate limited", http.StatusTooManyRequests, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t, func(int) int { return tc.status })
			n := run(t, notify.Config{URL: rcv.URL, Attempts: 3, Backoff: time.Millisecond}, static{pendingRequests(1)})
			s := stats(t, n, "given up", func(s notify.Stats) bool { return s.Failed == 1 })
			if s.Attempts != tc.attempts || s.Delivered != 0 {
				t.Errorf("stats %+v, want %d attempts", s, tc.attempts)
			}
			if got := len(rcv.deliveries()); got != int(tc.attempts) {
				t.Errorf("the receiver got %d, want %d", got, tc.attempts)
			}
		})
	}
}

// TestPastItsDeadlineIsNotNotified: a request read back from the stream
// after its executor stopped waiting is not notified.
func TestPastItsDeadlineIsNotNotified(t *testing.T) {
	t.Parallel()
	state := pendingRequests(2)
	state.Pending[0].Deadline = time.Now().Add(-time.Minute)
	rcv := newReceiver(t, nil)
	n := run(t, notify.Config{URL: rcv.URL}, static{state})
	stats(t, n, "the live one delivered", func(s notify.Stats) bool { return s.Delivered == 1 })
	if got := rcv.deliveries(); len(got) != 1 || got[0].header.Get(notify.HeaderDelivery) != "req-1" {
		t.Errorf("deliveries %v, want only req-1's", got)
	}
}

func TestReadSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  "+string(secret)+"\n", 0o600)
	if got, err := notify.ReadSecret(good); err != nil || string(got) != string(secret) {
		t.Errorf("ReadSecret(0600) = %q, %v; want the secret without white space", got, err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"others may read", write("open", string(secret), 0o644), "chmod 600"},
		{"the group may read", write("group", string(secret), 0o640), "chmod 600"},
		{"too short", write("short", "short", 0o600), "at least 16"},
		{"missing", filepath.Join(dir, "none"), "no such file"},
		{"a directory", dir, "regular file"},
	} {
		if _, err := notify.ReadSecret(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  notify.Config
		want string
	}{
		{"no URL", notify.Config{Secret: secret}, "no webhook URL"},
		{"not http", notify.Config{URL: "file:///etc/passwd", Secret: secret}, "want http"},
		{"no host", notify.Config{URL: "http://", Secret: secret}, "want http"},
		{"short secret", notify.Config{URL: "https://hooks.example/x", Secret: []byte("short")}, "at least 16"},
		{"bad console", notify.Config{URL: "https://hooks.example/x", Secret: secret, Console: "javascript:alert(1)"}, "console address"},
		{"fine", notify.Config{URL: "https://hooks.example/x", Secret: secret, Console: console}, ""},
	} {
		_, err := notify.New(tc.cfg)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}
