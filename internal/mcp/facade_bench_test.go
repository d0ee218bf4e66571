package mcp_test

// The facade benchmark: go test ./internal/mcp -run '^$' -bench Facade -benchtime 1x
// It measures, in one run and in turn, so that whatever else the machine
// does weighs on all alike: a raw NATS request-reply on the fleet's bus
// (the floor), an mcp-go client calling read_file of an mcp-go server
// that serves the built-in read_file itself (no bus, no policy), and the
// same client calling read_file through the facade (the facade's MCP
// server, tool.invoke on the bus, the executor's validation, policy and
// audit, the same built-in read_file). Both MCP servers are reached the
// same way: in process (client.NewInProcessClient), then over streamable
// HTTP on loopback. The goal: what the facade adds over the direct call
// is at most 2.5× the raw request-reply in process, 3× over HTTP.

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/toolbus/toolbus/internal/proctree"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/tool"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

const (
	facadeSamples    = 3000
	facadeThroughput = 4000
	facadeCallers    = 16
)

func BenchmarkFacade(b *testing.B) {
	// The default policy, with a session's budget of calls above the
	// benchmark's: its MCP sessions make thousands of calls each, which
	// are counted (their cost is measured) but not refused.
	files := defaultpolicy.Default()
	files["loops.rego"] = strings.Replace(files["loops.rego"], "call_budget := 2000", "call_budget := 1000000", 1)
	for name := range files {
		if strings.HasSuffix(name, "_test.rego") {
			delete(files, name) // they test the default budget
		}
	}
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		b.Fatal(err)
	}
	// The fleet of the tests, with the facade served over HTTP and
	// showing each caller what the default policy lets it call.
	ff := startFacade(b, pol, "", func(c *executor.Config) { c.Policy = pol })

	// The direct server: the built-in read_file of the same workspace,
	// served by an mcp-go server of its own.
	direct := mcpserver.NewMCPServer("direct", "1", mcpserver.WithToolCapabilities(true))
	starter := proctree.Unconfined()
	defer starter.Close()
	shells := builtin.NewShells(ff.Workspace, starter)
	defer shells.Close()
	for _, t := range builtin.Tools(ff.Workspace, shells) {
		if t.Spec().Name == "read_file" {
			direct.AddTool(mcp.NewToolWithRawSchema(t.Spec().Name, t.Spec().Description, t.Spec().Parameters), serveTool(t))
		}
	}
	directHTTP := httptest.NewServer(mcpserver.NewStreamableHTTPServer(direct, mcpserver.WithStateful(true)))
	// Closed after the clients below, whose GET streams it would wait for.
	b.Cleanup(directHTTP.Close)

	inProcess := func(s *mcpserver.MCPServer, name string) *mcpclient.Client {
		c, err := mcpclient.NewInProcessClient(s)
		if err != nil {
			b.Fatal(err)
		}
		initialize(b, c, name)
		return c
	}
	directLocal := inProcess(direct, "bench-direct")
	facadeLocal := inProcess(ff.facade.Server(), "bench-facade")
	directRemote := connectHTTP(b, directHTTP.URL+"/mcp", "", "bench-direct")
	facadeRemote := ff.connect(b, "bench-facade")
	testkit.Eventually(b, "the facade lists read_file", func() bool {
		return strings.Contains(strings.Join(toolNames(b, facadeLocal), " "), "read_file")
	})

	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "read_file", json.RawMessage(`{"file_path":"README.md"}`)
	// A failed call is reported once; the calls go on (some run on
	// goroutines of their own, where b.Fatal may not be called) and the
	// run stops after the measurement.
	var failed atomic.Bool
	call := func(c *mcpclient.Client, what string) func() {
		return func() {
			res, err := c.CallTool(context.Background(), req)
			if (err != nil || res.IsError || text(res) != "# hello\n") && !failed.Swap(true) {
				b.Errorf("%s: %v %+v", what, err, res)
			}
		}
	}
	viaDirect, viaFacade := call(directLocal, "direct"), call(facadeLocal, "through the facade")
	viaDirectHTTP, viaFacadeHTTP := call(directRemote, "direct over HTTP"), call(facadeRemote, "through the facade over HTTP")

	// The floor: a raw request-reply between two connections of the same
	// bus, of an invocation's size.
	responder := bustest.Connect(b, ff.Bus).Conn()
	sub, err := responder.Subscribe("bench.raw", func(m *nats.Msg) { m.Respond(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	responder.Flush()
	requester := bustest.Connect(b, ff.Bus).Conn()
	payload, _ := events.Encode(&events.Invocation{Header: events.Header{Sender: ff.Caller}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)})
	raw := func() {
		if _, err := requester.Request("bench.raw", payload, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}

	// The same call as a tool.invoke of the fleet's own client, without
	// MCP: what the bus and the executor take of the facade's share.
	invoke := func() {
		res, err := ff.Client.Invoke(context.Background(), &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
		if (err != nil || res.Error != nil) && !failed.Swap(true) {
			b.Errorf("tool.invoke: %v %+v", err, res)
		}
	}

	b.ResetTimer()
	for range b.N {
		r50, r99, d50, d99, f50, f99 := latencyTriple(facadeSamples, raw, viaDirect, viaFacade)
		hr50, _, hd50, hd99, hf50, hf99 := latencyTriple(facadeSamples, raw, viaDirectHTTP, viaFacadeHTTP)
		ir50, _, i50, i99, if50, _ := latencyTriple(facadeSamples, raw, invoke, viaFacade)
		var perSecond [2][3]float64 // 1 and facadeCallers callers: direct, tool.invoke, facade
		for i, callers := range [2]int{1, facadeCallers} {
			for j, op := range [3]func(){viaDirect, invoke, viaFacade} {
				perSecond[i][j] = measure.Throughput(callers, facadeThroughput*callers/facadeCallers+facadeThroughput/4, op)
			}
		}
		if failed.Load() {
			b.FailNow()
		}
		added, addedHTTP := f50-d50, hf50-hd50

		b.ReportMetric(float64(added)/float64(r50), "added-x-raw")
		b.ReportMetric(float64(f50.Microseconds()), "facade-p50-µs")
		b.ReportMetric(float64(d50.Microseconds()), "direct-p50-µs")
		b.ReportMetric(float64(r50.Microseconds()), "raw-p50-µs")
		fmt.Fprintf(os.Stderr, "\nMCP call of read_file, %d calls each, in turn:\n", measure.Samples(facadeSamples))
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s  p99 %8s\n", "raw NATS request-reply (floor)", r50, r99)
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s  p99 %8s\n", "in process: direct mcp-go server", d50, d99)
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s  p99 %8s\n", "in process: through the facade", f50, f99)
		fmt.Fprintf(os.Stderr, "  added by the facade at p50: %s = %.2f x the raw request-reply p50 (goal: at most 2.5)\n",
			added, float64(added)/float64(r50))
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s\n", "raw NATS request-reply (floor)", ir50)
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s  p99 %8s = %.2f x raw\n", "tool.invoke of the same call, no MCP", i50, i99, float64(i50)/float64(ir50))
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s: %s more than tool.invoke alone\n", "in process: through the facade", if50, if50-i50)
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s\n", "raw NATS request-reply (floor)", hr50)
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s  p99 %8s\n", "streamable HTTP: direct mcp-go server", hd50, hd99)
		fmt.Fprintf(os.Stderr, "  %-44s p50 %8s  p99 %8s\n", "streamable HTTP: through the facade", hf50, hf99)
		fmt.Fprintf(os.Stderr, "  added by the facade at p50: %s = %.2f x the raw request-reply p50 (goal: at most 3)\n",
			addedHTTP, float64(addedHTTP)/float64(hr50))
		for i, callers := range [2]int{1, facadeCallers} {
			fmt.Fprintf(os.Stderr, "  throughput in process, %2d callers, calls/s: direct %.0f, tool.invoke %.0f, through the facade %.0f\n",
				callers, perSecond[i][0], perSecond[i][1], perSecond[i][2])
		}
	}
}

// serveTool serves a tool of toolbus's own as an mcp-go tool handler,
// without the executor: the arguments as sent, the text it returns.
func serveTool(t tool.Tool) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		out, err := t.Run(ctx, &tool.Call{Args: req.Params.RawArguments})
		if err != nil {
			return nil, err
		}
		if out.Err != nil {
			return mcp.NewToolResultError(out.Err.Message), nil
		}
		return mcp.NewToolResultText(out.LLMContent), nil
	}
}
