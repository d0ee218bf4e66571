package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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

// sent is one delivery as it came over the wire.
type sent struct {
	header http.Header
	body   []byte
}

// TestTheReceiverTakesWhatToolbusSends: a call that waits for a person is
// delivered by toolbus's notifier to this receiver, over HTTP, and taken;
// the same delivery with its body changed, with an old timestamp (signed
// anew, as a replay of an old one), or under another secret is refused,
// and a repeat is taken once.
func TestTheReceiverTakesWhatToolbusSends(t *testing.T) {
	secret := []byte("the-example-receivers-secret-32b")
	f := executortest.Start(t, func(c *executor.Config) { c.ConfirmTimeout = time.Hour })
	conn := bustest.Connect(t, f.Bus)
	seat, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{
		Identity: events.Identity{ID: "approver:ada", Role: "approver"}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(seat.Stop)

	var mu sync.Mutex
	var taken []Payload
	var wire []sent
	rc := &Receiver{Secret: secret, Handle: func(p Payload) { mu.Lock(); taken = append(taken, p); mu.Unlock() }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		wire = append(wire, sent{r.Header.Clone(), body})
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rc.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	n, err := notify.New(notify.Config{URL: srv.URL, Secret: secret, Console: "http://127.0.0.1:7878/", Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); n.Run(ctx, seat) }()
	t.Cleanup(func() { cancel(); <-ran })

	done := make(chan *events.Result, 1)
	go func() {
		res, err := f.Client.Invoke(context.Background(), &events.Invocation{Header: events.Header{ID: "inv-hook"}, Tool: "write_file",
			Args: json.RawMessage(`{"file_path":"hook.txt","content":"x"}`)}, nil)
		if err != nil {
			res = &events.Result{Error: &events.ToolError{Type: "CLIENT", Message: err.Error()}}
		}
		done <- res
	}()
	testkit.Eventually(t, "the receiver took a delivery", func() bool { return n.Stats().Delivered == 1 })
	mu.Lock()
	p, d := taken[0], wire[0]
	mu.Unlock()
	if p.InvocationID != "inv-hook" || p.Tool != "write_file" || !strings.HasPrefix(p.Link, "http://127.0.0.1:7878/#request=") || p.Caller.ID != f.Caller.ID {
		t.Errorf("the receiver took %+v", p)
	}

	now := time.Now()
	post := func(h http.Header, body []byte) int {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header = h
		w := httptest.NewRecorder()
		rc.ServeHTTP(w, req)
		return w.Code
	}
	if err := Verify(secret, d.header, d.body, now, Tolerance); err != nil {
		t.Fatalf("the delivery as sent does not verify: %v", err)
	}
	tampered := bytes.Replace(d.body, []byte(`"write_file"`), []byte(`"read_file"`), 1)
	if bytes.Equal(tampered, d.body) {
		t.Fatal("the test's tampering changed nothing")
	}
	if err := Verify(secret, d.header, tampered, now, Tolerance); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a tampered body: %v, want ErrBadSignature", err)
	}
	if code := post(d.header, tampered); code != http.StatusUnauthorized {
		t.Errorf("a tampered body got %d, want 401", code)
	}
	old := d.header.Clone()
	oldTS := strconv.FormatInt(now.Add(-Tolerance-time.Minute).Unix(), 10)
	old.Set(notify.HeaderTimestamp, oldTS)
	old.Set(notify.HeaderSignature, notify.Sign(secret, oldTS, d.body))
	if err := Verify(secret, old, d.body, now, Tolerance); !errors.Is(err, ErrStale) {
		t.Errorf("an old timestamp: %v, want ErrStale", err)
	}
	if code := post(old, d.body); code != http.StatusUnauthorized {
		t.Errorf("an old delivery got %d, want 401", code)
	}
	moved := d.header.Clone()
	moved.Set(notify.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10)) // the signature is of the other time
	if err := Verify(secret, moved, d.body, now, Tolerance); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed timestamp: %v, want ErrBadSignature", err)
	}
	if err := Verify([]byte("another-secret-of-enough-bytes!!"), d.header, d.body, now, Tolerance); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another secret: %v, want ErrBadSignature", err)
	}
	unsigned := d.header.Clone()
	unsigned.Del(notify.HeaderSignature)
	if code := post(unsigned, d.body); code != http.StatusUnauthorized {
		t.Errorf("an unsigned delivery got %d, want 401", code)
	}
	if code := post(d.header, d.body); code != http.StatusNoContent {
		t.Errorf("a repeat got %d, want 204", code)
	}
	mu.Lock()
	if len(taken) != 1 {
		t.Errorf("the receiver handled %d payloads, want 1 (a repeat is taken once, the rest refused)", len(taken))
	}
	mu.Unlock()

	s, _ := seat.Snapshot()
	for _, r := range s.Pending {
		seat.Answer(context.Background(), r.AnswerTo, approve.Answer{Outcome: events.Cancel})
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the call never returned")
	}
}
