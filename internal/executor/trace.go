package executor

import (
	"cmp"
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/telemetry"
)

// A call's trace (docs/tracing.md): one execute_tool span, named and
// attributed by OpenTelemetry's GenAI conventions, the child of the
// caller's span when the invocation's headers carry its trace context;
// under it one span per stage of the pipeline (the stages below). The
// headers are the caller's claim: they name a parent, and grant nothing.
// The tool's name in a span is the catalogue's, never the caller's: a
// caller naming tools that do not exist must not fill a trace store with
// names of its making.
//
// With no tracer provider set up (the default), a call starts no span,
// and pays for reading its headers' trace context alone; stages of a
// call whose span records nothing start none.

// Stages of the pipeline, as spans (toolbus.<stage>) and as the
// metrics' stage label (Observer.Stage).
const (
	stageAdmit    = "admit"    // accepted: the caller bound, its key taken, a worker found, the invocation's record stored
	stageValidate = "validate" // the arguments against the tool's schema and its own checks
	stagePolicy   = "policy"   // the policy's decision
	stageConfirm  = "confirm"  // waiting for a person's answer
	stageExecute  = "execute"  // the tool's run
	stageRecord   = "record"   // the trail storing what the result waits for
)

// begin gives c its context and its execute_tool span; with tracing off,
// the context carries the caller's trace context alone, for what the
// call passes it on to.
func (c *call) begin(h nats.Header) {
	c.began = time.Now()
	c.ctx = telemetry.FromHeader(context.Background(), h)
	if c.e.tracer == nil {
		c.span = trace.SpanFromContext(c.ctx)
	} else if c.ctx, c.span = c.e.tracer.Start(c.ctx, spanName("execute_tool", c.tool), trace.WithSpanKind(trace.SpanKindServer)); c.span.IsRecording() {
		c.span.SetAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", cmp.Or(nameOf(c.tool), "(unknown)")),
			attribute.String("gen_ai.tool.call.id", c.id),
			attribute.String("toolbus.invocation.id", c.inv.ID),
			attribute.String("toolbus.caller", c.principal))
		// The trail's events of the call name its span: an auditor goes
		// from an entry to its trace, and back (gen_ai.tool.call.id).
		c.trace = telemetry.TraceParent(c.span.SpanContext())
	}
	c.ctx, c.cancel = context.WithCancelCause(c.ctx)
}

// spanName is operation's span name for a call of t: the operation and
// the catalogue's name of the tool, or the operation alone for a tool the
// catalogue does not have.
func spanName(operation string, t *events.Tool) string {
	if name := nameOf(t); name != "" {
		return operation + " " + name
	}
	return operation
}

// stage is one stage of a call under way: its span, when the call is
// traced, and its start, for the metrics.
type stage struct {
	c     *call
	name  string
	start time.Time
	span  trace.Span // nil when the call's span records nothing
}

// stage starts the stage name of c, begun at start.
func (c *call) stage(name string, start time.Time) stage {
	s := stage{c: c, name: name, start: start}
	if c.span.IsRecording() {
		_, s.span = c.e.tracer.Start(c.ctx, "toolbus."+name, trace.WithTimestamp(start))
	}
	return s
}

// context is ctx under the stage's span, for what the stage calls: a
// tool's backend request, its process's TRACEPARENT.
func (s stage) context(ctx context.Context) context.Context {
	if s.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, s.span)
}

// end ends the stage, with the stop that ended the call in it, if any.
func (s stage) end(st *stop) {
	if st == nil {
		s.endAs(nil)
		return
	}
	s.endAs(&events.ToolError{Type: st.Type})
}

// endAs ends the stage, failed with failure when it is not nil.
func (s stage) endAs(failure *events.ToolError) {
	s.c.e.observer.Stage(s.name, time.Since(s.start))
	if s.span == nil {
		return
	}
	if failure != nil {
		s.span.SetStatus(codes.Error, string(failure.Type))
		s.span.SetAttributes(attribute.String("error.type", string(failure.Type)))
	}
	s.span.End()
}

// decided attributes the policy stage with the decision.
func (s stage) decided(v *events.PolicyVerdict) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(
		attribute.String("toolbus.policy.verdict", string(v.Verdict)),
		attribute.String("toolbus.policy.reason", v.Reason),
		attribute.String("toolbus.policy.revision", v.Revision),
		attribute.Bool("toolbus.policy.cached", v.Cached))
}

// answered attributes the confirm stage with the answer acted on: its
// outcome, the approver that sent it, and the people who answered.
func (s stage) answered(a *events.ConfirmAnswer, people []string) {
	if s.span == nil || a == nil {
		return
	}
	s.span.SetAttributes(
		attribute.String("toolbus.confirm.outcome", string(a.Outcome)),
		attribute.String("toolbus.confirm.approver", a.Sender.ID),
		attribute.StringSlice("toolbus.confirm.people", people))
}

// finish attributes c's span with how the call ended; the span ends
// when end returns.
func (c *call) finish(res *events.Result) {
	if !c.span.IsRecording() {
		return
	}
	if res.Error != nil {
		c.span.SetStatus(codes.Error, string(res.Error.Type))
		c.span.SetAttributes(attribute.String("error.type", string(res.Error.Type)))
	}
	if c.verdict.Verdict != "" {
		c.span.SetAttributes(attribute.String("toolbus.policy.verdict", string(c.verdict.Verdict)))
	}
}

// forwarding is the span of a call this executor sends to host, which
// runs it: a child of the caller's, whose context goes along in fwd's
// headers, so the other executor's execute_tool span is its child. With
// tracing off, the caller's context goes along as it came.
func (e *Executor) forwarding(h nats.Header, fwd *nats.Msg, t *events.Tool, host string) trace.Span {
	ctx := telemetry.FromHeader(context.Background(), h)
	span := trace.SpanFromContext(ctx)
	if e.tracer != nil {
		ctx, span = e.tracer.Start(ctx, spanName("toolbus.forward", t), trace.WithSpanKind(trace.SpanKindProducer))
		if span.IsRecording() {
			span.SetAttributes(attribute.String("gen_ai.tool.name", t.Name), attribute.String("toolbus.executor", host))
		}
	}
	telemetry.ToHeader(ctx, fwd)
	return span
}
