package mcp_test

// The caller session benchmark:
// go test ./internal/mcp -run '^$' -bench CallerSession -benchtime 1x
// A call whose caller can answer a server's requests runs, over
// streamable HTTP, on a session of that caller's own (callersession.go).
// It measures, in turn, a call of the echo tool of an mcp-go server over
// HTTP through toolbus on the shared session (a caller that takes no
// requests), on a caller session already open (the caller's later
// calls), and on one opened for the call (the caller's first: initialize,
// the standalone stream, logging level).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

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

// callerSessionSamples stays below the caller sessions a server may have
// open (64): every cold sample opens one more.
const callerSessionSamples = 60

func BenchmarkCallerSession(b *testing.B) {
	bb := bustest.Start(b, "")
	registrytest.Start(b, bb)
	pol, err := policy.Compile(context.Background(), policy.Files(defaultpolicy.Default()))
	if err != nil {
		b.Fatal(err)
	}
	execBus := bustest.Connect(b, bb)
	id := events.Identity{ID: "executor@bench"}
	ex, err := executor.Start(context.Background(), execBus.Conn(), execBus.JetStream(), executor.Config{
		Identity: id, Policy: pol, Workspace: b.TempDir(), Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Stop(context.Background())
	url := httpServer(b, newTestServer(nil), nil)
	cfg, err := toolmcp.Parse([]byte(fmt.Sprintf(`{"mcpServers": {"bench": {"httpUrl": %q, "trust": true}}}`, url)), nil)
	if err != nil {
		b.Fatal(err)
	}
	mgr, err := toolmcp.Start(context.Background(), cfg, toolmcp.Options{Identity: id, Conn: execBus.Conn(), JS: execBus.JetStream(),
		Host: executornode.HostOn(ex), Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer mgr.Stop()
	testkit.Eventually(b, "echo is listed", func() bool {
		_, ok := ex.Catalog().GetTool("echo")
		return ok
	})
	agent := invoke.NewClient(bustest.Connect(b, bb).Conn(), events.Identity{ID: "agent:bench", Role: "agent"}, "")
	defer agent.Close()
	args := json.RawMessage(`{"message":"hi"}`)
	call := func(session string, methods []string) {
		inv := &events.Invocation{Header: events.Header{Sender: events.Identity{ID: "agent:bench", Role: "agent", Session: session}},
			Tool: "echo", Args: args, ServerRequests: methods}
		res, err := agent.InvokeAs(context.Background(), inv, &invoke.Watch{ServerRequest: func(*events.ServerRequest) {}})
		if err != nil || res.Error != nil || res.LLMContent != "Echo: hi" {
			b.Fatalf("%+v, %v", res, err)
		}
	}
	asks := []string{events.MethodSampling, events.MethodElicitation}
	shared := func() { call("shared", nil) }
	warm := func() { call("warm", asks) }
	n := 0
	cold := func() {
		n++
		call(fmt.Sprintf("cold-%d-%d", b.N, n), asks)
	}
	warm() // opens the warm caller's session
	b.ResetTimer()
	for range b.N {
		l := measure.Interleaved(callerSessionSamples/b.N, shared, warm, cold)
		b.ReportMetric(float64(l[0].P50.Microseconds()), "shared-p50-µs")
		b.ReportMetric(float64(l[1].P50.Microseconds()), "warm-p50-µs")
		b.ReportMetric(float64(l[2].P50.Microseconds()), "cold-p50-µs")
		fmt.Fprintf(os.Stderr, "\nMCP call of echo over streamable HTTP through toolbus, %d calls each, in turn:\n", measure.Samples(callerSessionSamples/b.N))
		fmt.Fprintf(os.Stderr, "  %-40s p50 %8s  p99 %8s\n", "shared session (takes no requests)", l[0].P50, l[0].P99)
		fmt.Fprintf(os.Stderr, "  %-40s p50 %8s  p99 %8s\n", "the caller's session, open", l[1].P50, l[1].P99)
		fmt.Fprintf(os.Stderr, "  %-40s p50 %8s  p99 %8s\n", "the caller's session, opened for the call", l[2].P50, l[2].P99)
		fmt.Fprintf(os.Stderr, "  a caller's first call costs %s more at p50 (%.1f x the shared session's call); its later ones %s\n",
			l[2].P50-l[0].P50, float64(l[2].P50)/float64(l[0].P50), l[1].P50-l[0].P50)
	}
}
