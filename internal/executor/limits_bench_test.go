package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
	"github.com/toolbus/toolbus/internal/tool"
)

// BenchmarkInvokeLimited tells what the policy's limits cost a call, in
// the same run, interleaved: a no-op tool with no limit, with a rate
// (counted in the executor's memory), with an exact rate (one request to
// the counter stream) and with a limit of calls at once that is never
// full (a slot taken and given up by compare-and-set).
func BenchmarkInvokeLimited(b *testing.B) {
	bb := bustest.Start(b, "")
	registrytest.Start(b, bb)
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus
decision := {"verdict": "ALLOW", "reason": "bench"}
limits contains {"name": "rate", "key": "k", "calls": 1000000000, "per": "24h"} if input.tool.name == "rated"
limits contains {"name": "exact rate", "key": "k", "calls": 1000000000, "per": "24h", "exact": true} if input.tool.name == "exactly"
limits contains {"name": "at once", "key": "k", "concurrent": 1000} if input.tool.name == "slotted"
`})
	if err != nil {
		b.Fatal(err)
	}
	noop := func(name string) tool.Tool {
		return tool.Func(events.ToolSpec{Name: name, Kind: events.KindThink, Description: "does nothing"},
			func(context.Context, *tool.Call) (*tool.Output, error) { return tool.Text("ok"), nil })
	}
	execConn := bustest.Connect(b, bb)
	ex, err := Start(context.Background(), execConn.Conn(), execConn.JetStream(), Config{Identity: events.Identity{ID: "executor@bench"},
		Tools: []tool.Tool{noop("free"), noop("rated"), noop("exactly"), noop("slotted")}, Policy: pol, Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Stop(context.Background())
	for _, n := range []string{"free", "rated", "exactly", "slotted"} {
		waitTool(b, ex, n)
	}
	client := invoke.NewClient(bustest.Connect(b, bb).Conn(), events.Identity{ID: "agent:bench"}, "")
	defer client.Close()
	call := func(name string) func() {
		return func() {
			res, err := client.Invoke(context.Background(), &events.Invocation{Tool: name, Args: json.RawMessage(`{}`)}, nil)
			if err != nil || res.Error != nil {
				b.Fatalf("invoke %s: %v %+v", name, err, res)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		l := measure.Interleaved(latencySamples/4, call("free"), call("rated"), call("exactly"), call("slotted"))
		b.ReportMetric(float64(l[1].P50-l[0].P50)/1e3, "rate-p50-µs")
		b.ReportMetric(float64(l[2].P50-l[0].P50)/1e3, "exact-rate-p50-µs")
		b.ReportMetric(float64(l[3].P50-l[0].P50)/1e3, "slot-p50-µs")
		fmt.Printf("\n%-34s %12s %12s\n", "a no-op call, with", "p50", "p99")
		for i, name := range []string{"no limit", "a rate (calls per interval)", "an exact rate", "a limit of calls at once"} {
			fmt.Printf("%-34s %12s %12s\n", name, l[i].P50, l[i].P99)
		}
	}
}
