package executor

// The invoke benchmark: go test ./internal/executor -run '^$' -bench Invoke -benchtime 1x
// It measures, in one run, a raw NATS request-reply (the baseline) and a
// tool.invoke of a trivial built-in call the default policy allows, one
// after the other in turn, the throughput of each with 1 and 64 concurrent
// callers, and the policy decision alone, and prints them as a table with
// ratios; and what tracing costs, a no-op call with tracing off against
// the same with every call sampled and exported over OTLP. With
// TOOLBUS_BENCH_NO_LOOP_GUARDS set, the default policy runs
// without its loop guards, whose counts make every decision a new one.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/metrics"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
	"github.com/toolbus/toolbus/internal/tool"
)

const (
	latencySamples = 20000
	throughputOps  = 40000
)

// latencyPair times two operations alternately (measure.Interleaved).
func latencyPair(n int, a, b func()) (aP50, aP99, bP50, bP99 time.Duration) {
	l := measure.Interleaved(n, a, b)
	return l[0].P50, l[0].P99, l[1].P50, l[1].P99
}

// blocksPair measures op in blocks of n/10 calls, with set(false) and
// set(true) in turn: a setting whose cost runs after a call returns (a
// candidate in shadow judges it in the background) is paid by the calls
// of its own block, as it would be in a fleet that keeps it on.
func blocksPair(n int, op func(), set func(bool)) (off, on measure.Latency) {
	var samples [2][]time.Duration
	block := max(n/10, 1)
	for i := range 20 {
		mode := i % 2
		set(mode == 1)
		for range block {
			start := time.Now()
			op()
			samples[mode] = append(samples[mode], time.Since(start))
		}
	}
	set(false)
	return measure.Percentiles(samples[0]), measure.Percentiles(samples[1])
}

