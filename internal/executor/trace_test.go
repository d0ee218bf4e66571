package executor

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/spantest"
)

// spansOf is what an in-memory exporter holds, by name, once the span
// named last has ended (a moment after the caller has its result).
func spansOf(t *testing.T, spans *tracetest.InMemoryExporter, last string) map[string]tracetest.SpanStub {
	t.Helper()
	byName := map[string]tracetest.SpanStub{}
	testkit.Eventually(t, "the span "+last+" ends", func() bool {
		for _, s := range spans.GetSpans() {
			byName[s.Name] = s
		}
		_, ok := byName[last]
		return ok
	})
	return byName
}

func attrsOf(s tracetest.SpanStub) map[string]string {
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	return attrs
}

// A call made under a caller's span is run under an execute_tool span of
// the same trace, the caller's span its parent, named and attributed by
// OpenTelemetry's GenAI conventions; under it, one span per stage of the
// pipeline, the policy's with its verdict and reason. The trail's record
// of the call names the span: an auditor goes from the entry to the
// trace, and from the trace to the entry.
func TestACallIsASpanOfItsCallersTrace(t *testing.T) {
	t.Parallel()
	spans, tp := spantest.New(t)
	e := newEnv(t, func(c *Config) { c.Traces = tp })
	ctx, caller := tp.Tracer("agent").Start(context.Background(), "agent turn")
	res, err := e.client.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
	caller.End()
	if err != nil || res.Error != nil {
		t.Fatalf("call: %v %+v", err, res)
	}
	byName := spansOf(t, spans, "execute_tool read_file")
	call := byName["execute_tool read_file"]
	if call.Parent.SpanID() != caller.SpanContext().SpanID() || call.SpanContext.TraceID() != caller.SpanContext().TraceID() {
		t.Errorf("the call's span is not the caller's child: parent %v, trace %v", call.Parent.SpanID(), call.SpanContext.TraceID())
	}
	attrs := attrsOf(call)
	if attrs["gen_ai.operation.name"] != "execute_tool" || attrs["gen_ai.tool.name"] != "read_file" || attrs["gen_ai.tool.call.id"] == "" ||
		attrs["toolbus.invocation.id"] != res.InvocationID || attrs["toolbus.policy.verdict"] != "ALLOW" {
		t.Errorf("attributes %v", attrs)
	}
	for _, stage := range []string{"toolbus.admit", "toolbus.validate", "toolbus.policy", "toolbus.execute", "toolbus.record"} {
		s, ok := byName[stage]
		if !ok {
			t.Errorf("no %s span among %v", stage, names(spans))
			continue
		}
		if s.Parent.SpanID() != call.SpanContext.SpanID() {
			t.Errorf("%s is not a child of the call's span", stage)
		}
	}
	if p := attrsOf(byName["toolbus.policy"]); p["toolbus.policy.verdict"] != "ALLOW" || p["toolbus.policy.reason"] == "" || p["toolbus.policy.revision"] == "" {
		t.Errorf("the policy's span does not say what it decided: %v", p)
	}

	// From the trail to the trace, and back.
	var recs []*audit.Record
	testkit.Eventually(t, "the trail holds the call's result", func() bool {
		recs, _, err = audit.Read(context.Background(), e.bus.JetStream(), audit.Query{Trace: call.SpanContext.TraceID().String()})
		return err == nil && len(recs) == 1 && recs[0].Outcome != audit.OutcomePending
	})
	if want := telemetry.TraceParent(call.SpanContext); recs[0].Trace != want || recs[0].ID != res.InvocationID || recs[0].Call != attrs["gen_ai.tool.call.id"] {
		t.Errorf("the trail's record %+v names trace %q, call %q; want %q, %q", recs[0], recs[0].Trace, recs[0].Call, want, attrs["gen_ai.tool.call.id"])
	}
}

