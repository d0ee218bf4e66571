package telemetry

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// span starts a recorded span and returns its context.
func span(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, s := tp.Tracer("test").Start(context.Background(), "caller")
	t.Cleanup(func() { s.End() })
	return ctx, s.SpanContext()
}

// The trace context crosses each carrier whole: NATS headers, a process's
// environment and an MCP request's _meta.
func TestTheTraceCrossesEveryCarrier(t *testing.T) {
	ctx, sc := span(t)
	m := nats.NewMsg("tool.invoke")
	m.Header = nil
	ToHeader(ctx, m)
	if got := trace.SpanContextFromContext(FromHeader(context.Background(), m.Header)); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Errorf("through headers %v: %v, want %v", m.Header, got, sc)
	}
	env := Env(ctx)
	getenv := func(k string) string {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v
			}
		}
		return ""
	}
	if !regexp.MustCompile(`^TRACEPARENT=00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`).MatchString(strings.Join(env, "")) {
		t.Errorf("environment %v", env)
	}
	if got := trace.SpanContextFromContext(FromEnv(context.Background(), getenv)); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() {
		t.Errorf("through the environment %v: %v", env, got)
	}
	meta := ToMeta(ctx, map[string]any{"progressToken": 1})
	if got := trace.SpanContextFromContext(FromMeta(context.Background(), meta)); got.TraceID() != sc.TraceID() || meta["progressToken"] != 1 {
		t.Errorf("through _meta %v: %v", meta, got)
	}
	// No context, nothing written.
	bare := nats.NewMsg("x")
	ToHeader(context.Background(), bare)
	if len(bare.Header) != 0 || Env(context.Background()) != nil || ToMeta(context.Background(), nil) != nil {
		t.Error("a context with no trace wrote one")
	}
}

// Whatever a caller puts in the headers, reading them never panics, and
// gives a parent only when it is a well-formed trace context.
func FuzzTraceContextFromHeader(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "a=b,c")
	f.Add("", "")
	wellFormed := regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}`)
	f.Fuzz(func(t *testing.T, traceparent, tracestate string) {
		h := nats.Header{}
		h.Set("traceparent", traceparent)
		h.Set("tracestate", tracestate)
		sc := trace.SpanContextFromContext(FromHeader(context.Background(), h))
		if sc.IsValid() && !wellFormed.MatchString(traceparent) {
			t.Errorf("%q gave a parent %v", traceparent, sc)
		}
		meta := map[string]any{"traceparent": traceparent, "tracestate": 7}
		if sm := trace.SpanContextFromContext(FromMeta(context.Background(), meta)); sm.IsValid() != sc.IsValid() {
			t.Errorf("%q: _meta and headers disagree", traceparent)
		}
	})
}
