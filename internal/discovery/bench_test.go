package discovery

// The discovery benchmarks, each printing ratios against a baseline
// measured in the same run:
//
//	go test ./internal/discovery -run '^$' -bench 'Discovery$|DiscoveredCall' -benchtime 1x

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
	"github.com/toolbus/toolbus/internal/tool"
)

// benchFleet is a bus, the registry, and an executor on a connection of
// its own, as a separate process would have it, under a policy that
// allows every call (the calls measure the pipeline, not an approver).
func benchFleet(b *testing.B) (*bus.Bus, *bus.Bus, *executor.Executor) {
	b.Helper()
	bb := bustest.Start(b, "")
	registrytest.Start(b, bb)
	pol, err := policy.Compile(context.Background(), policy.Files{"allow.rego": "package toolbus\n\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"the benchmark allows every call\"}\n"})
	if err != nil {
		b.Fatal(err)
	}
	execConn := bustest.Connect(b, bb)
	ex, err := executor.Start(context.Background(), execConn.Conn(), execConn.JetStream(), executor.Config{
		Identity: events.Identity{ID: "executor@bench", Role: "executor"}, Policy: pol, Workspace: b.TempDir(), Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ex.Stop(ctx)
	})
	return bb, execConn, ex
}

func ratio(a, b time.Duration) string { return fmt.Sprintf("%.2f×", float64(a)/float64(b)) }

