package mcp_test

// The MCP call benchmark: go test ./internal/mcp -run '^$' -bench MCPCall -benchtime 1x
// It measures, in one run and in turn, so that whatever else the machine
// does weighs on all alike: a raw NATS request-reply (the floor), a call
// of the echo tool of a small mcp-go server over stdio made directly with
// an mcp-go client, and the same call of another instance of the same
// server through toolbus (tool.invoke: routing, validation, policy,
// result, audit). The goal: what toolbus adds over the direct call is at
// most three times the raw request-reply.

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/toolbus/toolbus/internal/proctree"
	"os"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/invoke"
	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

const mcpCallSamples = 3000

func BenchmarkMCPCall(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	bb := bustest.Start(b, "")
	registrytest.Start(b, bb)
	pol, err := policy.Compile(context.Background(), policy.Files(defaultpolicy.Default()))
	if err != nil {
		b.Fatal(err)
	}
	// The executor on a connection of its own, as a separate process
	// would be.
	execBus := bustest.Connect(b, bb)
	id := events.Identity{ID: "executor@bench"}
	ex, err := executor.Start(context.Background(), execBus.Conn(), execBus.JetStream(), executor.Config{
		Identity: id, Policy: pol, Workspace: b.TempDir(), Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Stop(context.Background())
	cfg, err := toolmcp.Parse([]byte(fmt.Sprintf(`{"mcpServers": {"bench": {"command": %q, "env": {%q: "1"}, "trust": true}}}`, exe, serveStdioEnv)), nil)
	if err != nil {
		b.Fatal(err)
	}
	starter := proctree.Unconfined()
	defer starter.Close()
	mgr, err := toolmcp.Start(context.Background(), cfg, toolmcp.Options{Identity: id, Conn: execBus.Conn(), JS: execBus.JetStream(),
		Host: executornode.HostOn(ex), Logger: bustest.Quiet(), Starter: starter})
	if err != nil {
		b.Fatal(err)
	}
	defer mgr.Stop()
	testkit.Eventually(b, "echo is listed", func() bool {
		_, ok := ex.Catalog().GetTool("echo")
		return ok
	})

	// The agent's side: a client on its own connection.
	agent := invoke.NewClient(bustest.Connect(b, bb).Conn(), events.Identity{ID: "agent:bench", Role: "agent"}, "")
	defer agent.Close()
	args := json.RawMessage(`{"message":"hi"}`)
	viaToolbus := func() {
		res, err := agent.Invoke(context.Background(), &events.Invocation{Tool: "echo", Args: args}, nil)
		if err != nil || res.Error != nil || res.LLMContent != "Echo: hi" {
			b.Fatalf("through toolbus: %+v, %v", res, err)
		}
	}

	// The direct call: another instance of the server, an mcp-go client.
	direct, err := client.NewStdioMCPClient(exe, []string{serveStdioEnv + "=1"})
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if _, err := direct.Initialize(context.Background(), init); err != nil {
		b.Fatal(err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "echo", args
	viaMCP := func() {
		res, err := direct.CallTool(context.Background(), req)
		if err != nil || len(res.Content) != 1 {
			b.Fatalf("direct: %+v, %v", res, err)
		}
	}

	// The floor: a raw request-reply between two connections, of an
	// invocation's size.
	responder := bustest.Connect(b, bb).Conn()
	sub, err := responder.Subscribe("bench.raw", func(m *nats.Msg) { m.Respond(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	responder.Flush()
	requester := bustest.Connect(b, bb).Conn()
	payload, _ := events.Encode(&events.Invocation{Header: events.Header{Sender: events.Identity{ID: "agent:bench"}}, Tool: "echo", Args: args})
	raw := func() {
		if _, err := requester.Request("bench.raw", payload, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}

	// The same request-reply right after a direct call: the process has
	// idled while the server worked, and its threads have parked, so
	// every hop pays a wake-up. A call through toolbus makes two such
	// hops after the server answers and before, where the floor above,
	// measured in a tight loop, makes none.
	afterCall := func() time.Duration {
		viaMCP()
		t0 := time.Now()
		raw()
		return time.Since(t0)
	}

	b.ResetTimer()
	for range b.N {
		r50, r99, d50, d99, t50, t99 := latencyTriple(mcpCallSamples, raw, viaMCP, viaToolbus)
		idle := make([]time.Duration, measure.Samples(mcpCallSamples)/2)
		for i := range idle {
			idle[i] = afterCall()
		}
		idleLatency := measure.Percentiles(idle)
		i50, i99 := idleLatency.P50, idleLatency.P99
		added := t50 - d50

		b.ReportMetric(float64(t50.Microseconds()), "toolbus-p50-µs")
		b.ReportMetric(float64(d50.Microseconds()), "direct-p50-µs")
		b.ReportMetric(float64(r50.Microseconds()), "raw-p50-µs")
		fmt.Fprintf(os.Stderr, "\nMCP call of echo over stdio, %d calls each, in turn:\n", measure.Samples(mcpCallSamples))
		fmt.Fprintf(os.Stderr, "  %-34s p50 %8s  p99 %8s\n", "raw NATS request-reply (floor)", r50, r99)
		fmt.Fprintf(os.Stderr, "  %-34s p50 %8s  p99 %8s\n", "  the same right after a direct call", i50, i99)
		fmt.Fprintf(os.Stderr, "  %-34s p50 %8s  p99 %8s\n", "direct mcp-go client", d50, d99)
		fmt.Fprintf(os.Stderr, "  %-34s p50 %8s  p99 %8s\n", "through toolbus (tool.invoke)", t50, t99)
		fmt.Fprintf(os.Stderr, "  added by toolbus at p50: %s = %.2f x the raw request-reply p50 (goal: at most 3), %.2f x the one after a call\n",
			added, float64(added)/float64(r50), float64(added)/float64(i50))
	}
}

// latencyTriple times three operations in turn (measure.Interleaved),
// n times each, and returns each one's p50 and p99.
func latencyTriple(n int, a, b, c func()) (a50, a99, b50, b99, c50, c99 time.Duration) {
	l := measure.Interleaved(n, a, b, c)
	return l[0].P50, l[0].P99, l[1].P50, l[1].P99, l[2].P50, l[2].P99
}