// A call that asks a person has a confirm span that says who answered
// and how; a call without a trace context starts a trace of its own.
func TestAConfirmationSpanSaysWhoAnswered(t *testing.T) {
	t.Parallel()
	spans, tp := spantest.New(t)
	e := newEnv(t, func(c *Config) { c.Traces = tp })
	startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer {
		return &events.ConfirmAnswer{Outcome: events.ProceedOnce, Person: "Ada Lovelace"}
	})
	if res := e.call(t, "write_file", `{"file_path":"notes.md","content":"v1"}`); res.Error != nil {
		t.Fatalf("call: %s", res.LLMContent)
	}
	byName := spansOf(t, spans, "execute_tool write_file")
	call := byName["execute_tool write_file"]
	if call.Parent.IsValid() {
		t.Errorf("a call with no trace context has a parent: %v", call.Parent)
	}
	confirm, ok := byName["toolbus.confirm"]
	if !ok {
		t.Fatalf("no confirm span among %v", names(spans))
	}
	a := attrsOf(confirm)
	if confirm.Parent.SpanID() != call.SpanContext.SpanID() || a["toolbus.confirm.outcome"] != string(events.ProceedOnce) ||
		a["toolbus.confirm.approver"] != "approver:ada" || a["toolbus.confirm.people"] != `["Ada Lovelace"]` {
		t.Errorf("the confirm span: parent %v, attributes %v", confirm.Parent.SpanID(), a)
	}
	if p := attrsOf(byName["toolbus.policy"]); p["toolbus.policy.verdict"] != "ASK_USER" {
		t.Errorf("the policy's span: %v", p)
	}
}

// A caller's trace context names a parent and grants nothing: a
// malformed one is ignored, and a call that carries another trace's
// context joins that trace and runs as any other call would.
func TestATraceContextGrantsNothing(t *testing.T) {
	t.Parallel()
	spans, tp := spantest.New(t)
	e := newEnv(t, func(c *Config) { c.Traces = tp })
	for _, parent := range []string{"00-zz-yy-01", "00-00000000000000000000000000000000-0000000000000000-01", "garbage", ""} {
		ctx := telemetry.FromMeta(context.Background(), map[string]any{"traceparent": parent})
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("traceparent %q was taken for a parent", parent)
		}
	}
	// A write, which asks a person, with a parent that is well formed
	// and made up: still asked, and with no approver, denied.
	ctx := telemetry.FromMeta(context.Background(), map[string]any{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	res, err := e.client.Invoke(ctx, &events.Invocation{Tool: "write_file", Args: json.RawMessage(`{"file_path":"x.md","content":"x"}`)}, nil)
	if err != nil || res.Error == nil || res.Error.Type != events.ErrPolicyDenied {
		t.Fatalf("a write under a made-up parent: %v %+v", err, res)
	}
	call := spansOf(t, spans, "execute_tool write_file")["execute_tool write_file"]
	if call.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("the call did not join the trace it named: %v", call.SpanContext.TraceID())
	}
	// A tool the catalogue does not have names no span: the names in a
	// trace store are the catalogue's, not the caller's.
	made := "made_up_" + strings.Repeat("x", 200)
	if res, err := e.client.Invoke(context.Background(), &events.Invocation{Tool: made, Args: json.RawMessage(`{}`)}, nil); err != nil || res.Error == nil {
		t.Fatalf("a made-up tool: %v %+v", err, res)
	}
	unknown := spansOf(t, spans, "execute_tool")["execute_tool"]
	if a := attrsOf(unknown); a["gen_ai.tool.name"] != "(unknown)" {
		t.Errorf("a made-up tool's span: %v", a)
	}
	for _, name := range names(spans) {
		if strings.Contains(name, "made_up") {
			t.Errorf("a span is named after a tool the caller made up: %.40s…", name)
		}
	}
}

func names(spans *tracetest.InMemoryExporter) []string {
	var out []string
	for _, s := range spans.GetSpans() {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}