// BenchmarkDiscovery: 10,000 declarations from a real discovery command
// (cat of a file), against running the same command directly and reading
// its stdout; then hosting them (the register request), against sending
// the same bytes as raw NATS requests.
func BenchmarkDiscovery(b *testing.B) {
	const n = 10_000
	dir := b.TempDir()
	out := declarations(n)
	if err := os.WriteFile(filepath.Join(dir, "decls.json"), out, 0o644); err != nil {
		b.Fatal(err)
	}
	env := FilterEnv(os.Environ(), nil)
	starter := newStarter(b)
	const line = "cat decls.json"
	c, err := prepare(line, dir, env)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	direct := func() {
		cmd := exec.Command(c.path, "decls.json")
		cmd.Dir, cmd.Env = dir, env
		got, err := cmd.Output()
		if err != nil || len(got) != len(out) {
			b.Fatal(err)
		}
	}
	spawn := func() {
		got, _, err := runDiscovery(ctx, starter, c)
		if err != nil || len(got) != len(out) {
			b.Fatal(err)
		}
	}
	parse := func() {
		if specs, _, err := ParseDeclarations(out); err != nil || len(specs) != n {
			b.Fatal(err)
		}
	}
	var found *found
	whole := func() {
		if found, err = discover(ctx, starter, line, dir, env); err != nil || len(found.specs) != n {
			b.Fatal(err)
		}
	}
	caller, err := NewCaller("sh -c cat", dir, env, starter)
	if err != nil {
		b.Fatal(err)
	}
	var tools []tool.Tool
	build := func() {
		tools = make([]tool.Tool, len(found.specs))
		for i, spec := range found.specs {
			tools[i] = caller.NewTool(spec, line)
		}
	}
	// The register request the executor sends for the set, encoded.
	encodeReq := func() {
		req := &events.RegisterRequest{Header: events.Header{Sender: events.Identity{ID: "executor@bench"}}, Provider: "executor@bench",
			Source: events.SourceDiscovered, Replace: true, Tools: make([]events.ToolSpec, len(tools))}
		for i, t := range tools {
			req.Tools[i] = t.Spec()
		}
		if _, err := events.EncodeRegister(req, 1<<20, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	whole()
	build()
	// A set that differs from tools in every declaration (description and
	// schema), so that hosting tools and other in turn changes every one,
	// as a first discovery would.
	other := make([]tool.Tool, n)
	for i, spec := range found.specs {
		spec.Description += " Changed."
		spec.Parameters = bytes.Replace(spec.Parameters, []byte(`"what to work on"`), []byte(`"what to work on, changed"`), 1)
		other[i] = caller.NewTool(spec, line)
	}

	bb, execConn, ex := benchFleet(b)
	hostSet := func(set []tool.Tool) {
		reply, err := ex.Host(ctx, executor.Scope{Source: events.SourceDiscovered}, set)
		if err != nil || len(reply.Tools) != n || reply.Tools[n-1].Error != "" {
			b.Fatalf("%v %+v", err, reply)
		}
	}
	round := 0
	hostChanged := func() {
		round++
		if round%2 == 0 {
			hostSet(tools)
		} else {
			hostSet(other)
		}
	}
	hostSame := func() { hostSet(other) } // as the last hostChanged left it: unchanged
	// A catalogue reader on a connection of its own, as in another
	// process: the time from the discovery's register request until it
	// holds every changed tool.
	follower, err := catalog.Follow(ctx, bustest.Connect(b, bb).JetStream(), bustest.Quiet())
	if err != nil {
		b.Fatal(err)
	}
	defer follower.Close()
	// A reader takes a shard whole, so one tool of each shard the set
	// spans tells whether it holds the set.
	sample := func(set []tool.Tool) []events.ToolSpec {
		var out []events.ToolSpec
		seen := make(map[string]bool)
		for _, t := range set {
			spec := t.Spec()
			key := catalog.ShardOf(&events.Tool{Name: spec.Name, Source: events.SourceDiscovered, Hosts: []string{"executor@bench"}})
			if !seen[key] {
				seen[key] = true
				out = append(out, spec)
			}
		}
		return out
	}
	samples := map[bool][]events.ToolSpec{true: sample(tools), false: sample(other)}
	holds := func(set []tool.Tool) bool {
		cat := follower.Catalog()
		for _, spec := range samples[&set[0] == &tools[0]] {
			if got, ok := cat.Lookup(spec.Name); !ok || got.Description != spec.Description {
				return false
			}
		}
		return true
	}
	visible := func() {
		round++
		set := other
		if round%2 == 0 {
			set = tools
		}
		changed := follower.Changed()
		hostSet(set)
		for !holds(set) {
			select {
			case <-changed:
			case <-time.After(30 * time.Second):
				b.Fatal("the follower never held the new set")
			}
			changed = follower.Changed()
		}
	}
	// The registry alone: the same declarations from other providers,
	// under other names (a provider may not replace what another hosts).
	specsOf := func(set []tool.Tool, prefix string) []events.ToolSpec {
		out := make([]events.ToolSpec, n)
		for i, t := range set {
			out[i] = t.Spec()
			out[i].Name = prefix + out[i].Name
		}
		return out
	}
	regSpecs, regOther, sameSpecs := specsOf(tools, "r_"), specsOf(other, "r_"), specsOf(tools, "s_")
	regClient := registry.NewClient(bustest.Connect(b, bb).Conn(), events.Identity{ID: "provider@bench", Role: "provider"})
	registerAs := func(provider string, specs []events.ToolSpec) {
		reply, err := regClient.Register(ctx, &events.RegisterRequest{Provider: provider, Source: events.SourceDiscovered, Replace: true, Tools: specs})
		if err != nil || len(reply.Tools) != n {
			b.Fatalf("%v", err)
		}
	}
	regRound := 0
	registerChanged := func() {
		regRound++
		if regRound%2 == 0 {
			registerAs("provider@changed", regSpecs)
		} else {
			registerAs("provider@changed", regOther)
		}
	}
	registerSame := func() { registerAs("provider@same", sameSpecs) }
	registerSame()
	// Baseline: the same bytes as raw requests, each answered at once.
	req := &events.RegisterRequest{Header: events.Header{Sender: events.Identity{ID: "provider@bench"}}, Provider: "provider@bench",
		Source: events.SourceDiscovered, Replace: true, Tools: regSpecs}
	data, err := events.Encode(req)
	if err != nil {
		b.Fatal(err)
	}
	sub, err := execConn.Conn().Subscribe("bench.register", func(m *nats.Msg) { m.Respond([]byte("{}")) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	rawConn := bustest.Connect(b, bb).Conn()
	chunk := int(rawConn.MaxPayload()) - 4096
	raw := func() {
		for rest := data; len(rest) > 0; {
			k := min(chunk, len(rest))
			if _, err := rawConn.Request("bench.register", rest[:k], 10*time.Second); err != nil {
				b.Fatal(err)
			}
			rest = rest[k:]
		}
	}
	b.ResetTimer()
	for range b.N {
		l := measure.Interleaved(30, direct, spawn, parse, whole, build, encodeReq)
		h := measure.Interleaved(6, raw, hostChanged, hostSame, registerChanged, registerSame, visible)
		spawnParse := l[3].P50
		fmt.Printf("\ndiscovery of %d declarations (%.1f MB), p50 (%d cores, load %s)\n", n, float64(len(out))/1e6, runtime.NumCPU(), loadAverage())
		fmt.Printf("%-52s %10s\n", "the command run directly, stdout read (baseline)", l[0].P50)
		fmt.Printf("%-52s %10s %8s\n", "  run as a process tree, stdout read", l[1].P50, ratio(l[1].P50, l[0].P50))
		fmt.Printf("%-52s %10s\n", "  parse (ParseDeclarations)", l[2].P50)
		fmt.Printf("%-52s %10s %8s\n", "spawn + parse (discover)", spawnParse, ratio(spawnParse, l[0].P50))
		fmt.Printf("%-52s %10s\n", "  the tools made (descriptions extended)", l[4].P50)
		fmt.Printf("%-52s %10s\n", "the same bytes as raw NATS requests (baseline)", h[0].P50)
		fmt.Printf("%-52s %10s %8s\n", "register request: executor.Host, every tool changed", h[1].P50, ratio(h[1].P50, h[0].P50))
		fmt.Printf("%-52s %10s %8s\n", "  executor.Host, the same set again", h[2].P50, ratio(h[2].P50, h[0].P50))
		fmt.Printf("%-52s %10s %8s\n", "  the registry alone, every tool changed", h[3].P50, ratio(h[3].P50, h[0].P50))
		fmt.Printf("%-52s %10s %8s\n", "  the registry alone, the same set again", h[4].P50, ratio(h[4].P50, h[0].P50))
		fmt.Printf("%-52s %10s\n", "  the register request encoded (EncodeRegister)", l[5].P50)
		own := spawnParse + l[4].P50 + l[5].P50
		fmt.Printf("%-52s %10s %8s   goal ≤ 25ms\n", "discovery: spawn, parse, tools, request encoded", own, "")
		total := spawnParse + l[4].P50 + h[1].P50
		fmt.Printf("%-52s %10s %8s\n", "  ... and the registry's answer (executor.Host)", total, "")
		fmt.Printf("%-52s %10s %8s   goal ≤ 0.1s\n", "register request until a reader on another connection holds the set", h[5].P50, "")
		fmt.Printf("%-52s %10s %8s\n", "  with the discovery before it", spawnParse+l[4].P50+h[5].P50, "")
		b.ReportMetric(float64(spawnParse.Microseconds())/1000, "spawn+parse-ms")
		b.ReportMetric(float64(h[1].P50.Microseconds())/1000, "host-changed-ms")
	}
}

// BenchmarkDiscoveredCall: a discovered tool's call through toolbus (a
// client, the bus, the executor's pipeline under a policy that allows it,
// the call command as a process tree) with 10 and with 10,000 discovered
// tools registered, against running the same call command directly
// (spawn, the arguments on stdin, wait), in turn.
func BenchmarkDiscoveredCall(b *testing.B) {
	const samples = 300
	dir := b.TempDir()
	env := FilterEnv(os.Environ(), nil)
	sh, err := exec.LookPath("sh")
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"text":"hello","count":2}`)
	ctx := context.Background()
	for range b.N {
		for _, n := range []int{10, 10_000} {
			specs, _, err := ParseDeclarations(declarations(n))
			if err != nil {
				b.Fatal(err)
			}
			bb, _, ex := benchFleet(b)
			starter := newStarter(b)
			caller, err := NewCaller("sh -c cat", dir, env, starter)
			if err != nil {
				b.Fatal(err)
			}
			tools := make([]tool.Tool, n)
			for i, spec := range specs {
				tools[i] = caller.NewTool(spec, "cat decls.json")
			}
			if _, err := ex.Host(ctx, executor.Scope{Source: events.SourceDiscovered}, tools); err != nil {
				b.Fatal(err)
			}
			// A tool that does nothing, through the same pipeline: what
			// the bus and the pipeline cost a call by themselves.
			noop := tool.Func(events.ToolSpec{Name: "bench_noop", Kind: events.KindRead}, func(context.Context, *tool.Call) (*tool.Output, error) {
				return tool.Text("ok"), nil
			})
			if _, err := ex.Host(ctx, executor.Scope{Source: events.SourceBuiltin}, []tool.Tool{noop}); err != nil {
				b.Fatal(err)
			}
			name := specs[n/2].Name
			client := invoke.NewClient(bustest.Connect(b, bb).Conn(), events.Identity{ID: "agent:bench", Role: "agent"}, "")
			through := func() {
				res, err := client.Invoke(ctx, &events.Invocation{Tool: name, Args: args}, nil)
				if err != nil || res.Error != nil || res.LLMContent != string(args) {
					b.Fatalf("%v %+v", err, res)
				}
			}
			direct := func() {
				cmd := exec.Command(sh, "-c", "cat", name)
				cmd.Dir, cmd.Env, cmd.Stdin = dir, env, bytes.NewReader(args)
				out, err := cmd.Output()
				if err != nil || string(out) != string(args) {
					b.Fatal(err)
				}
			}
			tl := tools[n/2].(*Tool)
			run := func() {
				out, err := tl.Run(ctx, &tool.Call{Args: args})
				if err != nil || out.LLMContent != string(args) {
					b.Fatal(err)
				}
			}
			nothing := func() {
				res, err := client.Invoke(ctx, &events.Invocation{Tool: "bench_noop", Args: json.RawMessage(`{}`)}, nil)
				if err != nil || res.Error != nil {
					b.Fatalf("%v %+v", err, res)
				}
			}
			l := measure.Interleaved(samples, direct, through, run, nothing)
			fmt.Printf("\na discovered tool's call, %d discovered tools registered, %d calls each (%d cores, load %s)\n", n, measure.Samples(samples), runtime.NumCPU(), loadAverage())
			fmt.Printf("%-52s %10s %10s %8s\n", "", "p50", "p99", "p50 ×")
			fmt.Printf("%-52s %10s %10s %8s\n", "the call command run directly (baseline)", l[0].P50, l[0].P99, "1.00×")
			fmt.Printf("%-52s %10s %10s %8s   goal ≤ 1.15×\n", "through toolbus", l[1].P50, l[1].P99, ratio(l[1].P50, l[0].P50))
			fmt.Printf("%-52s %10s %10s %8s\n", "  the tool's Run alone (process tree, no bus)", l[2].P50, l[2].P99, ratio(l[2].P50, l[0].P50))
			fmt.Printf("%-52s %10s %10s\n", "  a tool that does nothing, through toolbus", l[3].P50, l[3].P99)
			b.ReportMetric(float64(l[1].P50)/float64(l[0].P50), fmt.Sprintf("x-direct@%d", n))
			client.Close()
		}
	}
}

// loadAverage is the machine's load over the last minute, as the kernel
// tells it, or "unknown": the figures of a loaded machine are read apart.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
