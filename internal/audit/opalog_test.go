package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/logs"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/redact"
)

// An export of the trail in OPA's decision-log shape is read back by
// OPA's own type of a decision-log event: a decision recorded on its own
// and one folded into a result, each with its id, input, result, policy
// revision, caller, time and trace; every other event passed over.
func TestDecisionLogIsReadByOPAsOwnType(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	header := func(id string) events.Header {
		return events.Header{ID: id, Time: at, Sender: events.Identity{ID: "executor@a", Role: "executor"}, Principal: "agent",
			Call: "call-" + id, Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	}
	alone := &events.Decision{Header: header("d1"), InvocationID: "inv-1", Tool: "write_file", Verdict: events.AskUser,
		Reason: "edit tools ask the user", PolicyRevision: "rev-1", Input: json.RawMessage(`{"tool":{"name":"write_file"},"args":{"token":"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}`)}
	folded := &events.Decision{Header: header("d2"), InvocationID: "inv-2", Tool: "read_file", Verdict: events.Allow,
		Reason: "read tools are allowed", PolicyRevision: "rev-1", Cached: true, Idempotent: true, Input: json.RawMessage(`{"tool":{"name":"read_file"}}`)}
	events.Stamp(folded) // as an executor folds it: an envelope of its own
	var lines []Line
	for i, ev := range []events.Envelope{
		&events.Invocation{Header: events.Header{ID: "inv-1", Sender: events.Identity{ID: "agent"}}, Tool: "write_file"},
		alone,
		&events.Result{Header: header("r2"), InvocationID: "inv-2", Tool: "read_file", Decision: folded},
		&events.Result{Header: header("r3"), InvocationID: "inv-3", Tool: "read_file"},
	} {
		data, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		kind := map[string]string{"tool.invocation": events.SubjectInvoke, "tool.decision": events.SubjectDecision, "tool.result": events.SubjectResult}[ev.EnvelopeType()]
		lines = append(lines, Line{Seq: uint64(i + 1), Subject: kind, Kind: kind, Event: redact.Default.JSON(data)})
	}
	var out bytes.Buffer
	if err := (&DecisionLogWriter{W: &out}).Write(context.Background(), lines); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 2 {
		t.Fatalf("%d decisions written, want 2:\n%s", len(got), out.String())
	}
	for i, want := range []*events.Decision{alone, folded} {
		var ev logs.EventV1
		if err := json.Unmarshal([]byte(got[i]), &ev); err != nil {
			t.Fatalf("OPA's EventV1 does not read %s: %v", got[i], err)
		}
		result, _ := (*ev.Result).(map[string]any)
		if ev.DecisionID != want.ID || ev.Path != "toolbus/decision" || ev.Bundles["toolbus"].Revision != "rev-1" ||
			ev.Labels["id"] != "executor@a" || ev.RequestedBy != "agent" || !ev.Timestamp.Equal(at) ||
			ev.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || ev.SpanID != "00f067aa0ba902b7" ||
			result["verdict"] != string(want.Verdict) || result["reason"] != want.Reason || ev.Input == nil {
			t.Errorf("decision %d as OPA reads it: %+v, result %v", i, ev, result)
		}
		trail, _ := ev.Custom["toolbus"].(map[string]any)
		if trail["invocation"] != want.InvocationID || trail["call"] != want.Call || trail["tool"] != want.Tool {
			t.Errorf("decision %d: custom.toolbus %v", i, trail)
		}
	}
	if strings.Contains(got[0], "ghp_abcdefghijklmnopqrstuvwxyz0123456789") {
		t.Errorf("a secret in a decision's input was written: %s", got[0])
	}
}

// A decision event that is not JSON stops the export with an error that
// names it, rather than pass it over: a decision log that lost one
// without a word would be believed whole.
func TestDecisionLogSaysWhatItCannotRead(t *testing.T) {
	err := (&DecisionLogWriter{W: &bytes.Buffer{}}).Write(context.Background(), []Line{{Seq: 7, Kind: events.SubjectDecision, Event: json.RawMessage(`"not a decision"`)}})
	if err == nil || !strings.Contains(err.Error(), "#7") {
		t.Errorf("a decision that is not one: %v", err)
	}
}
