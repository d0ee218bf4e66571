package registry

// Benchmarks with 10,000 registered tools. Each reports its own time per
// operation and, as "x-baseline", its ratio to a baseline measured in the
// same run with the same N: the plainest way to do the same job without
// toolbus (a Go map lookup, a sort, json.Marshal, a raw NATS request, a raw
// JetStream read). Run: go test ./internal/registry -run '^$' -bench . -benchtime 20x

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

const benchTools = 10000

// benchRequests is 10,000 tools as providers would send them: the built-ins,
// 1,992 discovered tools and 8,000 tools of 40 MCP servers, with realistic
// descriptions and schemas, some of which the Gemini sanitiser changes.
func benchRequests() []*events.RegisterRequest {
	schema := func(i int) json.RawMessage {
		if i%4 == 0 {
			return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"id":{"type":"integer","description":"Record %d."},"mode":{"type":"integer","enum":[1,2,3,null]},"filter":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null}},"required":["id"]}`, i))
		}
		return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"path":{"type":"string","description":"Path %d to work on."},"recursive":{"type":"boolean"},"limit":{"type":"integer","minimum":1}},"required":["path"]}`, i))
	}
	desc := func(i int) string {
		return fmt.Sprintf("Tool number %d. Does one careful thing to the workspace and reports what it did, with enough words to look like a real description.", i)
	}
	reqs := []*events.RegisterRequest{{Provider: "exec@bench", Source: events.SourceBuiltin, Tools: builtin.Specs()}}
	disc := &events.RegisterRequest{Provider: "discovery@bench", Source: events.SourceDiscovered}
	for i := len(builtin.Specs()); i < 2000; i++ {
		disc.Tools = append(disc.Tools, events.ToolSpec{Name: fmt.Sprintf("project_tool_%d", i), Description: desc(i), Parameters: schema(i)})
	}
	reqs = append(reqs, disc)
	for s := range 40 {
		req := &events.RegisterRequest{Provider: "mcp@bench", Source: events.SourceMCP, Server: fmt.Sprintf("server-%02d", s)}
		for i := range 200 {
			n := 2000 + s*200 + i
			req.Tools = append(req.Tools, events.ToolSpec{Name: fmt.Sprintf("remote.tool_%d", n), Description: desc(n), Parameters: schema(n)})
		}
		reqs = append(reqs, req)
	}
	return reqs
}

