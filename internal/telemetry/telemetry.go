// Package telemetry is toolbus's OpenTelemetry tracing: the tracer
// provider each process sets up from the standard OTEL_* variables (off
// unless they ask for an exporter), and the carriers a call's trace
// context crosses toolbus's parts in: NATS message headers, a process's
// environment (TRACEPARENT) and an MCP request's _meta (traceparent,
// tracestate, baggage: MCP's SEP-414). Metrics stay on Prometheus
// (internal/metrics).
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is the W3C trace context and baggage, which toolbus reads
// and writes in every carrier.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracer is toolbus's tracer: a no-op until Setup installs a provider.
func Tracer() trace.Tracer { return otel.Tracer("github.com/toolbus/toolbus") }

// Enabled says whether the environment asks for traces: an OTLP exporter
// named (OTEL_TRACES_EXPORTER=otlp) or an OTLP endpoint given, unless the
// SDK is disabled (OTEL_SDK_DISABLED=true) or the exporter is "none".
// getenv is os.Getenv but in tests.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exporter := strings.ToLower(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return false
	case "otlp":
		return true
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false
	}
}

// Setup installs the tracer provider of this process, named service,
// when the environment asks for traces (Enabled), with an OTLP exporter
// over HTTP or gRPC as OTEL_EXPORTER_OTLP_PROTOCOL says (http/protobuf
// by default, as OpenTelemetry's specification has it); the exporter,
// the sampler (OTEL_TRACES_SAMPLER) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) read the rest of the
// OTEL_* variables themselves. The propagator is set either way, so a
// process that records nothing still passes its callers' context on.
// shutdown flushes what is buffered.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator)
	if !Enabled(os.Getenv) {
		return func(context.Context) error { return nil }, nil
	}
	var exporter sdktrace.SpanExporter
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: toolbus exports traces over http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, err
	}
	// OTEL_SERVICE_NAME, when set, names the service over service.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
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
