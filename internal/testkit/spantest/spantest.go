// Package spantest gives a test an OpenTelemetry tracer provider that
// keeps every span it records in memory, to read back.
//
// Only tests import this package.
package spantest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// New is a provider that records every span, synchronously, into the
// exporter it returns; it is shut down when the test ends.
func New(tb testing.TB) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	tb.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tb.Cleanup(func() { tp.Shutdown(context.Background()) })
	return spans, tp
}

// Global is New set up as OpenTelemetry's global provider, the one the
// parts that are given none trace with, until the test ends. A test that
// calls it must not run in parallel with another that traces.
func Global(tb testing.TB) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	tb.Helper()
	spans, tp := New(tb)
	before := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	tb.Cleanup(func() { otel.SetTracerProvider(before) })
	return spans, tp
}
