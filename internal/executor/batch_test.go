package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// batchTools are tools for batch tests: emit returns its text, upper
// upper-cases it, and meet returns only once two calls of it run at the
// same time, so it fails unless the batch runs them in parallel.
func batchTools() []tool.Tool {
	text := func(args json.RawMessage) string {
		var a struct{ Text string }
		json.Unmarshal(args, &a)
		return a.Text
	}
	var mu sync.Mutex
	arrived := 0
	both := make(chan struct{})
	schema := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)
	return []tool.Tool{
		tool.Func(events.ToolSpec{Name: "emit", Kind: events.KindRead, ReadOnly: true, Parameters: schema}, func(_ context.Context, c *tool.Call) (*tool.Output, error) {
			return tool.Text(text(c.Args)), nil
		}),
		tool.Func(events.ToolSpec{Name: "upper", Kind: events.KindRead, Parameters: schema}, func(_ context.Context, c *tool.Call) (*tool.Output, error) {
			return tool.Text(strings.ToUpper(text(c.Args))), nil
		}),
		tool.Func(events.ToolSpec{Name: "meet", Kind: events.KindRead, ReadOnly: true}, func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
			mu.Lock()
			arrived++
			if arrived == 2 {
				close(both)
			}
			mu.Unlock()
			select {
			case <-both:
				return tool.Text("met"), nil
			case <-time.After(10 * time.Second):
				return tool.Failed(events.ErrExecutionFailed, "ran alone: the batch did not run safe calls in parallel"), nil
			}
		}),
	}
}

func TestBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.hostTools(t, "executor@batch", batchTools())
	call := func(tool, args string) events.BatchCall {
		return events.BatchCall{Tool: tool, Args: json.RawMessage(args)}
	}
	tests := []struct {
		name  string
		batch events.BatchInvocation
		want  []string // llmContent, or the error type
	}{
		{"parallel safe calls", events.BatchInvocation{Calls: []events.BatchCall{call("meet", `{}`), call("meet", `{}`)}}, []string{"met", "met"}},
		{"$previous and $stepN", events.BatchInvocation{Calls: []events.BatchCall{
			call("emit", `{"text":"readme"}`), call("upper", `{"text":"$previous"}`), call("emit", `{"text":"$step0"}`), call("read_file", `{"file_path":"README.md"}`)}},
			[]string{"readme", "README", "readme", "# hello\n"}},
		{"errors do not stop the batch", events.BatchInvocation{Calls: []events.BatchCall{call("nope", `{}`), call("emit", `{"text":"still"}`)}},
			[]string{string(events.ErrToolNotFound), "still"}},
		{"abort on error", events.BatchInvocation{AbortOnError: true, Calls: []events.BatchCall{
			call("emit", `{"text":"first"}`), call("run_shell_command", `{"command":"rm -rf /"}`), call("emit", `{"text":"never"}`)}},
			[]string{"first", string(events.ErrPolicyDenied), string(events.ErrCancelled)}},
		{"a reference to a later step", events.BatchInvocation{Calls: []events.BatchCall{call("emit", `{"text":"$step3"}`)}},
			[]string{string(events.ErrInvalidParams)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := e.client.InvokeBatch(ctx, &tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Results) != len(tt.want) {
				t.Fatalf("%d results, want %d", len(res.Results), len(tt.want))
			}
			for i, want := range tt.want {
				r := res.Results[i]
				got := r.LLMContent
				if r.Error != nil {
					got = string(r.Error.Type)
				}
				if got != want {
					t.Errorf("call %d: got %q (%s), want %q", i, got, r.LLMContent, want)
				}
			}
		})
	}
}

