package executor

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestAnOutputReadFloodIsBounded: an agent asks for its own stored
// output thousands of times and never takes a window. The executor
// serves a few of its reads and refuses the rest at once, so the
// goroutines it runs stay bounded, and another principal's read is
// served whole meanwhile.
func TestAnOutputReadFloodIsBounded(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	big := strings.Repeat("0123456789abcdef", 3<<20/16) // 3 MiB: kept in the store
	os.WriteFile(filepath.Join(e.ws.Root(), "big.txt"), []byte(big), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stored := func(principal string) (*invoke.Client, string) {
		c := invoke.NewClient(bustest.Connect(t, e.bus).Conn(), events.Identity{ID: principal, Role: "agent"}, principal)
		t.Cleanup(func() { c.Close() })
		res, err := c.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: []byte(`{"file_path":"big.txt"}`)}, nil)
		if err != nil || res.Error != nil || res.OutputRef == "" {
			t.Fatalf("%s's read of big.txt: %+v %v", principal, res, err)
		}
		return c, res.OutputRef
	}
	_, ref := stored("mallory")
	alice, aliceRef := stored("alice")

	// The flood: requests on mallory's own subject, answers heard and
	// never acknowledged.
	const flood = 5000
	nc := bustest.Connect(t, e.bus).Conn()
	var refused, chunks atomic.Int64
	inbox := nats.NewInbox()
	sub, err := nc.Subscribe(inbox+".>", func(m *nats.Msg) {
		switch m.Header.Get(events.OutputHeader) {
		case events.OutputFailed:
			if strings.Contains(string(m.Data), "finish one first") {
				refused.Add(1)
			}
		case "":
		default:
			chunks.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	req, err := events.Encode(&events.OutputRequest{Header: events.Header{Sender: events.Identity{ID: "mallory"}}, Name: ref})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	before := runtime.NumGoroutine()
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for refused.Load() < flood-outputReadsPerPrincipal && ctx.Err() == nil {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(time.Millisecond) // sampling, not synchronising
		}
	}()
	for i := range flood {
		if err := nc.PublishRequest(events.OutputSubject("mallory"), inbox+"."+strconv.Itoa(i), req); err != nil {
			t.Fatal(err)
		}
	}
	<-sampled
	if got := refused.Load(); got < flood-outputReadsPerPrincipal {
		t.Fatalf("%d of %d reads refused, want all but %d", got, flood, outputReadsPerPrincipal)
	}
	t.Logf("a flood of %d output reads never acknowledged: %d refused at once, %d chunks sent to the rest; goroutines %d before, at most %d during (the bus's own included)",
		flood, refused.Load(), chunks.Load(), before, peak.Load())
	if grown := int(peak.Load()) - before; grown > 4*outputReadsPerPrincipal+32 {
		t.Errorf("the flood grew the goroutines by %d; the executor serves %d reads of one principal at once", grown, outputReadsPerPrincipal)
	}
	e.exec.mu.Lock()
	held := e.exec.readers["mallory"]
	e.exec.mu.Unlock()
	if held > outputReadsPerPrincipal {
		t.Errorf("the executor holds %d reads of the flooding principal, want at most %d", held, outputReadsPerPrincipal)
	}

	// Another principal's read, during the flood's held reads.
	r, err := alice.ReadOutput(ctx, aliceRef)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(whole) != big {
		t.Fatalf("alice's read during the flood: %d of %d bytes, %v", len(whole), len(big), err)
	}
}
