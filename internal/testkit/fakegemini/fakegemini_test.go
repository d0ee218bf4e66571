package fakegemini

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// post sends body to the fake's path and returns the status and the
// response body.
func post(t *testing.T, s *Server, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(s.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// modelParts decodes a generateContent response's first candidate's parts.
func modelParts(t *testing.T, data string) []map[string]any {
	t.Helper()
	var resp struct {
		Candidates []struct {
			Content struct {
				Role  string           `json:"role"`
				Parts []map[string]any `json:"parts"`
			} `json:"content"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(data), &resp); err != nil {
		t.Fatalf("response %q: %v", data, err)
	}
	if len(resp.Candidates) != 1 || resp.Candidates[0].Content.Role != "model" {
		t.Fatalf("response %q, want one candidate from the model", data)
	}
	return resp.Candidates[0].Content.Parts
}

// sseData returns the data of the only event of an SSE body.
func sseData(t *testing.T, body string) string {
	t.Helper()
	var data []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	if len(data) != 1 {
		t.Fatalf("SSE body %q, want one data line", body)
	}
	return data[0]
}

const (
	question = `{"contents":[{"role":"user","parts":[{"text":"read it"}]}],
		"tools":[{"functionDeclarations":[{"name":"mcp_x_read"},{"name":"other"}]}]}`
	answered = `{"contents":[{"role":"user","parts":[{"text":"read it"}]},
		{"role":"model","parts":[{"functionCall":{"name":"mcp_x_read","args":{"path":"a"}}}]},
		{"role":"user","parts":[{"functionResponse":{"id":"1","name":"mcp_x_read","response":{"output":"the text"}}}]}],
		"tools":[{"functionDeclarations":[{"name":"mcp_x_read"}]}]}`
)

func TestScript(t *testing.T) {
	s := Start(t, Script{Tool: "mcp_x_read", Args: map[string]any{"path": "a"}, Final: "all read"})

	code, body := post(t, s, "/v1beta/models/m:streamGenerateContent?alt=sse", question)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	parts := modelParts(t, sseData(t, body))
	call, _ := parts[0]["functionCall"].(map[string]any)
	if len(parts) != 1 || call["name"] != "mcp_x_read" || call["args"].(map[string]any)["path"] != "a" {
		t.Errorf("first answer %v, want the scripted call", parts)
	}

	code, body = post(t, s, "/v1beta/models/m:generateContent", answered)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if parts := modelParts(t, body); len(parts) != 1 || parts[0]["text"] != "all read" {
		t.Errorf("answer after the tool's result %v, want the final text", parts)
	}

	responses := s.FunctionResponses()
	if len(responses) != 1 || responses[0].Name != "mcp_x_read" || string(responses[0].Response) != `{"output":"the text"}` {
		t.Errorf("FunctionResponses = %+v, want the one sent", responses)
	}
	if got, want := s.ToolNames(), []string{"mcp_x_read", "other"}; !slices.Equal(got, want) {
		t.Errorf("ToolNames = %v, want %v", got, want)
	}
	if n := len(s.Requests()); n != 2 {
		t.Errorf("%d requests recorded, want 2", n)
	}
}

func TestUnknownAndBad(t *testing.T) {
	s := Start(t, Script{Tool: "t", Final: "f"})
	if code, _ := post(t, s, "/v1beta/models/m:embedContent", "{}"); code != http.StatusNotFound {
		t.Errorf("unknown action: status %d, want 404", code)
	}
	if code, _ := post(t, s, "/v1beta/models/m:generateContent", "not json"); code != http.StatusBadRequest {
		t.Errorf("a body that is not JSON: status %d, want 400", code)
	}
	if got := s.Unknown(); len(got) != 1 || got[0] != "POST /v1beta/models/m:embedContent" {
		t.Errorf("Unknown = %q, want the embedContent request", got)
	}
}
