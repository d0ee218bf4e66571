// Package export sets up a process's OpenTelemetry tracer provider from
// the standard OTEL_* variables: off unless they ask for an OTLP
// exporter. Only the commands link it (the SDK and the exporters).
package export

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/toolbus/toolbus/internal/telemetry"
)

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
	otel.SetTextMapPropagator(telemetry.Propagator)
	switch exporter := strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "", "otlp", "none":
	default:
		return nil, fmt.Errorf("traces: OTEL_TRACES_EXPORTER %q: toolbus exports traces by otlp, or none", exporter)
	}
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
		return nil, fmt.Errorf("traces: OTEL_EXPORTER_OTLP_PROTOCOL %q: toolbus exports traces over http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("traces: the OTLP exporter: %w", err)
	}
	res, err := Resource(ctx, service)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// Resource is what a process's telemetry says of its source: the SDK's
// defaults, service as the service's name, and what OTEL_SERVICE_NAME
// (which names the service over service) and OTEL_RESOURCE_ATTRIBUTES
// add.
func Resource(ctx context.Context, service string) (*resource.Resource, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, err
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	return res, nil
}
