package main

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/testkit/jaeger"
	"github.com/toolbus/toolbus/internal/testkit/mcpsession"
	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// An operator follows one call in Jaeger from their agent's trace into
// toolbus and out to the MCP server, and goes from the trail's entry to
// its trace: an MCP client of protocol 2026-07-28 sends a tools/call
// whose _meta names its span (SEP-414) to `toolbus mcp serve`; the call
// of server-everything's echo, from a server the fleet does not trust,
// asks the client's user, who accepts; every part exports its spans over
// OTLP to a real Jaeger. And `toolbus call`, run by an agent that names
// its span in TRACEPARENT, joins that trace.
func TestOneTraceFromAnMCPClientToTheServer(t *testing.T) {
	t.Parallel()
	j := jaeger.Start(t)
	traced := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.OTLP, "OTEL_BSP_SCHEDULE_DELAY=100"}
	command, args := npmpeer.EverythingStdio(t)
	settings, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"everything": map[string]any{"command": command, "args": args}}})
	if err != nil {
		t.Fatal(err)
	}
	up := startDaemonWith(t, traced, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", t.TempDir(),
		"--console", "off", "--settings", writeFile(t, "settings.json", string(settings)))
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	waitStatus(t, url, "everything", "connected", connected)

	asked := make(chan string, 4)
	tr := transport.NewStdio(bin("toolbus"), append(append(os.Environ(), "TOOLBUS_NATS="), traced...), "mcp", "serve", "--nats", url)
	// The server/discover probe waits for the command to start and
	// connect, which a loaded machine can take longer than mcp-go's 5 s
	// for: a bound on a wait, not a measurement.
	agent := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(acceptingUser(asked)), mcpclient.WithDiscoverTimeout(connectWait))
	mcpsession.InitializeModern(t, agent, "traced-agent", "1.0")
	const traceID, agentSpan = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
	req := mcp.CallToolRequest{}
	req.Params.Name = "echo"
	req.Params.Arguments = map[string]any{"message": "traced"}
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "00-" + traceID + "-" + agentSpan + "-01"}}
	res, err := agent.CallTool(context.Background(), req)
	if err != nil || res.IsError || mcpsession.Text(res) != "Echo: traced" {
		t.Fatalf("echo: %v %+v", err, res)
	}
	if len(asked) != 1 {
		t.Errorf("the user was asked %d times, want once", len(asked))
	}

	spans := j.Trace(t, traceID, func(spans []jaeger.Span) bool {
		return len(named(spans, "tools/call echo")) >= 2 && len(named(spans, "execute_tool echo")) == 1 && len(named(spans, "toolbus.record")) == 1
	})
	byID := map[string]*jaeger.Span{}
	for i := range spans {
		byID[spans[i].SpanID] = &spans[i]
	}
	call := named(spans, "execute_tool echo")[0]
	facade, backend := byKind(named(spans, "tools/call echo"), "server"), byKind(named(spans, "tools/call echo"), "client")
	if len(facade) == 0 || len(backend) != 1 {
		t.Fatalf("tools/call spans: %d of the facade, %d to the server; want some and one", len(facade), len(backend))
	}
	for _, f := range facade {
		if f.Parent() != agentSpan || f.Tag("mcp.method.name") != "tools/call" {
			t.Errorf("the facade's span %s has parent %s and mcp.method.name %q; want the agent's %s, tools/call", f.SpanID, f.Parent(), f.Tag("mcp.method.name"), agentSpan)
		}
	}
	if p := byID[call.Parent()]; p == nil || p.OperationName != "tools/call echo" || p.Tag("span.kind") != "server" {
		t.Errorf("the executor's span is not the facade's child: parent %s", call.Parent())
	}
	if call.Tag("gen_ai.tool.name") != "echo" || call.Tag("gen_ai.tool.call.id") == "" || call.Tag("toolbus.policy.verdict") != "ASK_USER" {
		t.Errorf("the executor's span: %+v", call.Tags)
	}
	stages := map[string]jaeger.Span{}
	for _, s := range spans {
		if s.Parent() == call.SpanID {
			stages[s.OperationName] = s
		}
	}
	for _, stage := range []string{"toolbus.admit", "toolbus.validate", "toolbus.policy", "toolbus.confirm", "toolbus.execute", "toolbus.record"} {
		if _, ok := stages[stage]; !ok {
			t.Errorf("no %s span under the executor's", stage)
		}
	}
	if p := stages["toolbus.policy"]; p.Tag("toolbus.policy.verdict") != "ASK_USER" || p.Tag("toolbus.policy.reason") == "" {
		t.Errorf("the policy's span: %+v", p.Tags)
	}
	if c := stages["toolbus.confirm"]; c.Tag("toolbus.confirm.outcome") != "proceed_once" || c.Tag("toolbus.confirm.people") == "" || c.Tag("toolbus.confirm.people") == "[]" {
		t.Errorf("the confirm span does not say who answered: %+v", c.Tags)
	}
	if b := backend[0]; b.Parent() != stages["toolbus.execute"].SpanID || b.Tag("toolbus.mcp.server") != "everything" {
		t.Errorf("the request to the server is not under the execute stage: parent %s, tags %+v", b.Parent(), b.Tags)
	}

	// From the trail to the trace, and back.
	out, errOut, code := toolbus(t, "audit", "list", "--trace", traceID, "--json", "--nats", url)
	var recs []audit.Record
	if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 {
		t.Fatalf("audit list --trace: exit %d, %s %s", code, out, errOut)
	}
	if recs[0].Trace != "00-"+traceID+"-"+call.SpanID+"-01" || recs[0].Call != call.Tag("gen_ai.tool.call.id") {
		t.Errorf("the trail's record names trace %q and call %q; want the executor's span %s and its call id", recs[0].Trace, recs[0].Call, call.SpanID)
	}

	// toolbus call joins the trace its agent names in TRACEPARENT.
	const callTrace, callParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	out, errOut, code = toolbusWith(t, append(traced, "TRACEPARENT=00-"+callTrace+"-"+callParent+"-01"), "call", "read_file", "--args", `{"file_path":"nowhere.txt"}`, "--nats", url)
	if code == 0 {
		t.Fatalf("reading a file that is not there: exit 0, %s", out)
	}
	read := j.Trace(t, callTrace, func(spans []jaeger.Span) bool { return len(named(spans, "execute_tool read_file")) == 1 })
	if s := named(read, "execute_tool read_file")[0]; s.Parent() != callParent || s.Tag("error.type") == "" {
		t.Errorf("toolbus call's span has parent %s and error.type %q; want the agent's %s and the call's error (%s)", s.Parent(), s.Tag("error.type"), callParent, errOut)
	}
}

// named is the spans called name.
func named(spans []jaeger.Span, name string) []jaeger.Span {
	var out []jaeger.Span
	for _, s := range spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

// byKind is the spans of kind (server, client, ...).
func byKind(spans []jaeger.Span, kind string) []jaeger.Span {
	var out []jaeger.Span
	for _, s := range spans {
		if s.Tag("span.kind") == kind {
			out = append(out, s)
		}
	}
	return out
}
