// Package fakegemini is a scripted stand-in for the Gemini API, so that the
// real Gemini CLI can run in a test without the network: point the CLI at
// it with GOOGLE_GEMINI_BASE_URL.
//
// The script is one tool round: the model's first answer calls a named
// tool; once a request's last turn carries a functionResponse, the model
// answers with a final text. Every request is recorded, so a test can check
// what reached the model. A path the fake does not know is logged loudly and
// answered 404, so that what is missing is easy to see.
//
// Only tests import this package.
package fakegemini

import (
	"bytes"
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
	// Tool is the name of the function the model calls, as the CLI
	// declared it in the request's tools.
	Tool string
	// Args are the call's arguments.
	Args map[string]any
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
	// URL is the base URL to give the CLI (GOOGLE_GEMINI_BASE_URL).
	URL string

	t      testing.TB
	script Script

	mu       sync.Mutex
	requests []Request
	unknown  []string
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

// FunctionResponses returns the functionResponse parts, as sent, of every
// model request that carried one: what the model was told the tool
// returned.
func (s *Server) FunctionResponses() []FunctionResponse {
	var out []FunctionResponse
	for _, r := range s.Requests() {
		var body generateRequest
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		for _, c := range body.Contents {
			for _, p := range c.Parts {
				if p.FunctionResponse != nil {
					out = append(out, *p.FunctionResponse)
				}
			}
		}
	}
	return out
}

// ToolNames returns the function names the CLI declared to the model in
// its requests, deduplicated, in order of first appearance.
func (s *Server) ToolNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, r := range s.Requests() {
		var body generateRequest
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		for _, tool := range body.Tools {
			for _, d := range tool.FunctionDeclarations {
				if !seen[d.Name] {
					seen[d.Name] = true
					names = append(names, d.Name)
				}
			}
		}
	}
	return names
}

// FunctionResponse is a tool result as the CLI reports it to the model.
type FunctionResponse struct {
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

// generateRequest is the part of a generateContent request the fake reads.
type generateRequest struct {
	Contents []struct {
		Role  string `json:"role"`
		Parts []struct {
			Text             string            `json:"text,omitempty"`
			FunctionResponse *FunctionResponse `json:"functionResponse,omitempty"`
		} `json:"parts"`
	} `json:"contents"`
	Tools []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
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

	// Paths look like /v1beta/models/gemini-2.5-pro:streamGenerateContent.
	_, action, _ := strings.Cut(r.URL.Path, ":")
	switch {
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/models/") && action == "streamGenerateContent":
		s.answer(w, body, true)
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/models/") && action == "generateContent":
		s.answer(w, body, false)
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/models/") && action == "countTokens":
		writeJSON(w, map[string]any{"totalTokens": len(body) / 4})
	default:
		s.mu.Lock()
		s.unknown = append(s.unknown, r.Method+" "+r.URL.String())
		s.mu.Unlock()
		s.t.Logf("fakegemini: UNKNOWN REQUEST %s %s (answered 404): %.300s", r.Method, r.URL, body)
		http.Error(w, "fakegemini does not know "+r.URL.Path, http.StatusNotFound)
	}
}

// answer replies to a generateContent request: the scripted call, or the
// final text once the request holds the call's functionResponse.
func (s *Server) answer(w http.ResponseWriter, body []byte, stream bool) {
	var req generateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.t.Logf("fakegemini: bad request body: %v: %.300s", err, body)
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var part map[string]any
	if s.hasResponse(req) {
		part = map[string]any{"text": s.script.Final}
	} else {
		part = map[string]any{"functionCall": map[string]any{"name": s.script.Tool, "args": s.script.Args}}
	}
	resp := map[string]any{
		"candidates": []any{map[string]any{
			"content":      map[string]any{"role": "model", "parts": []any{part}},
			"finishReason": "STOP",
			"index":        0,
		}},
		"usageMetadata": map[string]any{"promptTokenCount": len(body) / 4, "candidatesTokenCount": 8, "totalTokenCount": len(body)/4 + 8},
		"modelVersion":  "fakegemini",
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	data, err := json.Marshal(resp)
	if err != nil {
		panic(err) // a map of strings and numbers always encodes
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: %s\r\n\r\n", data)
}

// hasResponse reports whether the conversation's last turn returns a
// tool's result. Any tool's will do: were the CLI to answer under another
// name (a tool it did not find), calling again would loop until the test's
// timeout, and the test checks the name in FunctionResponses anyway.
func (s *Server) hasResponse(req generateRequest) bool {
	if len(req.Contents) == 0 {
		return false
	}
	for _, p := range req.Contents[len(req.Contents)-1].Parts {
		if p.FunctionResponse != nil {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		panic(err) // the fake's own values always encode
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(buf.Bytes())
}
