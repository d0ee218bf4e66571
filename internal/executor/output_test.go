package executor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// TestFullOutputStoreCapsTheResult: with the store's byte limit reached, a
// large output still succeeds, capped, saying the whole could not be
// kept and why; what the store held before is intact.
func TestFullOutputStoreCapsTheResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.OutputStoreBytes = 2 << 20 })
	small := strings.Repeat("small output ", 80000)     // about 1 MiB, one line
	big := strings.Repeat("0123456789abcdef", 3<<20/16) // 3 MiB, more than the store takes
	os.WriteFile(filepath.Join(e.ws.Root(), "small.txt"), []byte(small), 0o644)
	os.WriteFile(filepath.Join(e.ws.Root(), "big.txt"), []byte(big), 0o644)

	first := e.call(t, "read_file", `{"file_path":"small.txt"}`)
	if first.Error != nil || first.OutputRef == "" {
		t.Fatalf("the first output was not kept: %s %q", errType(first), tail(first.LLMContent))
	}
	res := e.call(t, "read_file", `{"file_path":"big.txt"}`)
	if res.Error != nil {
		t.Fatalf("a full store failed the call: %s %s", errType(res), res.LLMContent)
	}
	if !res.Truncated || res.OutputRef != "" || len(res.LLMContent) > e.exec.cfg.MaxContent+1000 {
		t.Errorf("truncated=%v ref=%q, %d bytes of llmContent", res.Truncated, res.OutputRef, len(res.LLMContent))
	}
	for _, want := range []string{"showing 40000 of 3145728 characters", "The whole output could not be kept", "TOOLBUS_OUTPUTS is full", "maximum bytes exceeded"} {
		if !strings.Contains(res.LLMContent, want) {
			t.Errorf("the note does not say %q: %q", want, tail(res.LLMContent))
		}
	}
	obs, err := e.bus.JetStream().ObjectStore(context.Background(), events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	if whole, err := obs.GetString(context.Background(), first.InvocationID); err != nil || whole != small {
		t.Errorf("the output kept before reads back %d bytes (%v), want its %d", len(whole), err, len(small))
	}
	if _, err := obs.GetInfo(context.Background(), res.InvocationID); err == nil {
		t.Error("a partial object of the refused output is in the store")
	}
}

func tail(s string) string { return s[max(0, len(s)-300):] }

// TestStructuredContentIsNeverCut: an MCP tool's structuredContent within
// the output limit comes in the result as the tool gave it; one past it
// is not cut (a cut JSON value is no value) but kept whole in the object
// store, and the text says where.
func TestStructuredContentIsNeverCut(t *testing.T) {
	t.Parallel()
	small := json.RawMessage(`{"n":1.50,"big":12345678901234567890}`)
	big := json.RawMessage(`{"rows":"` + strings.Repeat("r", DefaultMaxContent) + `"}`)
	json := func(name string, v json.RawMessage) tool.Tool {
		return tool.Func(events.ToolSpec{Name: name, Kind: events.KindRead}, func(context.Context, *tool.Call) (*tool.Output, error) {
			return &tool.Output{LLMContent: "rows", ReturnDisplay: "rows", Structured: v}, nil
		})
	}
	e := newEnv(t, func(c *Config) { c.Tools = append(c.Tools, json("small_json", small), json("big_json", big)) })
	waitTool(t, e.exec, "big_json")
	if res := e.call(t, "small_json", `{}`); string(res.StructuredContent) != string(small) || res.StructuredRef != "" || res.LLMContent != "rows" {
		t.Errorf("small: %s, ref %q, %q; want it as the tool gave it", res.StructuredContent, res.StructuredRef, res.LLMContent)
	}
	res := e.call(t, "big_json", `{}`)
	want := "rows\n\n[The structuredContent, 40011 characters, is too large for the result; it is in the object store at " + res.StructuredRef + ".]"
	if res.StructuredContent != nil || res.StructuredRef != events.OutputBucket+"/"+res.InvocationID+".structured" || res.LLMContent != want {
		t.Errorf("big: %d bytes inline, ref %q, %q; want it stored and said so", len(res.StructuredContent), res.StructuredRef, res.LLMContent)
	}
	obs, err := e.bus.JetStream().ObjectStore(context.Background(), events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	if whole, err := obs.GetString(context.Background(), events.OutputObjectName(res.StructuredRef)); err != nil || whole != string(big) {
		t.Errorf("the stored structuredContent: %d bytes, %v; want %d", len(whole), err, len(big))
	}
}

// TestOutputStoreLimitsReachAnExistingBucket: a bucket made by an older
// executor, without limits, gets the byte limit and the TTL, and keeps
// its objects.
func TestOutputStoreLimitsReachAnExistingBucket(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	ctx := context.Background()
	old, err := b.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: events.OutputBucket, Storage: jetstream.FileStorage, TTL: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.PutString(ctx, "inv-old", "kept from before"); err != nil {
		t.Fatal(err)
	}
	ws, err := builtin.NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	e := &env{bus: b, ws: ws}
	e.startExecutor(t, b, func(c *Config) {
		c.OutputStoreBytes = 256 << 20
		c.OutputStoreTTL = 36 * time.Hour
	})
	s, err := b.JetStream().Stream(ctx, "OBJ_"+events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxBytes != 256<<20 || cfg.MaxAge != 36*time.Hour || cfg.Discard != jetstream.DiscardNew {
		t.Errorf("the bucket's stream has max bytes %d, max age %s, discard %v", cfg.MaxBytes, cfg.MaxAge, cfg.Discard)
	}
	if got, err := old.GetString(ctx, "inv-old"); err != nil || got != "kept from before" {
		t.Errorf("the old object: %q %v", got, err)
	}
}

// An output read follows its reader: a reader that takes a byte at a time
// gets the whole output, window by window, and the executor holds no
// more than a window for it; readers that stop after their first chunk
// free the executor at once, so more of them than it serves at once
// leave it serving the next read whole. A name that was never stored,
// and a malformed request, get a clear answer.
func TestOutputReadsFollowTheirReaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := strings.Repeat("0123456789abcdef", 5<<20/16) // 5 MiB: 40 chunks, 3 windows
	os.WriteFile(filepath.Join(e.ws.Root(), "big.txt"), []byte(big), 0o644)
	res := e.call(t, "read_file", `{"file_path":"big.txt"}`)
	if res.OutputRef == "" {
		t.Fatalf("no output kept: %s %q", errType(res), tail(res.LLMContent))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 2 * outputReadsAtOnce {
		r, err := e.client.ReadOutput(ctx, res.OutputRef)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		head := make([]byte, 16)
		if _, err := io.ReadFull(r, head); err != nil || string(head) != big[:16] {
			t.Fatalf("read %d: %q %v", i, head, err)
		}
		r.Close()
	}
	r, err := e.client.ReadOutput(ctx, res.InvocationID)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := io.ReadAll(iotest.OneByteReader(r))
	r.Close()
	if err != nil || string(whole) != big {
		t.Fatalf("read a byte at a time: %d of %d bytes, %v", len(whole), len(big), err)
	}
	if _, err := e.client.ReadOutput(ctx, "never-stored"); !errors.Is(err, invoke.ErrNoOutput) {
		t.Errorf("a name never stored: %v", err)
	}
	reply, err := e.bus.Conn().RequestWithContext(ctx, events.OutputSubject(""), []byte(`{"name":`))
	if err != nil || reply.Header.Get(events.OutputHeader) != events.OutputFailed || !strings.Contains(string(reply.Data), "malformed output request") {
		t.Errorf("a malformed request: %v %q", err, reply.Data)
	}
}
