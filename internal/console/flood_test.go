package console

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestConfirmationFlood is agents that queue many large confirmation
// requests, as the executor sends them (cut to what an approver is
// shown: events.ConfirmRequest.Shorten), while a person has the console
// open. What a page is sent per change is the size of that change, not of
// the queue, and what the console holds per request is bounded.
func TestConfirmationFlood(t *testing.T) {
	testkit.Heavy(t, "a flood of large confirmation requests")
	const (
		n    = 150
		size = 450 << 10 // arguments and diff each: a request near the bus's 1 MB
	)
	// What one request may cost a page: its arguments and diff cut to
	// the approver's bound, and room for the rest of it.
	const perRequest = events.MaxShownArgs + events.MaxShownDiff + 16<<10
	// Sample the allocations finely enough to tell what the console holds
	// from what the bus holds in this one process.
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 16 << 10
	e := newEnv(t)
	st := e.stream(t)
	if name, _ := st.next(t); name != "snapshot" {
		t.Fatalf("the first event is %s", name)
	}
	before, heldBefore := heap(), held()

	nc := bustest.Connect(t, e.bus).Conn()
	content := strings.Repeat("x", size)
	args, _ := json.Marshal(map[string]string{"file_path": "big.txt", "content": content})
	keys := make([]string, n)
	sentBefore := st.bytes.Load()
	for i := range n {
		keys[i] = events.AnswerSubjectPrefix + nuid.Next()
		req := &events.ConfirmRequest{Header: events.Header{Sender: events.Identity{ID: "executor@test", Role: "executor"}},
			InvocationID: fmt.Sprintf("inv-flood-%d", i), Tool: "write_file", Kind: "edit", Caller: events.Identity{ID: fmt.Sprintf("agent:test-%d", i%10), Role: "agent"},
			Args: args, Diff: "+" + content + "\n", Reason: "asks", DeadlineMillis: 600_000, AnswerTo: keys[i]}
		req.Shorten()
		data, err := events.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(events.SubjectConfirm, data); err != nil {
			t.Fatal(err)
		}
	}
	// Every request reaches the page, each sent once, in changes each the
	// size of what it adds.
	got := 0
	for got < n {
		c := st.change(t)
		got += len(c.Pending)
		for _, r := range c.Pending {
			if !r.Shortened || len(r.Diff) > events.MaxShownDiff+200 || len(r.Args) > events.MaxShownArgs+200 {
				t.Fatalf("a flooded request is not shown cut: shortened %v, diff %d bytes, args %d bytes", r.Shortened, len(r.Diff), len(r.Args))
			}
		}
	}
	if got != n {
		t.Errorf("%d requests sent to the page, want each of %d once", got, n)
	}
	flood := st.bytes.Load() - sentBefore
	if flood > n*perRequest {
		t.Errorf("the flood cost the page %d bytes, %d per request; want at most %d per request", flood, flood/n, perRequest)
	}
	after, heldAfter := heap(), held()
	t.Logf("the flood of %d requests of %d KiB: the page was sent %d KiB (%d KiB per request); the console holds %d MiB, %d MiB before; "+
		"the process's heap %d MiB before, %d MiB after, most of it the bus's; %s",
		n, len(args)>>10, flood>>10, flood/n>>10, heldAfter>>20, heldBefore>>20, before>>20, after>>20, rss())

	// One more change with the whole queue waiting: the executor closes
	// one request. The page is sent that request's end, not the queue.
	sentBefore = st.bytes.Load()
	data, err := events.Encode(&events.ConfirmClosed{Header: events.Header{Sender: events.Identity{ID: "executor@test", Role: "executor"}},
		InvocationID: "inv-flood-0", AnswerTo: keys[0], ErrorType: events.ErrCancelled, Reason: "the caller went away"})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(events.SubjectConfirmClosed, data); err != nil {
		t.Fatal(err)
	}
	c := st.change(t)
	if len(c.Ended) != 1 || c.Ended[0].Key != keys[0] || len(c.Pending) != 0 {
		t.Errorf("the change when one request closed: %d pending, %d ended", len(c.Pending), len(c.Ended))
	}
	if one := st.bytes.Load() - sentBefore; one > perRequest {
		t.Errorf("closing one request of %d cost the page %d bytes; want at most %d, the size of one request", n, one, perRequest)
	}
	// What the console holds after a collection: its approver's requests,
	// each cut to the bound, far from the flood's size.
	if bound := uint64(n * perRequest * 3 / 2); heldAfter > bound {
		t.Errorf("the console holds %d MiB after a flood of %d MiB; want at most %d MiB", heldAfter>>20, n*2*size>>20, bound>>20)
	}
}

// held estimates, from the memory profile, the live heap that the console
// and its approver allocated: what they hold, apart from the bus that
// shares the process.
func held() uint64 {
	// The profile is as of the last completed collection but one.
	runtime.GC()
	runtime.GC()
	n, _ := runtime.MemProfile(nil, false)
	var recs []runtime.MemProfileRecord
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	total := 0.0
	for _, r := range recs {
		if r.InUseObjects() == 0 || !consoles(r.Stack()) {
			continue
		}
		// Undo the sampling as pprof does: an allocation of size s is
		// recorded with probability 1-exp(-s/rate).
		size := float64(r.InUseBytes()) / float64(r.InUseObjects())
		total += float64(r.InUseBytes()) / (1 - math.Exp(-size/rate))
	}
	return uint64(total)
}

// consoles reports whether an allocation was made by the console or its
// approver, not by a test's reader of the stream.
func consoles(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		for _, p := range []string{"/internal/approve.", "/internal/console.(*Server).", "/internal/console.(*shown).", "/internal/console.(*allowWatch)."} {
			if strings.Contains(f.Function, p) {
				return true
			}
		}
		if !more {
			return false
		}
	}
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rss is the process's resident set, for the log.
func rss() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "RSS unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return "RSS " + strings.TrimSpace(v)
		}
	}
	return "RSS unknown"
}
