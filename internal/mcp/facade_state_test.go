package mcp_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toolmcp "github.com/toolbus/toolbus/internal/mcp"
)

// A sealed requestState is honoured until its expiry only: a retry that
// carries an expired one, with its user's accept, is refused saying so,
// and the call it names does not run.
func TestFacadeRefusesAnExpiredRequestState(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	toolmcp.SetRequestStateLife(ff.facade, -time.Minute)
	canAsk := map[string]any{"elicitation": map[string]any{}}
	args := map[string]any{"file_path": "late.md", "content": "too late\n"}
	first := modernPost(t, ff.url, "honest", "tools/call", map[string]any{"name": "write_file", "arguments": args}, canAsk)
	result, _ := first["result"].(map[string]any)
	state, _ := result["requestState"].(string)
	if result["resultType"] != "input_required" || state == "" {
		t.Fatalf("the first request got %v; want an input-required result with a state", first)
	}
	accept := map[string]any{"toolbus_approval": map[string]any{"action": "accept"}}
	got := modernPost(t, ff.url, "honest", "tools/call", map[string]any{"name": "write_file", "arguments": args, "inputResponses": accept, "requestState": state}, canAsk)
	e, _ := got["error"].(map[string]any)
	if msg, _ := e["message"].(string); !strings.Contains(msg, "requestState has expired") {
		t.Errorf("the retry with an expired state got %v; want an error: the state has expired", got)
	}
	if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "late.md")); err == nil {
		t.Fatal("an expired state's accept ran the call")
	}
}

// A state sealed for one caller, presented by another, is answered as a
// state the facade never sealed, byte for byte, expired or not: it tells
// the other caller nothing of the call it names.
func TestFacadeAnswersAnotherCallersStateAsAForgedOne(t *testing.T) {
	t.Parallel()
	for _, life := range []time.Duration{time.Hour, -time.Minute} {
		ff := startFacade(t, nil, "")
		toolmcp.SetRequestStateLife(ff.facade, life)
		canAsk := map[string]any{"elicitation": map[string]any{}}
		args := map[string]any{"file_path": "notes.md", "content": "mine\n"}
		first := modernPost(t, ff.url, "honest", "tools/call", map[string]any{"name": "write_file", "arguments": args}, canAsk)
		state, _ := first["result"].(map[string]any)["requestState"].(string)
		if state == "" {
			t.Fatalf("the first request got %v; want a state", first)
		}
		accept := map[string]any{"toolbus_approval": map[string]any{"action": "accept"}}
		retry := func(caller, state string) string {
			got := modernPost(t, ff.url, caller, "tools/call", map[string]any{"name": "write_file", "arguments": args, "inputResponses": accept, "requestState": state}, canAsk)
			if got["error"] == nil {
				t.Fatalf("state life %s: the retry of %s was taken: %v", life, caller, got)
			}
			b, _ := json.Marshal(got["error"])
			return string(b)
		}
		forged, theirs := retry("intruder", state+"-TAMPERED"), retry("intruder", state)
		if forged != theirs {
			t.Errorf("state life %s: another caller's state is answered %s, a forged one %s", life, theirs, forged)
		}
		if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "notes.md")); err == nil {
			t.Fatalf("state life %s: another caller's retry ran the call", life)
		}
	}
}
