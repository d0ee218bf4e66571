package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/tools/txtar"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/pkg/toolbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeModel replays recorded chat-completions responses in order, on
// loopback, and keeps the requests it got.
type fakeModel struct {
	*httptest.Server
	mu        sync.Mutex
	responses [][]byte
	requests  []chatRequest
}

func startModel(t *testing.T, recording string) *fakeModel {
	t.Helper()
	ar, err := txtar.ParseFile(filepath.Join("testdata", recording))
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeModel{}
	for _, f := range ar.Files {
		m.responses = append(m.responses, f.Data)
	}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer fake" {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		var req chatRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.requests) >= len(m.responses) {
			http.Error(w, "no more recorded responses", http.StatusInternalServerError)
			return
		}
		m.requests = append(m.requests, req)
		w.Header().Set("Content-Type", "application/json")
		w.Write(m.responses[len(m.requests)-1])
	}))
	t.Cleanup(m.Close)
	return m
}

func newLoop(t *testing.T, f *executortest.Fleet, m *fakeModel) *Loop {
	t.Helper()
	c, err := toolbus.Connect(context.Background(), f.Bus.URL(), toolbus.WithIdentity(toolbus.Identity{ID: "agent:example-test", Session: "s9"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Loop{Tools: c, ModelURL: m.URL + "/v1", Model: "gpt-4.1-mini", APIKey: "fake", HTTP: m.Client()}
}

func TestToolCallRoundTrip(t *testing.T) {
	f := executortest.Start(t)
	m := startModel(t, "readme.txtar")
	loop := newLoop(t, f, m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	answer, err := loop.Run(ctx, "What does README.md say?")
	if err != nil {
		t.Fatal(err)
	}
	if answer != "README.md is a single heading: hello." {
		t.Errorf("answer %q", answer)
	}
	if len(m.requests) != 2 {
		t.Fatalf("%d model requests, want 2", len(m.requests))
	}
	// The first request offered the fleet's tools, in OpenAI's shape.
	first := m.requests[0]
	offered := map[string]bool{}
	for _, d := range first.Tools {
		var decl struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(d, &decl); err != nil || decl.Type != "function" || len(decl.Function.Parameters) == 0 {
			t.Errorf("declaration %s: %v", d, err)
		}
		offered[decl.Function.Name] = true
	}
	if !offered["read_file"] || !offered["run_shell_command"] {
		t.Errorf("the model was offered %v", offered)
	}
	// The second carried the tool's result, answering the model's call.
	second := m.requests[1]
	last := second.Messages[len(second.Messages)-1]
	if last.Role != "tool" || last.ToolCallID != "call_readme" || last.Content == nil || *last.Content != "# hello\n" {
		t.Errorf("the second request ends with %+v", last)
	}
	if prev := second.Messages[len(second.Messages)-2]; prev.Role != "assistant" || len(prev.ToolCalls) != 1 {
		t.Errorf("the model's own tool call is not in the conversation: %+v", prev)
	}
	// The call went through toolbus, as the agent: the audit stream has it.
	inv := audited(t, f, events.SubjectInvoke+".*", func(inv *events.Invocation) bool { return inv.Tool == "read_file" })
	if inv.Tool != "read_file" || inv.Sender.ID != "agent:example-test" || inv.Sender.Session != "s9" {
		t.Errorf("audited invocation: %+v", inv)
	}
	res := audited(t, f, events.SubjectResult, func(res *events.Result) bool { return res.InvocationID == inv.ID })
	if res.InvocationID != inv.ID || res.Error != nil || res.LLMContent != "# hello\n" {
		t.Errorf("audited result: %+v", res)
	}
}

// TestFailuresGoBackToTheModel: a denied call and an unknown tool do not
// end the loop; the model reads why.
func TestFailuresGoBackToTheModel(t *testing.T) {
	f := executortest.Start(t)
	m := startModel(t, "denied.txtar")
	loop := newLoop(t, f, m)
	var trace strings.Builder
	loop.Trace = &trace
	answer, err := loop.Run(context.Background(), "clean up")
	if err != nil {
		t.Fatal(err)
	}
	if answer != "I may not do that." || len(m.requests) != 2 {
		t.Fatalf("answer %q after %d requests", answer, len(m.requests))
	}
	msgs := m.requests[1].Messages
	results := map[string]string{}
	for _, msg := range msgs {
		if msg.Role == "tool" && msg.Content != nil {
			results[msg.ToolCallID] = *msg.Content
		}
	}
	if r := results["call_rm"]; !strings.Contains(r, "POLICY_DENIED") || !strings.Contains(r, "recursive removal of /") {
		t.Errorf("denied call told the model %q", r)
	}
	if r := results["call_nope"]; !strings.Contains(r, "TOOL_NOT_FOUND") || !strings.Contains(r, "read_file") {
		t.Errorf("unknown tool told the model %q", r)
	}
	if !strings.Contains(trace.String(), "tool run_shell_command") {
		t.Errorf("trace %q", trace.String())
	}
}

func TestModelErrors(t *testing.T) {
	f := executortest.Start(t)
	m := startModel(t, "readme.txtar")
	loop := newLoop(t, f, m)
	loop.APIKey = "wrong"
	if _, err := loop.Run(context.Background(), "hi"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("a refused model request: %v", err)
	}
	loop.APIKey = "fake"
	loop.MaxTurns = 1
	if _, err := loop.Run(context.Background(), "hi"); err != ErrTooManyTurns {
		t.Errorf("one turn for a tool call: %v, want ErrTooManyTurns", err)
	}
}

// audited polls the audit stream until the last event on subject is one
// that match accepts: the stream stores events a moment after they are
// sent.
func audited[T any, PT interface {
	*T
	events.Envelope
}](t *testing.T, f *executortest.Fleet, subject string, match func(PT) bool) PT {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := f.Bus.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	var last PT
	for ctx.Err() == nil {
		if msg, err := stream.GetLastMsgForSubject(ctx, subject); err == nil {
			if last, err = events.Decode[T, PT](msg.Data); err != nil {
				t.Fatal(err)
			}
			if match(last) {
				return last
			}
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline, not synchronising
	}
	t.Fatalf("audit stream, %s: no matching event in 10s; the last was %+v", subject, last)
	return nil
}
