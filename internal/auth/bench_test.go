package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	defaultpolicy "github.com/toolbus/toolbus/policy"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/metrics"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/tool"
)

// benchFleet is a fleet with identities on the nodes given: the registry
// and an executor (hosting a no-op tool) on one node, the calling agent
// on another when there are several, so that calls cross the routes.
type benchFleet struct {
	client *invoke.Client
}

func startBenchFleet(b *testing.B, dir string, nodes []*bus.Bus) *benchFleet {
	b.Helper()
	as := func(node *bus.Bus, name string) *bus.Bus {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := bus.Connect(ctx, bus.Config{URL: node.URL(), Name: name, NkeyFile: identity.SeedFile(dir, name), Logger: bustest.Quiet()})
		if err != nil {
			b.Fatalf("connect as %s: %v", name, err)
		}
		b.Cleanup(func() { bustest.Stop(b, c) })
		return c
	}
	execNode, agentNode := nodes[0], nodes[len(nodes)-1]
	reg := as(execNode, "registry")
	svc, err := registry.Start(context.Background(), reg.Conn(), reg.JetStream(), registry.Config{Identity: events.Identity{ID: "registry"}, Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Stop() })
	pol, err := policy.Compile(context.Background(), policy.Files(defaultpolicy.Default()))
	if err != nil {
		b.Fatal(err)
	}
	noop := tool.Func(events.ToolSpec{Name: "noop", Kind: events.KindThink, Description: "does nothing"},
		func(context.Context, *tool.Call) (*tool.Output, error) { return tool.Text("ok"), nil })
	ex := as(execNode, "executor")
	e, err := executor.Start(context.Background(), ex.Conn(), ex.JetStream(), executor.Config{Identity: events.Identity{ID: "executor"}, IdentitiesEnforced: true,
		Tools: []tool.Tool{noop}, Policy: pol, Workspace: b.TempDir(), Logger: bustest.Quiet(), Observer: metrics.New("bench")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
	})
	agent := as(agentNode, "agent")
	f := &benchFleet{client: invoke.NewClient(agent.Conn(), events.Identity{Role: "agent"}, agent.Principal())}
	b.Cleanup(func() { f.client.Close() })
	// Until the agent's side sees the tool.
	if !testkit.Poll(time.Minute, func() bool { return f.call() == nil }) {
		b.Fatalf("no call got through in a minute: %v", f.call())
	}
	return f
}

func (f *benchFleet) call() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := f.client.Invoke(ctx, &events.Invocation{Tool: "noop", Args: json.RawMessage(`{}`)}, nil)
	if err == nil && res.Error != nil {
		err = fmt.Errorf("%s: %s", res.Error.Type, res.Error.Message)
	}
	return err
}

// BenchmarkClusterAgainstOneNode: invocations of a no-op tool, with
// identities and permissions on, through a single embedded node and
// through a three-node cluster keeping three copies of the audit stream
// and every bucket, the caller on another node than the executor.
// Latencies are measured in turn, one call of each, so the machine's
// load weighs on both alike; throughput with 64 callers, twice each,
// alternating. Goal: the cluster ≥ 0.5 × the single node's throughput.
func BenchmarkClusterAgainstOneNode(b *testing.B) {
	dir := b.TempDir()
	if _, err := auth.Init(dir, auth.DefaultMembers()); err != nil {
		b.Fatal(err)
	}
	withIDs := func(cfg *busnode.Config) {
		cfg.AuthConfig, cfg.NkeyFile = filepath.Join(dir, auth.ServerConfigFile), identity.SeedFile(dir, "bus")
	}
	single, err := busnode.Start(context.Background(), busnode.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Name: "single", Logger: bustest.Quiet(),
		AuthConfig: filepath.Join(dir, auth.ServerConfigFile), NkeyFile: identity.SeedFile(dir, "bus")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bustest.Stop(b, single) })
	one := startBenchFleet(b, dir, []*bus.Bus{single.Bus})
	three := startBenchFleet(b, dir, bustest.StartClusterWith(b, 3, 3, withIDs))

	samples, ops := 3000, 12000
	if os.Getenv("TOOLBUS_BENCH_LONG") != "" {
		samples, ops = 20000, 80000
	}
	must := func(f *benchFleet) func() {
		return func() {
			if err := f.call(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		lat := measure.Interleaved(samples, must(one), must(three))
		var tOne, tThree float64
		for range 2 {
			tOne += measure.Throughput(64, ops, must(one)) / 2
			tThree += measure.Throughput(64, ops, must(three)) / 2
		}
		b.ReportMetric(tThree/tOne, "cluster-x-single")
		fmt.Printf("\n%-44s %12s %12s %14s\n", "fleet benchmark, identities on (2 cores)", "p50", "p99", "64 callers/s")
		fmt.Printf("%-44s %12s %12s %14.0f\n", "one node", lat[0].P50, lat[0].P99, tOne)
		fmt.Printf("%-44s %12s %12s %14.0f\n", "three nodes, 3 copies, caller on another node", lat[1].P50, lat[1].P99, tThree)
		fmt.Printf("%-44s %12.2f× %11.2f× %13.2f×   goal throughput ≥ 0.5×\n", "cluster / one node",
			float64(lat[1].P50)/float64(lat[0].P50), float64(lat[1].P99)/float64(lat[0].P99), tThree/tOne)
	}
}
