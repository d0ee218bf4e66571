package executor

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// TestDecisionCacheStoresNothingItMayNotServe: put alone keeps nothing of
// a key over the bound or of a policy that is not deterministic (get
// refuses both too, but an entry kept and never served is memory an
// agent could fill), and the byte budget counts the input and the shell
// line each record holds.
func TestDecisionCacheStoresNothingItMayNotServe(t *testing.T) {
	t.Parallel()
	pol := defaultPol(t)
	allow := judged{Decision: policy.Decision{Verdict: events.Allow, Reason: "r"}}
	var d decisions
	d.put(pol, 1, nil, bytes.Repeat([]byte("x"), maxCachedKey+1), allow)
	if len(d.m) != 0 {
		t.Errorf("a key over the bound was stored: %d entries", len(d.m))
	}
	random, err := policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus

decision := {"verdict": "ALLOW", "reason": sprintf("%d", [rand.intn("x", 10)])}
`})
	if err != nil {
		t.Fatal(err)
	}
	if random.Deterministic() {
		t.Fatal("a policy calling rand.intn is deterministic")
	}
	d = decisions{}
	d.put(random, 1, nil, []byte("read_file\x00small"), allow)
	if len(d.m) != 0 {
		t.Errorf("a nondeterministic policy's decision was stored: %d entries", len(d.m))
	}

	// A new allowlist starts the cache over, and the cache serves under it.
	d = decisions{}
	d.put(pol, 1, nil, []byte("k1"), allow)
	d.put(pol, 2, nil, []byte("k2"), allow)
	if _, ok := d.get(pol, 2, nil, []byte("k2")); !ok || len(d.m) != 1 {
		t.Errorf("after an allowlist change: served %v, %d entries; want served, 1", ok, len(d.m))
	}
	d.put(pol, 2, nil, []byte("k3"), allow)
	if len(d.m) != 2 {
		t.Errorf("a second small entry started the cache over: %d entries", len(d.m))
	}

	d = decisions{}
	// Half the record in its input, half in its shell line: each counts.
	line := strings.Repeat("l", 1<<19)
	for i := range maxCachedBytes>>20 + 2 {
		rec := policy.Recorded{Input: []byte(line), ShellLine: line}
		d.put(pol, 1, nil, []byte(fmt.Sprintf("run_shell_command\x00%d", i)), judged{Decision: allow.Decision, rec: rec})
		if d.bytes > maxCachedBytes {
			t.Fatalf("%d bytes kept, over the budget of %d", d.bytes, maxCachedBytes)
		}
	}
	if len(d.m) > maxCachedBytes>>20 {
		t.Errorf("%d records of 1 MiB kept within %d bytes", len(d.m), maxCachedBytes)
	}
}

// TestDecisionCacheBoundsAreInclusive: a key of exactly maxCachedKey
// bytes is kept and served, and the cache holds maxCachedDecisions
// decisions before it starts over, not one more.
func TestDecisionCacheBoundsAreInclusive(t *testing.T) {
	t.Parallel()
	pol := defaultPol(t)
	allow := judged{Decision: policy.Decision{Verdict: events.Allow, Reason: "r"}}
	var d decisions
	key := bytes.Repeat([]byte("k"), maxCachedKey)
	d.put(pol, 1, nil, key, allow)
	if _, ok := d.get(pol, 1, nil, key); !ok {
		t.Errorf("a key of exactly %d bytes was not served", maxCachedKey)
	}

	d = decisions{}
	for i := range maxCachedDecisions {
		d.put(pol, 1, nil, fmt.Appendf(nil, "read_file\x00%d", i), allow)
	}
	if len(d.m) != maxCachedDecisions {
		t.Fatalf("%d decisions kept of %d put, want all", len(d.m), maxCachedDecisions)
	}
	d.put(pol, 1, nil, []byte("read_file\x00one more"), allow)
	if len(d.m) != 1 {
		t.Errorf("one past the bound: %d decisions kept, want the cache started over with 1", len(d.m))
	}
}
