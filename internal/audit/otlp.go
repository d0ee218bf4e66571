package audit

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"

	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/telemetry/export"
)

// The attributes of an event sent as an OpenTelemetry log record, beside
// its body (the event's JSON) and its time (when the stream stored it).
// The call's ids are those of the executor's execute_tool span.
const (
	AttrSeq        = "toolbus.audit.seq"
	AttrSubject    = "toolbus.audit.subject"
	AttrKind       = "toolbus.audit.kind"
	AttrPrincipal  = "toolbus.audit.principal"
	AttrIncomplete = "toolbus.audit.incomplete"
	AttrInvocation = "toolbus.invocation.id"
	AttrCall       = "gen_ai.tool.call.id"
)

// OTLPSink sends an export's events as OpenTelemetry log records over
// OTLP/HTTP (protobuf), to the collector the standard variables name
// (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT,
// their headers, timeout, compression and certificates), each batch in
// one request: Write returns nil once the collector has accepted the
// whole batch, after the exporter's own retries. It is used by one
// goroutine at a time.
type OTLPSink struct {
	provider *sdklog.LoggerProvider
	logger   log.Logger
}

var _ Sink = (*OTLPSink)(nil)

// NewOTLPSink makes an OTLPSink whose records name service (unless
// OTEL_SERVICE_NAME names another). opts, when given, override the
// variables (a test's collector).
func NewOTLPSink(ctx context.Context, service string, opts ...otlploghttp.Option) (*OTLPSink, error) {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, fmt.Errorf("OTLP protocol %q: the audit export sends logs over http/protobuf", protocol)
	}
	exporter, err := otlploghttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("the OTLP log exporter: %w", err)
	}
	res, err := export.Resource(ctx, service)
	if err != nil {
		return nil, err
	}
	provider := sdklog.NewLoggerProvider(sdklog.WithProcessor(&heldProcessor{exporter: exporter}), sdklog.WithResource(res))
	return &OTLPSink{provider: provider, logger: provider.Logger("github.com/toolbus/toolbus/internal/audit")}, nil
}

// Write sends batch, one log record an event, and returns the
// collector's answer.
func (s *OTLPSink) Write(ctx context.Context, batch []Line) error {
	observed := time.Now()
	for _, l := range batch {
		s.logger.Emit(traced(ctx, l.Trace), logRecord(l, observed))
	}
	if err := s.provider.ForceFlush(ctx); err != nil {
		return fmt.Errorf("OTLP export of #%d..#%d: %w", batch[0].Seq, batch[len(batch)-1].Seq, err)
	}
	return nil
}

// traced is ctx in the trace traceparent names, which a log record
// emitted in it carries: the collector links the event to its call's
// span.
func traced(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return telemetry.Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Close shuts the exporter down.
func (s *OTLPSink) Close(ctx context.Context) error { return s.provider.Shutdown(ctx) }

// logRecord is l as a log record: its body the event's JSON as a string
// (as recorded, not turned into OpenTelemetry's values, whose numbers
// would not keep every JSON number whole), its event name the event's
// kind.
func logRecord(l Line, observed time.Time) log.Record {
	var r log.Record
	r.SetTimestamp(l.Time)
	r.SetObservedTimestamp(observed)
	r.SetSeverity(log.SeverityInfo)
	r.SetEventName(l.Kind)
	r.SetBody(attribute.StringValue(string(l.Event)))
	r.AddAttributes(attribute.Int64(AttrSeq, int64(l.Seq)), attribute.String(AttrSubject, l.Subject), attribute.String(AttrKind, l.Kind))
	for _, a := range []struct{ key, value string }{
		{AttrPrincipal, l.Principal}, {AttrInvocation, l.Invocation}, {AttrCall, l.Call}, {AttrIncomplete, l.Incomplete},
	} {
		if a.value != "" {
			r.AddAttributes(attribute.String(a.key, a.value))
		}
	}
	return r
}

// heldProcessor holds the records emitted until ForceFlush exports them
// in one request and returns the exporter's answer. The SDK's
// BatchProcessor also exports on its own, when its batch fills, and hands
// a failure of such an export to otel.Handle, not to ForceFlush: its
// ForceFlush returning nil would not say the collector took every
// record, which the export's checkpoint rests on.
type heldProcessor struct {
	exporter sdklog.Exporter
	held     []sdklog.Record
}

func (p *heldProcessor) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }

func (p *heldProcessor) OnEmit(_ context.Context, r *sdklog.Record) error {
	p.held = append(p.held, r.Clone())
	return nil
}

// ForceFlush exports what is held, and lets it go either way: a batch
// the collector did not take ends the export, which gives it again when
// it starts again.
func (p *heldProcessor) ForceFlush(ctx context.Context) error {
	if len(p.held) == 0 {
		return nil
	}
	err := p.exporter.Export(ctx, p.held)
	p.held = nil
	return err
}

func (p *heldProcessor) Shutdown(ctx context.Context) error { return p.exporter.Shutdown(ctx) }
