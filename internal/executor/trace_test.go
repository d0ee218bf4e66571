package executor

import (
	"context"
	"encoding/json"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// A call made under a caller's span is run under an execute_tool span of
// the same trace, the caller's span its parent, named and attributed by
// OpenTelemetry's GenAI conventions, with the verdict.
func TestACallIsASpanOfItsCallersTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	e := newEnv(t, func(c *Config) { c.Traces = tp })
	ctx, caller := tp.Tracer("agent").Start(context.Background(), "agent turn")
	res, err := e.client.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
	caller.End()
	if err != nil || res.Error != nil {
		t.Fatalf("call: %v %+v", err, res)
	}
	// The span ends once the result is sent: a moment after the caller
	// has it.
	testkit.Eventually(t, "the call's span ends", func() bool {
		for _, s := range spans.GetSpans() {
			if s.Name == "execute_tool read_file" {
				return true
			}
		}
		return false
	})
	var found bool
	for _, s := range spans.GetSpans() {
		if s.Name != "execute_tool read_file" {
			continue
		}
		found = true
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if s.Parent.SpanID() != caller.SpanContext().SpanID() || s.SpanContext.TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("the call's span is not the caller's child: parent %v, trace %v", s.Parent.SpanID(), s.SpanContext.TraceID())
		}
		if attrs["gen_ai.operation.name"] != "execute_tool" || attrs["gen_ai.tool.name"] != "read_file" || attrs["gen_ai.tool.call.id"] == "" ||
			attrs["toolbus.invocation.id"] != res.InvocationID || attrs["toolbus.policy.verdict"] != "ALLOW" {
			t.Errorf("attributes %v", attrs)
		}
	}
	if !found {
		t.Fatalf("no execute_tool span among %d", len(spans.GetSpans()))
	}
}
