// Package telemetry is toolbus's OpenTelemetry tracing on the API alone
// (a caller that links it links no SDK or exporter; the commands set the
// provider up: internal/telemetry/export): the tracer, and the carriers a call's trace
// context crosses toolbus's parts in: NATS message headers, a process's
// environment (TRACEPARENT) and an MCP request's _meta (traceparent,
// tracestate, baggage: MCP's SEP-414). Metrics stay on Prometheus
// (internal/metrics).
package telemetry

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is the W3C trace context and baggage, which toolbus reads
// and writes in every carrier.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// TracerOf is toolbus's tracer of tp, or of OpenTelemetry's global
// provider when tp is nil; nil when tp is nil and no provider was set up
// (internal/telemetry/export): tracing is off, and a call starts no
// span, while the trace context it carries still goes on. A provider
// must be set up before the part that traces with it starts.
func TracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		if tp = otel.GetTracerProvider(); tp == unset {
			return nil
		}
	}
	return tp.Tracer("github.com/toolbus/toolbus")
}

// unset is OpenTelemetry's global provider as it is until a process sets
// one: a no-op, which would still cost every call a span's start
// (BenchmarkSpanOff).
var unset = otel.GetTracerProvider()

// TraceParent is sc as a W3C traceparent: version, trace id, span id
// and flags.
func TraceParent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// headerCarrier is a NATS message's headers as a TextMapCarrier.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return nats.Header(h).Get(key) }
func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// ToHeader writes ctx's trace context into a message's headers, making
// them when m has none; nothing when ctx carries none.
func ToHeader(ctx context.Context, m *nats.Msg) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	Propagator.Inject(ctx, headerCarrier(m.Header))
}

// FromHeader is ctx with the trace context a message's headers carry,
// as the parent of what follows. The headers are a caller's claim: a
// malformed traceparent is ignored, and a well-formed one names a parent
// only, never grants anything.
func FromHeader(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return Propagator.Extract(ctx, headerCarrier(h))
}

// Env is ctx's trace context as a process's environment: TRACEPARENT
// (and TRACESTATE, BAGGAGE), OpenTelemetry's carrier for a child
// process; nil when ctx carries none.
func Env(ctx context.Context) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	var env []string
	for k, v := range c {
		env = append(env, strings.ToUpper(k)+"="+v)
	}
	return env
}

// EnvFor is environ for a child process of ctx's call: without the
// trace context environ carries (the parent process's own), with ctx's.
// environ is left as it is.
func EnvFor(ctx context.Context, environ []string) []string {
	env := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "TRACEPARENT=") && !strings.HasPrefix(kv, "TRACESTATE=") && !strings.HasPrefix(kv, "BAGGAGE=") {
			env = append(env, kv)
		}
	}
	return append(env, Env(ctx)...)
}

// TraceParentOf is ctx's trace context as a W3C traceparent, "" when ctx
// carries none.
func TraceParentOf(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return TraceParent(sc)
}

// FromEnv is ctx with the trace context getenv's TRACEPARENT (and
// TRACESTATE, BAGGAGE) carry: how `toolbus call` joins the trace of the
// agent that runs it.
func FromEnv(ctx context.Context, getenv func(string) string) context.Context {
	c := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate", "baggage"} {
		if v := getenv(strings.ToUpper(k)); v != "" {
			c[k] = v
		}
	}
	return Propagator.Extract(ctx, c)
}

// ToMeta writes ctx's trace context into an MCP request's _meta, making
// it when meta is nil; it returns the map.
func ToMeta(ctx context.Context, meta map[string]any) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	if meta == nil {
		meta = map[string]any{}
	}
	for k, v := range c {
		meta[k] = v
	}
	return meta
}

// FromMeta is ctx with the trace context an MCP request's _meta carries;
// values that are not strings are ignored.
func FromMeta(ctx context.Context, meta map[string]any) context.Context {
	c := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate", "baggage"} {
		if v, ok := meta[k].(string); ok && v != "" {
			c[k] = v
		}
	}
	if len(c) == 0 {
		return ctx
	}
	return Propagator.Extract(ctx, c)
}