func BenchmarkInvoke(b *testing.B) {
	bb := bustest.Start(b, "")
	registrytest.Start(b, bb)
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "small.txt"), []byte("a small file\n"), 0o644)
	ws, _ := builtin.NewWorkspace(dir)
	defer ws.Close()
	starter := proctree.Unconfined() // the tools' own behaviour: the node's tests hold the confinement
	b.Cleanup(starter.Close)
	shells := builtin.NewShells(ws, starter)
	defer shells.Close()
	// The loop guards count the calls without a session too, more of them
	// than their budget: the budget is raised, the counting kept, as the
	// calls from a session keep within theirs by taking a new session.
	files := defaultPolicyFiles()
	const budget = "sessionless_call_budget := 100000"
	if !strings.Contains(files["loops.rego"], budget) {
		b.Fatalf("loops.rego does not set %q", budget)
	}
	files["loops.rego"] = strings.Replace(files["loops.rego"], budget, "sessionless_call_budget := 1000000000000", 1)
	if os.Getenv("TOOLBUS_BENCH_NO_LOOP_GUARDS") != "" {
		// What the loop guards cost: without counts in the input, a
		// decision is kept per exact input and most calls take it from
		// the cache.
		files["loops.rego"] = "package toolbus.session\n"
	}
	files["loops_test.rego"] = "package toolbus_loops_test\n" // its tests assume the default budget
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		b.Fatal(err)
	}
	// The executor on its own connection, as a separate process would be;
	// with TOOLBUS_BENCH_IN_PROCESS set, the caller's and the executor's
	// connections are in-process, as toolbus up's parts are.
	connect := func() *bus.Bus { return bustest.Connect(b, bb) }
	if os.Getenv("TOOLBUS_BENCH_IN_PROCESS") != "" {
		connect = func() *bus.Bus {
			c, err := bus.Connect(context.Background(), bus.Config{URL: bb.URL(), Local: bb.Server(), Logger: bustest.Quiet()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close(context.Background()) })
			return c
		}
	}
	execConn := connect()
	// noop splits the pipeline's cost from the file read's.
	noop := tool.Func(events.ToolSpec{Name: "noop", Kind: events.KindThink, Description: "does nothing"},
		func(context.Context, *tool.Call) (*tool.Output, error) { return tool.Text("ok"), nil })
	// Tracing, off but for the calls that turn it on (tracedNoop).
	traces := newSwitchedTraces(b)
	// With the metrics every daemon keeps (executor --metrics, toolbus up).
	ex, err := Start(context.Background(), execConn.Conn(), execConn.JetStream(), Config{Identity: events.Identity{ID: "executor@bench"},
		Tools: append(builtin.Tools(ws, shells), noop), Policy: pol, Workspace: ws.Root(), Logger: bustest.Quiet(), Observer: metrics.New("bench"),
		Traces: traces})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Stop(context.Background())
	waitTool(b, ex, "read_file")
	waitTool(b, ex, "noop")

	callerConn := connect().Conn()
	client := invoke.NewClient(callerConn, events.Identity{ID: "agent:bench"}, "")
	defer client.Close()
	args := json.RawMessage(`{"file_path":"small.txt"}`)
	ctx := context.Background()
	var cacheMisses atomic.Int64
	invoke := func() {
		res, err := client.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: args}, nil)
		if err != nil || res.Error != nil {
			b.Fatalf("invoke: %v %+v", err, res)
		}
		if !res.Policy.Cached {
			cacheMisses.Add(1)
		}
	}
	invokeNoop := func() {
		res, err := client.Invoke(ctx, &events.Invocation{Tool: "noop", Args: json.RawMessage(`{}`)}, nil)
		if err != nil || res.Error != nil {
			b.Fatalf("invoke noop: %v %+v", err, res)
		}
	}
	// The same call traced: the caller's span, every call sampled, the
	// spans exported over OTLP/HTTP in batches, as a fleet that traces
	// runs. The untraced ones it alternates with run with tracing off.
	agent := traces.sdk.Tracer("agent")
	tracedNoop := func() {
		traces.on.Store(true)
		ctx, span := agent.Start(ctx, "agent turn")
		res, err := client.Invoke(ctx, &events.Invocation{Tool: "noop", Args: json.RawMessage(`{}`)}, nil)
		span.End()
		traces.on.Store(false)
		if err != nil || res.Error != nil {
			b.Fatalf("invoke noop, traced: %v %+v", err, res)
		}
	}
	// A caller that names its session: the default policy's loop guards
	// read the session's counts, one round trip to the counter stream,
	// and its decisions are not cached. A new session every 1,000 calls
	// keeps it within the default budget of calls.
	var sessionCalls atomic.Int64
	invokeSession := func() {
		n := sessionCalls.Add(1)
		inv := &events.Invocation{Header: events.Header{Sender: events.Identity{ID: "agent:bench", Session: "bench-" + strconv.FormatInt(n/1000, 10)}},
			Tool: "read_file", Args: args}
		res, err := client.InvokeAs(ctx, inv, nil)
		if err != nil || res.Error != nil {
			b.Fatalf("invoke with a session: %v %+v", err, res)
		}
	}

	// Baseline: a raw request-reply between the same two connections, of
	// an invocation-sized request and a result-sized reply.
	reply := make([]byte, 420)
	rawSub, err := execConn.Conn().Subscribe("bench.raw", func(m *nats.Msg) { m.Respond(reply) })
	if err != nil {
		b.Fatal(err)
	}
	defer rawSub.Unsubscribe()
	rawSub.SetPendingLimits(1<<20, 1<<30)
	execConn.Conn().Flush()
	request := make([]byte, 260)
	raw := func() {
		if _, err := callerConn.Request("bench.raw", request, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	// The same exchange with what the audit trail adds: the request goes
	// to a subject the audit stream keeps, and the responder publishes its
	// reply there too, as the executor does with a result. It tells what
	// keeping every event costs apart from what the pipeline costs.
	auditedSub, err := execConn.Conn().Subscribe("tool.bench.raw", func(m *nats.Msg) {
		m.Respond(reply)
		execConn.Conn().Publish(events.SubjectResult, reply)
	})
	if err != nil {
		b.Fatal(err)
	}
	defer auditedSub.Unsubscribe()
	auditedSub.SetPendingLimits(1<<20, 1<<30)
	execConn.Conn().Flush()
	rawAudited := func() {
		if _, err := callerConn.Request(auditedSub.Subject, request, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}

	// A candidate in shadow that agrees with the policy in force (a
	// module more, a revision of its own): every call's input goes to it
	// and it judges each again, off the call's path.
	candFiles := defaultPolicyFiles()
	for k, v := range files {
		candFiles[k] = v
	}
	candFiles["candidate.rego"] = "package toolbus.candidate\n\nnote := \"a candidate\"\n"
	cand, err := policy.Compile(context.Background(), policy.Files(candFiles))
	if err != nil {
		b.Fatal(err)
	}
	shadowed := &shadowRun{pol: cand}
	shadowOn := func(on bool) {
		if on {
			ex.shadow.cand.Store(shadowed)
		} else {
			ex.shadow.cand.Store(nil)
		}
	}

	read := &policy.Input{Tool: policy.ToolInput{Name: "read_file", Kind: events.KindRead, Source: events.SourceBuiltin},
		Args: map[string]any{"file_path": "small.txt"}, Caller: events.Identity{ID: "agent:bench"}, Paths: []string{ws.Root() + "/small.txt"}}
	decide := func() { pol.Decide(ctx, read) }

	if os.Getenv("TOOLBUS_BENCH_NO_AUDIT") != "" {
		bb.JetStream().DeleteStream(ctx, events.AuditStream) // to see what the audit trail costs
	}
	b.ResetTimer()
	for range b.N {
		rawP50, rawP99, invP50, invP99 := latencyPair(latencySamples, raw, invoke)
		rawN50, _, noopP50, noopP99 := latencyPair(latencySamples, raw, invokeNoop)
		rawA50, _, audP50, audP99 := latencyPair(latencySamples, raw, rawAudited)
		rawS50, _, sesP50, sesP99 := latencyPair(latencySamples, raw, invokeSession)
		offP50, offP99, onP50, onP99 := latencyPair(latencySamples, invokeNoop, tracedNoop)
		unshadowed, shadow := blocksPair(latencySamples, invoke, shadowOn)
		// From a session: no decision is cached, and the candidate judges
		// every call's input anew.
		sesUnshadowed, sesShadow := blocksPair(latencySamples, invokeSession, shadowOn)
		pol := measure.Interleaved(latencySamples, decide)[0]
		polP50, polP99 := pol.P50, pol.P99
		raw1 := measure.Throughput(1, throughputOps/4, raw)
		inv1 := measure.Throughput(1, throughputOps/4, invoke)
		raw64 := measure.Throughput(64, throughputOps, raw)
		inv64 := measure.Throughput(64, throughputOps, invoke)

		b.ReportMetric(float64(invP50)/float64(rawP50), "p50-x-raw")
		b.ReportMetric(inv64, "invokes/s@64")
		b.ReportMetric(float64(polP50.Nanoseconds()), "policy-p50-ns")
		fmt.Printf("\n%-38s %12s %12s %12s\n", "invoke benchmark (2 cores, loopback)", "p50", "p99", "vs raw p50")
		fmt.Printf("%-38s %12s %12s %12s\n", "raw NATS request-reply", rawP50, rawP99, "1.00×")
		fmt.Printf("%-38s %12s %12s %11.2f×\n", "  the same, kept by the audit stream", audP50, audP99, float64(audP50)/float64(rawA50))
		fmt.Printf("%-38s %12s %12s %11.2f×   goal ≤ 2.0×\n", "tool.invoke read_file (allowed)", invP50, invP99, float64(invP50)/float64(rawP50))
		fmt.Printf("%-38s %12s %12s %11.2f×   goal ≤ 1.7×\n", "tool.invoke of a no-op tool", noopP50, noopP99, float64(noopP50)/float64(rawN50))
		fmt.Printf("%-38s %12s %12s %11.2f×\n", "tool.invoke read_file, from a session", sesP50, sesP99, float64(sesP50)/float64(rawS50))
		fmt.Printf("%-38s %12s %12s %12s\n", "no-op tool.invoke, tracing off", offP50, offP99, "")
		fmt.Printf("%-38s %12s %12s %11.2f×   vs off\n", "  the same, every call traced", onP50, onP99, float64(onP50)/float64(offP50))
		fmt.Printf("%-38s %12s %12s %12s\n", "tool.invoke read_file, no shadow", unshadowed.P50, unshadowed.P99, "")
		fmt.Printf("%-38s %12s %12s %11.2f×   vs none, goal ≤ 1.10×\n", "  the same, a candidate in shadow", shadow.P50, shadow.P99, float64(shadow.P50)/float64(unshadowed.P50))
		fmt.Printf("%-38s %12s %12s %12s\n", "  from a session, no shadow", sesUnshadowed.P50, sesUnshadowed.P99, "")
		fmt.Printf("%-38s %12s %12s %11.2f×   vs none\n", "  from a session, a candidate in shadow", sesShadow.P50, sesShadow.P99, float64(sesShadow.P50)/float64(sesUnshadowed.P50))
		fmt.Printf("shadow: %d calls judged by the candidate, %d dropped\n", shadowed.judged.Load(), shadowed.dropped.Load())
		fmt.Printf("%-38s %12s %12s %12s   goal p50 ≤ 15µs\n", "policy decision alone", polP50, polP99, "")
		fmt.Printf("decisions not from the cache: %d\n", cacheMisses.Load())
		fmt.Printf("%-38s %12s %12s\n", "throughput, ops/s", "raw", "tool.invoke")
		fmt.Printf("%-38s %12.0f %12.0f   goal ≥ 20,000/s\n", "  1 caller", raw1, inv1)
		fmt.Printf("%-38s %12.0f %12.0f   goal ≥ 40,000/s\n", "  64 callers", raw64, inv64)
	}
}

func defaultPolicyFiles() map[string]string {
	files, err := policy.LoadDir("../../policy")
	if err != nil {
		panic(err)
	}
	return files
}

// switchedTraces is a tracer provider that is OpenTelemetry's no-op, as
// an executor's is with tracing off, but while on is set: then it is an
// SDK provider that samples every span and exports them over OTLP/HTTP
// in batches, to a collector that takes them and keeps nothing.
type switchedTraces struct {
	embedded.TracerProvider
	on  atomic.Bool
	sdk *sdktrace.TracerProvider
	off trace.TracerProvider
}

func newSwitchedTraces(b *testing.B) *switchedTraces {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(collector.Close)
	exporter, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(collector.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	return &switchedTraces{sdk: tp, off: noop.NewTracerProvider()}
}

func (s *switchedTraces) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return switchedTracer{s: s, on: s.sdk.Tracer(name, opts...), off: s.off.Tracer(name, opts...)}
}

type switchedTracer struct {
	embedded.Tracer
	s       *switchedTraces
	on, off trace.Tracer
}

func (t switchedTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.s.on.Load() {
		return t.on.Start(ctx, name, opts...)
	}
	return t.off.Start(ctx, name, opts...)
}
