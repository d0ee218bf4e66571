package executor

import (
	"bytes"
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// TestDecisionCacheIsBounded: the cache keeps decisions of a deterministic
// policy for exact inputs, never for large arguments, never past its byte
// budget, and forgets everything when the policy or the allowlist changes.
func TestDecisionCacheIsBounded(t *testing.T) {
	pol := defaultPol(t)
	allow := policy.Decision{Verdict: events.Allow, Reason: "r"}
	var d decisions
	small := []byte("read_file\x00small")
	d.put(pol, 1, small, allow)
	if got, ok := d.get(pol, 1, small); !ok || got != allow {
		t.Fatal("a small key was not kept")
	}
	if _, ok := d.get(pol, 2, small); ok {
		t.Error("kept across an allowlist change")
	}
	other, err := policy.Compile(context.Background(), policy.Files{"p.rego": "package toolbus\ndecision := {\"verdict\": \"DENY\", \"reason\": \"x\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.get(other, 1, small); ok {
		t.Error("kept across a policy change")
	}
	large := bytes.Repeat([]byte("x"), maxCachedKey+1)
	d.put(pol, 1, large, allow)
	if _, ok := d.get(pol, 1, large); ok {
		t.Error("a large key was kept")
	}
	// Filling the byte budget starts the cache over.
	d = decisions{}
	key := bytes.Repeat([]byte("k"), maxCachedKey)
	for i := range maxCachedBytes/maxCachedKey + 1 {
		key[0], key[1], key[2] = byte(i), byte(i>>8), byte(i>>16)
		d.put(pol, 1, key, allow)
		if d.bytes > maxCachedBytes {
			t.Fatalf("%d bytes of keys kept", d.bytes)
		}
	}
	if len(d.m) != 1 {
		t.Errorf("after the budget was passed the cache holds %d entries, want 1", len(d.m))
	}
}
