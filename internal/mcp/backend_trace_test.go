package mcp_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/spantest"
)

// A call of an MCP server's tool reaches the server with the call's
// trace context in its _meta (MCP's SEP-414), naming the executor's
// tools/call span (OpenTelemetry's MCP conventions, the client's side),
// itself under the call's execute stage: the server's spans join the
// agent's trace.
func TestABackendRequestCarriesItsCallsTrace(t *testing.T) {
	spans, tp := spantest.Global(t)

	var mu sync.Mutex
	var seen []string
	backend := server.NewMCPServer("traced", "1.0.0")
	backend.AddTool(mcp.NewTool("echo_trace", mcp.WithDescription("says nothing"), mcp.WithReadOnlyHintAnnotation(true)),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if req.Params.Meta != nil {
				tp, _ := req.Params.Meta.AdditionalFields["traceparent"].(string)
				seen = append(seen, tp)
			}
			return mcp.NewToolResultText("ok"), nil
		})
	url := httpServer(t, backend, nil)
	f := startFleet(t, parse(t, `{"mcpServers": {"traced": {"httpUrl": "`+url+`", "trust": true}}}`))
	f.waitTool(t, "echo_trace")

	ctx, agent := tp.Tracer("agent").Start(context.Background(), "agent turn")
	res, err := f.client.Invoke(ctx, &events.Invocation{Tool: "echo_trace", Args: json.RawMessage(`{}`)}, nil)
	agent.End()
	if err != nil || res.Error != nil {
		t.Fatalf("call: %v %+v", err, res)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	testkit.Eventually(t, "the call's spans end", func() bool {
		for _, s := range spans.GetSpans().Snapshots() {
			if s.SpanContext().TraceID() == agent.SpanContext().TraceID() {
				byName[s.Name()] = s
			}
		}
		return byName["execute_tool echo_trace"] != nil
	})
	request, execute, call := byName["tools/call echo_trace"], byName["toolbus.execute"], byName["execute_tool echo_trace"]
	if request == nil || execute == nil {
		t.Fatalf("spans of the trace: %v", byName)
	}
	if request.Parent().SpanID() != execute.SpanContext().SpanID() || execute.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Errorf("the request's span is not under the call's execute stage")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := telemetry.TraceParent(request.SpanContext()); len(seen) != 1 || seen[0] != want {
		t.Errorf("the server was sent traceparent %q; want %q, the request's span", seen, want)
	}
}
