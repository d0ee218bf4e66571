package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/protect"
)

// TestDecisionCacheIsBounded: the cache keeps decisions of a deterministic
// policy for exact inputs, never for large arguments, never past its byte
// budget, and forgets everything when the policy, the allowlist or the protected
// paths change.
func TestDecisionCacheIsBounded(t *testing.T) {
	t.Parallel()
	pol := defaultPol(t)
	allow := judged{Decision: policy.Decision{Verdict: events.Allow, Reason: "r"}}
	var d decisions
	small := []byte("read_file\x00small")
	d.put(pol, 1, nil, small, allow)
	if got, ok := d.get(pol, 1, nil, small); !ok || !reflect.DeepEqual(got.Decision, allow.Decision) {
		t.Fatal("a small key was not kept")
	}
	if _, ok := d.get(pol, 2, nil, small); ok {
		t.Error("kept across an allowlist change")
	}
	other, err := policy.Compile(context.Background(), policy.Files{"p.rego": "package toolbus\ndecision := {\"verdict\": \"DENY\", \"reason\": \"x\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.get(other, 1, nil, small); ok {
		t.Error("kept across a policy change")
	}
	if _, ok := d.get(pol, 1, &protect.Set{}, small); ok {
		t.Error("kept across new protected paths")
	}
	large := bytes.Repeat([]byte("x"), maxCachedKey+1)
	d.put(pol, 1, nil, large, allow)
	if _, ok := d.get(pol, 1, nil, large); ok {
		t.Error("a large key was kept")
	}
	// Filling the byte budget starts the cache over.
	d = decisions{}
	key := bytes.Repeat([]byte("k"), maxCachedKey)
	for i := range maxCachedBytes/maxCachedKey + 1 {
		key[0], key[1], key[2] = byte(i), byte(i>>8), byte(i>>16)
		d.put(pol, 1, nil, key, allow)
		if d.bytes > maxCachedBytes {
			t.Fatalf("%d bytes of keys kept", d.bytes)
		}
	}
	if len(d.m) != 1 {
		t.Errorf("after the budget was passed the cache holds %d entries, want 1", len(d.m))
	}
}

// TestDecisionCacheTellsClientsApart: the policy sees the program a
// caller speaks through (input.caller.client), so a decision cached for
// one client must not answer the same call from another.
func TestDecisionCacheTellsClientsApart(t *testing.T) {
	t.Parallel()
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus

decision := {"verdict": "DENY", "reason": "not through this client"} if input.caller.client == "locked/1"
else := {"verdict": "ALLOW", "reason": "ok"}
`})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Policy = pol })
	call := func(client string) *events.Result {
		t.Helper()
		inv := &events.Invocation{Header: events.Header{Sender: events.Identity{ID: "agent:a", Role: "agent", Session: "s1", Client: client}},
			Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
		res, err := e.client.InvokeAs(context.Background(), inv, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call("open/1"); res.Error != nil {
		t.Fatalf("the allowed client: %s", res.Error.Message)
	}
	if res := call("locked/1"); errType(res) != events.ErrPolicyDenied {
		t.Errorf("the same call through the locked client: got %q %q, want %s", errType(res), res.LLMContent, events.ErrPolicyDenied)
	}
}
