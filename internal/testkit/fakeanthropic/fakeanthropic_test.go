package fakeanthropic

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
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

// assembled is a streamed message put together as a client does: each
// block from its start and deltas, and the stop reason.
type assembled struct {
	blocks []map[string]any
	stop   string
	events []string
}

func assemble(t *testing.T, body string) assembled {
	t.Helper()
	var a assembled
	inputs := map[int]*strings.Builder{}
	sc := bufio.NewScanner(strings.NewReader(body))
	var name string
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
			a.events = append(a.events, n)
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type         string         `json:"type"`
			Index        int            `json:"index"`
			ContentBlock map[string]any `json:"content_block"`
			Delta        map[string]any `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != name {
			t.Fatalf("event %s has data %q (%v)", name, data, err)
		}
		switch ev.Type {
		case "content_block_start":
			a.blocks = append(a.blocks, ev.ContentBlock)
			inputs[ev.Index] = &strings.Builder{}
		case "content_block_delta":
			b := a.blocks[ev.Index]
			switch ev.Delta["type"] {
			case "text_delta":
				b["text"] = b["text"].(string) + ev.Delta["text"].(string)
			case "input_json_delta":
				inputs[ev.Index].WriteString(ev.Delta["partial_json"].(string))
			}
		case "content_block_stop":
			if s := inputs[ev.Index].String(); s != "" {
				var input map[string]any
				if err := json.Unmarshal([]byte(s), &input); err != nil {
					t.Fatalf("tool input %q: %v", s, err)
				}
				a.blocks[ev.Index]["input"] = input
			}
		case "message_delta":
			a.stop, _ = ev.Delta["stop_reason"].(string)
		}
	}
	return a
}

// One tool round, streamed as the API streams it: the tool is called
// where it is declared, the final text follows its result, and any other
// request gets a short text; a request without stream gets one message.
func TestOneToolRound(t *testing.T) {
	s := Start(t, Script{Tool: "mcp__toolbus__write_file", Input: map[string]any{"file_path": "a.md"}, Final: "Done."})
	tools := `"tools":[{"name":"Read"},{"name":"mcp__toolbus__write_file"}]`

	code, body := post(t, s, "/v1/messages", `{"model":"m","stream":true,`+tools+`,"messages":[{"role":"user","content":"write"}]}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	got := assemble(t, body)
	if want := "message_start content_block_start content_block_delta content_block_stop message_delta message_stop"; strings.Join(got.events, " ") != want {
		t.Errorf("events %q, want %q", got.events, want)
	}
	if len(got.blocks) != 1 || got.blocks[0]["type"] != "tool_use" || got.blocks[0]["name"] != "mcp__toolbus__write_file" || got.stop != "tool_use" {
		t.Fatalf("got %+v, stop %q; want one tool_use of the tool", got.blocks, got.stop)
	}
	if in, _ := got.blocks[0]["input"].(map[string]any); in["file_path"] != "a.md" {
		t.Errorf("the call's input is %v", got.blocks[0]["input"])
	}
	id := got.blocks[0]["id"].(string)

	result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","is_error":true,"content":[{"type":"text","text":"POLICY_DENIED: no"}]}]}`
	_, body = post(t, s, "/v1/messages", `{"model":"m","stream":true,`+tools+`,"messages":[{"role":"user","content":"write"},{"role":"assistant","content":[]},`+result+`]}`)
	if got := assemble(t, body); len(got.blocks) != 1 || got.blocks[0]["text"] != "Done." || got.stop != "end_turn" {
		t.Errorf("after the result: %+v, stop %q; want the final text", got.blocks, got.stop)
	}
	if rs := s.ToolResults(); len(rs) != 1 || rs[0].ToolUseID != id || !rs[0].IsError || rs[0].Text != "POLICY_DENIED: no" {
		t.Errorf("tool results %+v", rs)
	}

	_, body = post(t, s, "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"a title, please"}]}`)
	var msg struct {
		Type    string           `json:"type"`
		Content []map[string]any `json:"content"`
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Type != "message" || len(msg.Content) != 1 || msg.Content[0]["text"] != "ok" {
		t.Errorf("a side request without stream: %q (%v)", body, err)
	}
	if s.Calls() != 1 {
		t.Errorf("the tool was called %d times, want once", s.Calls())
	}
	if code, _ := post(t, s, "/v1/unknown", `{}`); code != http.StatusNotFound || len(s.Unknown()) != 1 {
		t.Errorf("an unknown path: %d, unknown %q", code, s.Unknown())
	}
}
