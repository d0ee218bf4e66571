package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// TestACachedAllowDoesNotCoverAHardLinkSwappedIn: read_file of a plain
// file is allowed and its decision cached; the file is then replaced by a
// hard link to a key outside the workspace, under the same name, and the
// same call comes again. The file has other names now, which the policy
// asks about: the cached ALLOW must not answer for it.
func TestACachedAllowDoesNotCoverAHardLinkSwappedIn(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Policy = unguardedPolicy(t) })
	waitTool(t, e.exec, "read_file")
	k := filepath.Join(e.ws.Root(), "k.txt")
	if err := os.WriteFile(k, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := sessionless(t, e)
	for i := range 2 { // the second is answered from the cache
		if res := callWith(t, plain, "read_file", `{"file_path":"k.txt"}`); res.Error != nil || !strings.Contains(res.LLMContent, "plain") || res.Policy.Cached != (i == 1) {
			t.Fatalf("read_file of a plain file: %s %q cached=%v", errType(res), res.LLMContent, res.Policy.Cached)
		}
	}
	if err := os.Remove(k); err != nil {
		t.Fatal(err)
	}
	linkedKey(t, e.ws.Root())
	res := callWith(t, plain, "read_file", `{"file_path":"k.txt"}`)
	if strings.Contains(res.LLMContent, "PRIVATE") || errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "has other names") {
		t.Errorf("read_file of the hard link after the plain file was allowed: %s %q, want %s: has other names", errType(res), res.LLMContent, events.ErrPolicyDenied)
	}
}

// TestDecisionCacheTellsEveryCallerFieldApart: the policy sees each field
// of the caller, so a decision cached for one value of a field must not
// answer the same call with another value of it, the rest unchanged.
func TestDecisionCacheTellsEveryCallerFieldApart(t *testing.T) {
	t.Parallel()
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus

decision := {"verdict": "DENY", "reason": "locked out"} if {
	some field in ["id", "role", "agent", "session", "user", "host", "client"]
	input.caller[field] == "locked"
} else := {"verdict": "ALLOW", "reason": "ok"}
`})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Policy = pol })
	call := func(field, value string) *events.Result {
		t.Helper()
		fields := map[string]string{"id": "agent:a", "role": "agent", "agent": "gemini-cli", "session": "s1", "user": "ada", "host": "dev-1", "client": "c/1"}
		fields[field] = value
		data, _ := json.Marshal(fields)
		var who events.Identity
		if err := json.Unmarshal(data, &who); err != nil {
			t.Fatal(err)
		}
		inv := &events.Invocation{Header: events.Header{Sender: who}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
		res, err := e.client.InvokeAs(context.Background(), inv, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, field := range []string{"id", "role", "agent", "session", "user", "host", "client"} {
		value := "open-" + field
		for range 2 {
			if res := call(field, value); res.Error != nil {
				t.Fatalf("%s %s: %s %q", field, value, errType(res), res.LLMContent)
			}
		}
		if res := call(field, "locked"); errType(res) != events.ErrPolicyDenied {
			t.Errorf("the same call with %s locked: %s %q, want %s", field, errType(res), res.LLMContent, events.ErrPolicyDenied)
		}
	}
}
