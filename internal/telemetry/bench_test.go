package telemetry

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// What a call pays for tracing when it is off, as the executor begins it
// (call.begin): its headers' trace context read, none there, and no span
// started; against a span started and ended on the no-op provider, what
// it would pay were the tracer always called.
// go test ./internal/telemetry -run '^$' -bench SpanOff
func BenchmarkSpanOff(b *testing.B) {
	h := nats.Header{"Nats-Msg-Id": []string{"x"}} // an invocation's headers, with no trace context
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx := FromHeader(context.Background(), h)
			if trace.SpanFromContext(ctx).IsRecording() {
				b.Fatal("a span records with tracing off")
			}
		}
	})
	b.Run("no-op-span", func(b *testing.B) {
		tracer := unset.Tracer("github.com/toolbus/toolbus")
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(FromHeader(context.Background(), h), "execute_tool read_file", trace.WithSpanKind(trace.SpanKindServer))
			span.End()
		}
	})
}
