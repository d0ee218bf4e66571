// Package fakeanthropic is a scripted stand-in for the Anthropic Messages
// API, so that the real Claude Code can run in a test without the
// network: point it at the fake with ANTHROPIC_BASE_URL.
//
// The script is one tool round: in a conversation that declares the
// scripted tool, the model's first answer calls it; once a request's last
// turn carries the call's tool_result, the model answers with a final
// text. Any other request to /v1/messages (Claude Code asks small side
// questions of its own, such as a title for the session) is answered with
// a short text. Answers stream as server-sent events, as the real API
// streams them, or come as one JSON message when the request does not ask
// for a stream. Every request is recorded, so a test can check what
// reached the model. A path the fake does not know is logged loudly and
// answered 404, so that what is missing is easy to see.
//
// Only tests import this package.
package fakeanthropic

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Script is what the fake model says.
type Script struct {
	// Tool is the name of the tool the model calls, as the client
	// declared it in the request's tools (Claude Code names an MCP tool
	// mcp__<server>__<tool>).
	Tool string
	// Input is the call's input.
	Input map[string]any
	// Final is the model's text once the tool's result has come back.
	Final string
}

// Request is one request the fake received.
type Request struct {
	Method, Path string
	Body         []byte
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL to give the client (ANTHROPIC_BASE_URL).
	URL string

	t      testing.TB
	script Script

	mu       sync.Mutex
	requests []Request
	unknown  []string
	calls    int
}

// Start serves script on a loopback port until the test ends.
func Start(t testing.TB, script Script) *Server {
	t.Helper()
	s := &Server{t: t, script: script}
	ts := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// Requests returns a copy of every request received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Unknown lists the requests the fake could not answer ("METHOD path").
func (s *Server) Unknown() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unknown...)
}

// Calls is how many times the model asked for the scripted tool.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// ToolResult is a tool's result as the client reports it to the model.
type ToolResult struct {
	ToolUseID string `json:"tool_use_id"`
	IsError   bool   `json:"is_error,omitempty"`
	// Text is the result's text blocks, joined.
	Text string `json:"-"`
}

// ToolResults returns the tool_result blocks of every request that
// carried one, as the client sent them: what the model was told the tool
// returned.
func (s *Server) ToolResults() []ToolResult {
	var out []ToolResult
	for _, r := range s.Requests() {
		var body messagesRequest
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		for _, m := range body.Messages {
			for _, b := range m.blocks() {
				if b.Type == "tool_result" {
					out = append(out, ToolResult{ToolUseID: b.ToolUseID, IsError: b.IsError, Text: b.text()})
				}
			}
		}
	}
	return out
}

// ToolNames returns the tool names the client declared to the model,
// deduplicated, in order of first appearance.
func (s *Server) ToolNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, r := range s.Requests() {
		var body messagesRequest
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		for _, tool := range body.Tools {
			if !seen[tool.Name] {
				seen[tool.Name] = true
				names = append(names, tool.Name)
			}
		}
	}
	return names
}

// messagesRequest is the part of a Messages API request the fake reads.
type messagesRequest struct {
	Model    string    `json:"model"`
	Stream   bool      `json:"stream"`
	Messages []message `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// message is one turn; its content is a string or a list of blocks.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// block is a content block of a turn.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"` // of a tool_result: a string or blocks
}

func (m message) blocks() []block {
	var blocks []block
	if json.Unmarshal(m.Content, &blocks) != nil {
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			return []block{{Type: "text", Text: text}}
		}
	}
	return blocks
}

// text is a tool_result's text.
func (b block) text() string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []block
	_ = json.Unmarshal(b.Content, &parts)
	var out strings.Builder
	for _, p := range parts {
		out.WriteString(p.Text)
	}
	return out.String()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Body: body})
	s.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.answer(w, body)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		writeJSON(w, map[string]any{"input_tokens": len(body) / 4})
	default:
		s.mu.Lock()
		s.unknown = append(s.unknown, r.Method+" "+r.URL.String())
		s.mu.Unlock()
		s.t.Logf("fakeanthropic: UNKNOWN REQUEST %s %s (answered 404): %.300s", r.Method, r.URL, body)
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"fakeanthropic does not know this path"}}`, http.StatusNotFound)
	}
}

// answer replies to a Messages request: the scripted call in a
// conversation that declares the tool, the final text once the call's
// result came back, and a short text to anything else.
func (s *Server) answer(w http.ResponseWriter, body []byte) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.t.Logf("fakeanthropic: bad request body: %v: %.300s", err, body)
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad request body"}}`, http.StatusBadRequest)
		return
	}
	content := []map[string]any{{"type": "text", "text": "ok"}}
	stop := "end_turn"
	switch {
	case !s.declares(req):
	case s.answered(req):
		content[0]["text"] = s.script.Final
	default:
		s.mu.Lock()
		s.calls++
		id := fmt.Sprintf("toolu_fake%02d", s.calls)
		s.mu.Unlock()
		content = []map[string]any{{"type": "tool_use", "id": id, "name": s.script.Tool, "input": s.script.Input}}
		stop = "tool_use"
	}
	model := req.Model
	if model == "" {
		model = "claude-fake"
	}
	usage := map[string]any{"input_tokens": len(body) / 4, "output_tokens": 8}
	if !req.Stream {
		writeJSON(w, map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	event := func(name string, data map[string]any) {
		data["type"] = name
		payload, _ := json.Marshal(data) // maps of strings and numbers encode
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, payload)
	}
	event("message_start", map[string]any{"message": map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": len(body) / 4, "output_tokens": 1}}})
	for i, b := range content {
		switch b["type"] {
		case "tool_use":
			input, _ := json.Marshal(b["input"])
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		default:
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 8}})
	event("message_stop", map[string]any{})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// declares reports whether req offers the model the scripted tool.
func (s *Server) declares(req messagesRequest) bool {
	for _, t := range req.Tools {
		if t.Name == s.script.Tool {
			return true
		}
	}
	return false
}

// answered reports whether req's last turn carries a tool's result.
func (s *Server) answered(req messagesRequest) bool {
	if len(req.Messages) == 0 {
		return false
	}
	for _, b := range req.Messages[len(req.Messages)-1].blocks() {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