// TestLargeBatchResultStillArrives: thirty results of 35,000 characters
// each are more than one NATS message carries; the batch result still
// reaches the caller, every call's whole output kept.
func TestLargeBatchResultStillArrives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ws.Root(), "big.txt"), []byte(strings.Repeat("y", 35000)), 0o644)
	b := &events.BatchInvocation{}
	for range 30 {
		b.Calls = append(b.Calls, events.BatchCall{Tool: "read_file", Args: json.RawMessage(`{"file_path":"big.txt"}`)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.client.InvokeBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 30 {
		t.Fatalf("%d results", len(res.Results))
	}
	obs, err := e.bus.JetStream().ObjectStore(ctx, events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res.Results {
		if r.Error != nil {
			t.Fatalf("call %d: %s %q", i, r.Error.Type, r.LLMContent)
		}
		if !r.Truncated || r.OutputRef != events.OutputBucket+"/"+r.InvocationID || !strings.Contains(r.LLMContent, "Output cut to fit one message. The whole") {
			t.Fatalf("call %d not cut as it should be: truncated=%v ref=%q", i, r.Truncated, r.OutputRef)
		}
		if whole, err := obs.GetString(ctx, r.InvocationID); err != nil || len(whole) != 35000 {
			t.Fatalf("call %d: the whole output is not kept: %d bytes, %v", i, len(whole), err)
		}
	}
	// A batch no message could answer is refused up front.
	b.Calls = make([]events.BatchCall, events.MaxBatchCalls+1)
	for i := range b.Calls {
		b.Calls[i] = events.BatchCall{Tool: "read_file", Args: json.RawMessage(`{"file_path":"big.txt"}`)}
	}
	b.ID = ""
	if _, err := e.client.InvokeBatch(ctx, b); err == nil || !strings.Contains(err.Error(), "at most 256") {
		t.Errorf("a batch of %d calls: %v", len(b.Calls), err)
	}
}

// TestResultFitsASmallMaxPayload: on a bus whose max payload is smaller
// than a capped result (40,000 four-byte characters in llmContent and in
// returnDisplay), the result is cut to fit and its whole output kept; a
// structuredContent that does not fit is kept whole in the store.
func TestResultFitsASmallMaxPayload(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), MaxPayload: 256 << 10, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, bus.Config{URL: srv.ClientURL(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	reg, err := registry.Start(ctx, b.Conn(), b.JetStream(), registry.Config{Identity: events.Identity{ID: "registry@small"}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	wide := strings.Repeat("😀", DefaultMaxContent)
	tl := tool.Func(events.ToolSpec{Name: "wide", Kind: events.KindRead}, func(context.Context, *tool.Call) (*tool.Output, error) {
		return &tool.Output{LLMContent: wide, ReturnDisplay: wide}, nil
	})
	// A structuredContent within the output limit, but of more bytes
	// than the message has room for beside the text.
	structured := json.RawMessage(`{"s":"` + strings.Repeat("😀", DefaultMaxContent-10) + `"}`)
	withJSON := tool.Func(events.ToolSpec{Name: "wide_json", Kind: events.KindRead}, func(context.Context, *tool.Call) (*tool.Output, error) {
		return &tool.Output{LLMContent: wide, ReturnDisplay: wide, Structured: structured}, nil
	})
	ex, err := Start(ctx, b.Conn(), b.JetStream(), Config{Identity: events.Identity{ID: "executor@small"}, Tools: []tool.Tool{tl, withJSON}, Policy: defaultPol(t), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Stop(context.Background())
	waitTool(t, ex, "wide")
	client := invoke.NewClient(b.Conn(), events.Identity{ID: "agent:small"}, "")
	defer client.Close()
	res, err := client.Invoke(ctx, &events.Invocation{Tool: "wide", Args: json.RawMessage(`{}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil || !res.Truncated || !strings.Contains(res.LLMContent, "Output cut to fit one message. The whole") {
		t.Fatalf("got %v truncated=%v, ending %q", res.Error, res.Truncated, res.LLMContent[max(0, len(res.LLMContent)-120):])
	}
	obs, err := b.JetStream().ObjectStore(ctx, events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	if whole, err := obs.GetString(ctx, res.InvocationID); err != nil || whole != wide {
		t.Errorf("the whole output is not kept: %d bytes, %v", len(whole), err)
	}

	// The structuredContent goes whole to the store, never cut.
	waitTool(t, ex, "wide_json")
	res, err = client.Invoke(ctx, &events.Invocation{Tool: "wide_json", Args: json.RawMessage(`{}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil || res.StructuredContent != nil || res.StructuredRef == "" || !res.Truncated {
		t.Fatalf("wide_json: %v, %d bytes of structuredContent, ref %q, truncated %v", res.Error, len(res.StructuredContent), res.StructuredRef, res.Truncated)
	}
	if whole, err := obs.GetString(ctx, events.OutputObjectName(res.StructuredRef)); err != nil || whole != string(structured) {
		t.Errorf("the structuredContent is not kept: %d bytes, %v", len(whole), err)
	}
}
