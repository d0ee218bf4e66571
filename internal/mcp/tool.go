package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/tool"
)

// serverTool is one tool of an MCP server (seed 000 DiscoveredMCPTool),
// as an executor hosts it: a call goes to the server's current session
// under the tool's own name on the server.
type serverTool struct {
	srv  *server
	name string // the tool's name on the server
	spec events.ToolSpec
	// left says what of the server's declaration the spec leaves out,
	// and why.
	left []string
}

// newServerTool declares def, a tool the server listed: its title,
// annotations, outputSchema, icons and _meta go into the catalogue as
// the server sent them, within their bound (events.MaxMCPDeclaration).
func newServerTool(srv *server, def listedTool) (*serverTool, error) {
	if def.Execution != nil && def.Execution.TaskSupport == mcp.TaskSupportRequired {
		// The spec has a server refuse (-32601) a call of such a tool
		// that is not a task, and toolbus calls no tool as a task:
		// hosted, it would fail every call a model made of it.
		return nil, fmt.Errorf("tool %q: it can only be called as a task (execution.taskSupport %q), which toolbus does not do",
			def.Name, def.Execution.TaskSupport)
	}
	params, err := json.Marshal(def.InputSchema)
	if len(def.RawInputSchema) > 0 {
		params, err = def.RawInputSchema, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tool %q: input schema: %w", def.Name, err)
	}
	readOnly := def.Annotations.ReadOnlyHint != nil && *def.Annotations.ReadOnlyHint
	kind := events.KindOther
	if readOnly {
		kind = events.KindRead
	}
	spec := events.ToolSpec{
		Name: def.Name,
		// Seed 000: "<tool> (<server> MCP Server)".
		DisplayName:     fmt.Sprintf("%s (%s MCP Server)", def.Name, srv.cfg.Name),
		Description:     def.Description,
		Kind:            kind,
		Parameters:      params,
		ReadOnly:        readOnly,
		ConcurrencySafe: readOnly,
		Annotations:     def.annotations,
		OutputMarkdown:  true,
		MCPDeclaration: events.MCPDeclaration{Title: def.Title, OutputSchema: def.RawOutputSchema,
			Icons: def.icons, Meta: def.meta},
	}
	// Trimmed here as the registry would: a register request is one
	// message a tool, and one of megabytes would fail the server's set.
	left := spec.TrimMCPDeclaration()
	return &serverTool{srv: srv, name: def.Name, spec: spec, left: left}, nil
}

// Spec implements tool.Tool.
func (t *serverTool) Spec() events.ToolSpec { return t.spec }

// Origin implements tool.Origin.
func (t *serverTool) Origin() (events.Source, string, bool) {
	return events.SourceMCP, t.srv.cfg.Name, t.srv.cfg.Trust
}

// Timeout implements tool.Timeouter: calls run under the server's
// timeout.
func (t *serverTool) Timeout() time.Duration { return t.srv.cfg.Timeout }

// Run implements tool.Tool: it calls the tool on the server, with a
// progress token when the caller takes progress. A server that is not
// connected fails the call at once; a cancel or deadline ends the
// request, and the server is told (notifications/cancelled).
func (t *serverTool) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	sess := t.srv.current()
	if sess == nil {
		return tool.Failed(events.ErrExecutionFailed, t.srv.unavailable()), nil
	}
	if call.Ask != nil && t.srv.cfg.Transport == HTTP {
		// The server's requests during the call may come on a stream
		// of the session that names no call: on the caller's own
		// session they still name the caller (callersession.go).
		if own, release := t.srv.callerSession(ctx, callerKey(call.Caller), call.ServerRequests); own != nil {
			defer release()
			sess = own
		}
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = t.name
	req.Params.Arguments = call.Args
	// Every call carries a token of its own, by which its progress, its
	// server's log messages and its server's requests find it.
	token := sess.newToken()
	ctx, span := t.requestSpan(ctx)
	defer span.End()
	// The call's trace goes to the server with it (MCP's SEP-414): the
	// server's spans are this request's children.
	req.Params.Meta = &mcp.Meta{ProgressToken: token, AdditionalFields: telemetry.ToMeta(ctx, nil)}
	ctx = context.WithValue(ctx, callToken{}, token)
	defer sess.track(token, call.Log)()
	defer sess.watchAsks(token, call.Ask)()
	if call.Progress != nil {
		defer sess.watchProgress(token, func(p mcp.ProgressNotificationParams) { call.Progress(progressLine(p)) })()
	}
	res, err := sess.client.CallTool(ctx, req)
	switch {
	case err == nil:
		if res.IsError {
			span.SetStatus(codes.Error, "tool_error")
			span.SetAttributes(attribute.String("error.type", "tool_error"))
		}
		return Output(t.srv.cfg.Name, t.name, res), nil
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	}
	lost := false
	select {
	case <-sess.dead:
		err = fmt.Errorf("the server went away during the call: %w", sess.cause)
		lost = true
	default:
		// An error the server answered with leaves the session as it
		// was; one of the connection (an HTTP session the server
		// forgot, a stream cut) does not, and a ping tells which.
		t.srv.check(sess)
		if lost = sess.ended(); lost {
			// The transport saw the server go before the session did:
			// the same loss, said the same way.
			err = fmt.Errorf("the server went away during the call: %w", err)
		}
	}
	msg := fmt.Sprintf("MCP tool %q of server %q failed: %v", t.name, t.srv.cfg.Name, err)
	span.SetStatus(codes.Error, msg)
	span.SetAttributes(attribute.String("error.type", "request_failed"))
	out := tool.Failed(events.ErrExecutionFailed, msg)
	out.ServerLost = lost
	return out, nil
}

// AwaitRestart implements tool.Restarter: it waits until the server has
// a session that has not ended, the one its runner connected after the
// last ended.
func (t *serverTool) AwaitRestart(ctx context.Context) error {
	return t.srv.awaitSession(ctx)
}

// progressLine is a progress notification as live output.
func progressLine(p mcp.ProgressNotificationParams) string {
	var b strings.Builder
	b.WriteString("[progress ")
	b.WriteString(strconv.FormatFloat(p.Progress, 'f', -1, 64))
	if p.Total > 0 {
		b.WriteString("/" + strconv.FormatFloat(p.Total, 'f', -1, 64))
	}
	b.WriteString("]")
	if p.Message != "" {
		b.WriteString(" " + p.Message)
	}
	b.WriteString("\n")
	return b.String()
}

// requestSpan starts the span of a tools/call this executor sends its
// server (OpenTelemetry's MCP conventions, the client's side), a child of
// the call's, made by the provider that made the call's: an executor
// given its own (executor.Config.Traces) traces its requests with it.
func (t *serverTool) requestSpan(ctx context.Context) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return telemetry.TracerOf(parent.TracerProvider()).Start(ctx, "tools/call "+t.name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", t.name),
			attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("toolbus.mcp.server", t.srv.cfg.Name)))
}