func benchRegistry(b *testing.B) *Registry {
	r := New(Settings{}, bustest.Quiet())
	for _, req := range benchRequests() {
		if res := r.Register(req); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	if n := r.Catalog().Len(); n != benchTools {
		b.Fatalf("%d tools, want %d", n, benchTools)
	}
	return r
}

// ratio reports elapsed/baseline as the x-baseline metric.
func ratio(b *testing.B, baseline time.Duration) {
	b.ReportMetric(float64(b.Elapsed())/float64(baseline), "x-baseline")
	b.ReportMetric(float64(baseline.Nanoseconds())/float64(b.N), "baseline-ns/op")
}

func timeN(n int, f func(i int)) time.Duration {
	start := time.Now()
	for i := range n {
		f(i)
	}
	return time.Since(start)
}

// BenchmarkRegisterAll registers 10,000 tools through the bus: client,
// registry service, KV bucket. Baseline: the same request bytes sent as raw
// NATS requests to a responder that only acknowledges them.
func BenchmarkRegisterAll(b *testing.B) {
	bb := bustest.Start(b, "")
	startBenchService(b, bb)
	c := NewClient(bb.Conn(), events.Identity{ID: "bench"})
	reqs := benchRequests()
	for _, req := range reqs {
		req.Sender = c.id
	}
	raw := rawChunks(b, c, reqs)
	sub, err := bb.Conn().Subscribe("bench.raw", func(m *nats.Msg) { m.Respond([]byte("ok")) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx := context.Background()
	baseline := timeN(b.N, func(int) {
		for _, data := range raw {
			if _, err := bb.Conn().Request("bench.raw", data, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if _, err := c.Remove(ctx, &events.RemoveRequest{Sources: []events.Source{events.SourceBuiltin, events.SourceDiscovered, events.SourceMCP}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, req := range reqs {
			if _, err := c.Register(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	ratio(b, baseline)
}

func startBenchService(b *testing.B, bb *bus.Bus) *Service {
	svc, err := Start(context.Background(), bb.Conn(), bb.JetStream(), Config{Identity: registryID, Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Stop() })
	return svc
}

func rawChunks(b *testing.B, c *Client, reqs []*events.RegisterRequest) [][]byte {
	var out [][]byte
	for _, req := range reqs {
		chunks, err := events.EncodeRegister(req, int(c.nc.MaxPayload()), "bench")
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, chunks...)
	}
	return out
}

// BenchmarkGetTool looks tools up by name in a 10,000-tool catalogue.
// Baseline: a lookup in a plain map[string]*Tool.
func BenchmarkGetTool(b *testing.B) {
	r := benchRegistry(b)
	names := r.Catalog().AllToolNames()
	plain := make(map[string]*events.Tool, len(names))
	for _, t := range r.Catalog().All() {
		plain[t.Name] = t
	}
	var sink *events.Tool
	baseline := timeN(b.N, func(i int) { sink = plain[names[i%len(names)]] })
	b.ResetTimer()
	for i := range b.N {
		t, ok := r.Catalog().GetTool(names[i%len(names)])
		if !ok {
			b.Fatal("not found")
		}
		sink = t
	}
	b.StopTimer()
	_ = sink
	ratio(b, baseline)
}

// BenchmarkListSorted is getAllTools: the active tools sorted by display
// name. Baseline: sorting the 10,000 display names alone.
func BenchmarkListSorted(b *testing.B) {
	r := benchRegistry(b)
	c := r.Catalog()
	var display []string
	for _, t := range c.All() {
		display = append(display, t.DisplayName)
	}
	baseline := timeN(b.N, func(int) { slices.Sort(slices.Clone(display)) })
	b.ResetTimer()
	for range b.N {
		if len(c.AllTools()) != benchTools {
			b.Fatal("short list")
		}
	}
	b.StopTimer()
	ratio(b, baseline)
}

// BenchmarkDeclarations builds the declarations of all 10,000 tools in each
// format from a new snapshot whose entries have never built one (cold), and
// again from a snapshot that has (warm). Baseline: json.Marshal of the same
// declarations as Go structs with raw schemas, the obvious way.
func BenchmarkDeclarations(b *testing.B) {
	r := benchRegistry(b)
	tools := r.Catalog().All()
	type decl struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	plain := make([]decl, len(tools))
	for i, t := range tools {
		plain[i] = decl{t.Name, t.Description, t.Parameters}
	}
	for f := catalog.Gemini; f <= catalog.MCP; f++ {
		b.Run(f.String()+"/cold", func(b *testing.B) {
			baseline := timeN(b.N, func(int) {
				if _, err := json.Marshal(plain); err != nil {
					b.Fatal(err)
				}
			})
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				entries := make([]*catalog.Entry, len(tools))
				for i, t := range tools {
					entries[i] = catalog.NewEntry(t)
				}
				c := catalog.New(entries)
				b.StartTimer()
				if len(c.Declarations(f)) == 0 {
					b.Fatal("empty")
				}
			}
			b.StopTimer()
			ratio(b, baseline)
		})
		b.Run(f.String()+"/filtered-100", func(b *testing.B) {
			c := r.Catalog()
			names := c.AllToolNames()[:100]
			b.ResetTimer()
			for range b.N {
				c.DeclarationsFor(f, names)
			}
		})
	}
}

// BenchmarkCatalogRead reads the whole 10,000-tool catalogue from the bus
// over another connection, as any process does without asking the registry.
// Baseline: reading the bucket's messages (its shards) through a KV
// watcher, with no decoding.
func BenchmarkCatalogRead(b *testing.B) {
	bb := bustest.Start(b, "")
	startBenchService(b, bb)
	c := NewClient(bb.Conn(), events.Identity{ID: "bench"})
	ctx := context.Background()
	for _, req := range benchRequests() {
		if _, err := c.Register(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	reader := bustest.Connect(b, bb)
	kv, err := reader.JetStream().KeyValue(ctx, events.CatalogBucket)
	if err != nil {
		b.Fatal(err)
	}
	rawRead := func() {
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for e := range w.Updates() {
			if e == nil {
				break
			}
			n++
		}
		w.Stop()
		if n == 0 {
			b.Fatal("raw read no shard")
		}
	}
	baseline := timeN(b.N, func(int) { rawRead() })
	b.ResetTimer()
	for range b.N {
		cat, err := catalog.Load(ctx, reader.JetStream(), bustest.Quiet())
		if err != nil {
			b.Fatal(err)
		}
		if cat.Len() != benchTools {
			b.Fatalf("read %d tools", cat.Len())
		}
	}
	b.StopTimer()
	ratio(b, baseline)
}
