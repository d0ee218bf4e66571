package mcp_test

import (
	"context"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/spantest"
)

// A tools/call whose _meta carries the client's trace context (MCP's
// SEP-414) is served under a tools/call span, the client's child, and the
// executor runs it under an execute_tool span, the facade's child: one
// trace from the agent to the tool.
func TestAFacadeCallJoinsItsClientsTrace(t *testing.T) {
	spans, _ := spantest.Global(t)
	ff := startFacade(t, nil, "")
	c := ff.connect(t, "traced")
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req := mcp.CallToolRequest{}
	req.Params.Name = "read_file"
	req.Params.Arguments = map[string]any{"file_path": "README.md"}
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "00-" + traceID + "-" + parentID + "-01"}}
	res, err := c.CallTool(context.Background(), req)
	if err != nil || res.IsError {
		t.Fatalf("read_file: %v %+v", err, res)
	}
	var facade, executor sdktrace.ReadOnlySpan
	testkit.Eventually(t, "both spans end", func() bool {
		for _, s := range spans.GetSpans().Snapshots() {
			if s.SpanContext().TraceID().String() != traceID {
				continue
			}
			switch s.Name() {
			case "tools/call read_file":
				facade = s
			case "execute_tool read_file":
				executor = s
			}
		}
		return facade != nil && executor != nil
	})
	if facade.Parent().SpanID().String() != parentID {
		t.Errorf("the facade's span has parent %s, want the client's %s", facade.Parent().SpanID(), parentID)
	}
	if executor.Parent().SpanID() != facade.SpanContext().SpanID() {
		t.Errorf("the executor's span has parent %s, want the facade's %s", executor.Parent().SpanID(), facade.SpanContext().SpanID())
	}
}

// A call of a 2026-07-28 client that asks its user outlives the request
// that started it (the client's retry carries the answer): it stays in
// the trace that request named.
func TestAHeldCallStaysInItsClientsTrace(t *testing.T) {
	spans, _ := spantest.Global(t)
	ff := startFacade(t, nil, "")
	user := &userAtClient{answer: respond(mcp.ElicitationResponseActionAccept, nil)}
	c := ff.connectModern(t, "modern-traced", mcpclient.WithElicitationHandler(user))
	const traceID = "6e0c63257de34c92bf9efcd03927272e"
	req := mcp.CallToolRequest{}
	req.Params.Name = "write_file"
	req.Params.Arguments = map[string]any{"file_path": "notes.md", "content": "traced\n"}
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}}
	res, err := c.CallTool(context.Background(), req)
	if err != nil || res.IsError {
		t.Fatalf("an accepted edit: %v %+v", err, res)
	}
	testkit.Eventually(t, "the executor's span of the edit is in the client's trace", func() bool {
		for _, s := range spans.GetSpans().Snapshots() {
			if s.Name() == "execute_tool write_file" {
				return s.SpanContext().TraceID().String() == traceID
			}
		}
		return false
	})
}
