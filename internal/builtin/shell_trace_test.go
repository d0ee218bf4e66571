package builtin

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A shell line runs in its call's trace: TRACEPARENT names the call's
// span, and never the executor's own, which a line run outside a trace
// does not see either.
func TestAShellLineSeesItsCallsTrace(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01") // the executor's own
	_, _, tools := shellEnv(t)
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "execute_tool run_shell_command")
	defer span.End()
	out, err := shellCall(t, ctx, tools, `echo "tp=$TRACEPARENT"`)
	want := "tp=00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if err != nil || !strings.Contains(out.LLMContent, want) {
		t.Errorf("in a trace: %v %q, want %q", err, out.LLMContent, want)
	}
	out, err = shellCall(t, context.Background(), tools, `echo "tp=$TRACEPARENT."`)
	if err != nil || !strings.Contains(out.LLMContent, "tp=.") {
		t.Errorf("outside a trace: %v %q, want no TRACEPARENT", err, out.LLMContent)
	}
}
