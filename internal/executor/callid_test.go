package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// TestRecentIDsKeepAWindow: an executor refuses a key it took within the
// window, a copy of the request told apart from another call, and takes
// the key again once the window, or the room of the window, has passed it.
func TestRecentIDsKeepAWindow(t *testing.T) {
	r := newRecentIDs()
	now := time.Unix(1_800_000_000, 0)
	if err := r.take("alice", "x", []byte("first"), now); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, principal, id, body string
		at                        time.Duration
		want                      error
	}{
		{"the same request again", "alice", "x", "first", time.Second, errIDCopy},
		{"another call under the key", "alice", "x", "second", time.Second, errIDReused},
		{"another principal's id", "bob", "x", "second", time.Second, nil},
		// A principal and id are hashed apart: no pair of them joins
		// into another's key.
		{"the id moved into the principal", "alicex", "", "first", time.Second, nil},
		{"just inside the window", "alice", "x", "third", idWindow - time.Nanosecond, errIDReused},
		{"past the window", "alice", "x", "fourth", idWindow, nil},
		{"the key taken past the window, again", "alice", "x", "fifth", idWindow + time.Second, errIDReused},
	} {
		if err := r.take(tt.principal, tt.id, []byte(tt.body), now.Add(tt.at)); !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}

	// Past idWindowKeys keys within the window, the oldest goes first.
	r = newRecentIDs()
	for i := range idWindowKeys + 1 {
		if err := r.take("alice", fmt.Sprint(i), nil, now); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	if err := r.take("alice", "0", []byte("again"), now); err != nil {
		t.Errorf("the oldest key past the window's room: %v, want it taken again", err)
	}
	if err := r.take("alice", "2", []byte("again"), now); !errors.Is(err, errIDReused) {
		t.Errorf("a key within the window's room: %v, want %v", err, errIDReused)
	}
	if n := len(r.byKey); n > idWindowKeys {
		t.Errorf("the window holds %d keys, more than %d", n, idWindowKeys)
	}
}

// TestAKeyReusedOnAnotherExecutorIsACallOfItsOwn: a prompt-injected
// agent sends calls under one id until one lands on an executor that did
// not take it. That executor runs it, as a call with an id of its own:
// the trail keeps the two calls apart, each with its own arguments,
// executor and one terminal result, and the executor that took the key
// refuses every other call under it.
func TestAKeyReusedOnAnotherExecutorIsACallOfItsOwn(t *testing.T) {
	t.Parallel()
	answering := func(who string) tool.Tool {
		return tool.Func(events.ToolSpec{Name: "note_read", Kind: events.KindRead, Description: "reads a note",
			Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
			func(ctx context.Context, c *tool.Call) (*tool.Output, error) { return tool.Text("read by " + who), nil })
	}
	e := newEnv(t, func(c *Config) { c.Tools = append(c.Tools, answering("first")) })
	e.hostTools(t, "executor@second", []tool.Tool{answering("second")}, sameWorkspace(e))

	ran := map[string]int{} // the n of each call that ran, by who ran it
	refused := 0
	for n := 0; len(ran) < 2; n++ {
		if n == 128 {
			t.Fatalf("128 calls under one id, and none ran on a second executor: ran %v", ran)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "same"}, Tool: "note_read", Args: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}, nil)
		cancel()
		switch {
		case err != nil:
			t.Fatal(err)
		case res.Error == nil:
			if _, twice := ran[res.LLMContent]; twice {
				t.Fatalf("an executor ran a second call under a key it took: %s", res.LLMContent)
			}
			ran[res.LLMContent] = n
			if !events.IsCapability(res.Call) {
				t.Errorf("the result names call %q, not an id the executor minted", res.Call)
			}
		case res.Error.Type == events.ErrInvocationIDReused:
			refused++
		default:
			t.Fatalf("call %d: %s %s", n, errType(res), res.LLMContent)
		}
	}

	var recs []*audit.Record
	testkit.Eventually(t, "every call's record ends", func() bool {
		var err error
		recs, _, err = audit.Read(context.Background(), e.bus.JetStream(), audit.Query{ID: "same"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2+refused {
			return false
		}
		for _, r := range recs {
			if r.Outcome == audit.OutcomePending {
				return false
			}
		}
		return true
	})
	calls := map[string]bool{}
	ok := 0
	for _, r := range recs {
		if !events.IsCapability(r.Call) || calls[r.Call] {
			t.Errorf("record of call %q: not a minted id of its own", r.Call)
		}
		calls[r.Call] = true
		if r.LateResults != 0 {
			t.Errorf("call %s has %d results past its terminal one", r.Call, r.LateResults)
		}
		switch r.Outcome {
		case audit.OutcomeOK:
			ok++
			var args struct{ N int }
			if err := json.Unmarshal(r.Args, &args); err != nil {
				t.Fatal(err)
			}
			who := map[string]string{"executor@test": "read by first", "executor@second": "read by second"}[r.Executor]
			if n, found := ran[who]; !found || n != args.N {
				t.Errorf("the trail says %s ran call %s with n=%d; it ran n=%v (%v)", r.Executor, r.Call, args.N, n, ran)
			}
		case string(events.ErrInvocationIDReused):
			if !r.ReusedID {
				t.Errorf("refused call %s is not marked as under a reused id", r.Call)
			}
		default:
			t.Errorf("call %s ended %s", r.Call, r.Outcome)
		}
	}
	if ok != 2 {
		t.Errorf("the trail holds %d calls that ran, want 2", ok)
	}
}

// FuzzRecentIDs holds the window to a plain model of it: a map of each
// principal's ids to the request that took them and when, a key let go
// once idWindow has passed. The principals, ids and requests are a
// caller's bytes, any of them.
func FuzzRecentIDs(f *testing.F) {
	f.Add([]byte("alice\x00x\x00one\x00\x01bob\x00x\x00two\x00\x00alice\x00x\x00one\x00\xff"))
	f.Add([]byte("a\x00\x00\x00\x02a\x00\x00b\x00\x00"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		type entry struct {
			body string
			at   time.Time
		}
		r := newRecentIDs()
		model := map[[2]string]entry{}
		now := time.Unix(1_800_000_000, 0)
		fields := splitFields(ops)
		for i := 0; i+3 < len(fields); i += 4 {
			principal, id, body := fields[i], fields[i+1], fields[i+2]
			// The fourth field moves the clock on by its bytes' sum,
			// in tens of seconds.
			for _, b := range []byte(fields[i+3]) {
				now = now.Add(time.Duration(b) * 10 * time.Second)
			}
			k := [2]string{principal, id}
			var want error
			if old, ok := model[k]; ok && now.Sub(old.at) < idWindow {
				want = errIDReused
				if old.body == body {
					want = errIDCopy
				}
			} else {
				model[k] = entry{body: body, at: now}
			}
			if got := r.take(principal, id, []byte(body), now); got != want {
				t.Fatalf("take %q %q %q at +%s: got %v, want %v", principal, id, body, now.Sub(time.Unix(1_800_000_000, 0)), got, want)
			}
		}
	})
}

// splitFields splits b at its NUL bytes.
func splitFields(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return append(out, string(b[start:]))
}
