package executor

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestARevokedApprovalStopsCovering: the allowlist bucket is the fleet's
// one record of remembered approvals. An entry removed from it (revoked,
// by an admin or another executor) stops covering calls here, and one
// another executor writes starts to, without a restart.
func TestARevokedApprovalStopsCovering(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waitTool(t, e.exec, "write_file")
	ctx := context.Background()
	kept := events.AllowRecord{AllowEntry: policy.AllowEntry{Scope: "path", Tool: "write_file", Path: e.ws.Root() + "/notes.md"}}
	if err := e.exec.allowlist.add(ctx, []events.AllowRecord{kept}); err != nil {
		t.Fatal(err)
	}
	if res := e.call(t, "write_file", `{"file_path":"notes.md","content":"x"}`); res.Error != nil {
		t.Fatalf("a remembered path: %s %q", errType(res), res.LLMContent)
	}
	if err := e.exec.allowlist.kv.Delete(ctx, kept.Key()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the revoked entry is dropped", func() bool {
		return len(e.exec.allowlist.entriesFor("write_file", events.SourceBuiltin, "")) == 0
	})
	// No approver is connected: asked, the call is denied.
	if res := e.call(t, "write_file", `{"file_path":"notes.md","content":"y"}`); res.Error == nil {
		t.Errorf("a revoked approval still covers the call: %q", res.LLMContent)
	}

	other := events.AllowRecord{AllowEntry: policy.AllowEntry{Scope: "path", Tool: "write_file", Path: e.ws.Root() + "/other.md"}}
	data, _ := json.Marshal(other)
	if _, err := e.exec.allowlist.kv.Put(ctx, other.Key(), data); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "an entry written elsewhere is followed", func() bool {
		return len(e.exec.allowlist.entriesFor("write_file", events.SourceBuiltin, "")) == 1
	})
}

// TestAllowlistEntriesForAToolAreItsOwn: a call is judged with the
// entries of its tool and, for an MCP tool, those of its server only,
// never another server's or another tool's, in an order that does not
// depend on the map the records are kept in (the input is recorded and
// its decision cached). A record kept before argv existed is read as
// the words of its prefix, and one that does not decode covers nothing.
func TestAllowlistEntriesForAToolAreItsOwn(t *testing.T) {
	t.Parallel()
	a := &allowlist{log: bustest.Quiet(), records: map[string]events.AllowRecord{}}
	put := func(key string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		a.apply(putEntry{key: key, value: data})
	}
	entries := map[string]policy.AllowEntry{
		"github":       {Scope: "server", Server: "github"},
		"evil":         {Scope: "server", Server: "evil"},
		"issue":        {Scope: "tool", Tool: "create_issue"},
		"issueHere":    {Scope: "tool", Tool: "create_issue", Path: "/ws"},
		"b.md":         {Scope: "path", Tool: "write_file", Path: "/ws/b.md"},
		"a.md":         {Scope: "path", Tool: "write_file", Path: "/ws/a.md"},
		"ls":           {Scope: "command", Tool: "run_shell_command", Argv: []string{"ls"}},
		"lsExact":      {Scope: "command", Tool: "run_shell_command", Argv: []string{"ls"}, Exact: true},
		"gitStatus":    {Scope: "command", Tool: "run_shell_command", Argv: []string{"git", "status"}, Exact: true},
		"readFileTool": {Scope: "tool", Tool: "read_file"},
	}
	for k, e := range entries {
		put(k, events.AllowRecord{AllowEntry: e})
	}
	// From before argv: the words of the prefix, not exact.
	put("legacy", map[string]string{"scope": "command", "tool": "run_shell_command", "prefix": "git  log"})
	// An attacker's record that does not decode replaces a valid one and
	// covers nothing.
	put("evilTool", events.AllowRecord{AllowEntry: policy.AllowEntry{Scope: "tool", Tool: "delete_repo"}})
	a.apply(putEntry{key: "evilTool", value: []byte(`{"scope":"tool","tool":"delete_repo"`)})

	e := func(k string) policy.AllowEntry { return entries[k] }
	for _, tt := range []struct {
		name   string
		source events.Source
		server string
		want   []policy.AllowEntry
	}{
		{"create_issue", events.SourceMCP, "github", []policy.AllowEntry{e("github"), e("issue"), e("issueHere")}},
		{"create_issue", events.SourceMCP, "evil", []policy.AllowEntry{e("evil"), e("issue"), e("issueHere")}},
		{"list_repos", events.SourceMCP, "github", []policy.AllowEntry{e("github")}},
		{"list_repos", events.SourceMCP, "gitlab", nil},
		// A built-in tool has no server: no server's entry covers it.
		{"write_file", events.SourceBuiltin, "", []policy.AllowEntry{e("a.md"), e("b.md")}},
		{"create_issue", events.SourceDiscovered, "github", []policy.AllowEntry{e("issue"), e("issueHere")}},
		{"run_shell_command", events.SourceBuiltin, "", []policy.AllowEntry{
			{Scope: "command", Tool: "run_shell_command", Argv: []string{"git", "log"}, Prefix: "git  log"},
			e("gitStatus"), e("ls"), e("lsExact")}},
		{"delete_repo", events.SourceBuiltin, "", nil},
	} {
		// The map is read in a different order each time: the same
		// entries must come out the same way each time.
		for range 5 {
			if got := a.entriesFor(tt.name, tt.source, tt.server); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("entriesFor(%s, %s, %q) =\n%+v\nwant\n%+v", tt.name, tt.source, tt.server, got, tt.want)
			}
		}
	}
}

// TestAllowlistEntriesCompareByEveryField: the order of entries is total
// over every field that makes an entry, so two different entries are
// never taken for the same.
func TestAllowlistEntriesCompareByEveryField(t *testing.T) {
	t.Parallel()
	base := policy.AllowEntry{Scope: "command", Tool: "t", Server: "s", Argv: []string{"a", "b"}, Path: "/p"}
	for _, tt := range []struct {
		name string
		more func(*policy.AllowEntry)
	}{
		{"scope", func(e *policy.AllowEntry) { e.Scope = "path" }},
		{"tool", func(e *policy.AllowEntry) { e.Tool = "u" }},
		{"server", func(e *policy.AllowEntry) { e.Server = "t" }},
		{"argv", func(e *policy.AllowEntry) { e.Argv = []string{"a", "c"} }},
		{"argv words", func(e *policy.AllowEntry) { e.Argv = []string{"a", "b", "c"} }},
		{"exact", func(e *policy.AllowEntry) { e.Exact = true }},
		{"path", func(e *policy.AllowEntry) { e.Path = "/q" }},
	} {
		more := base
		more.Argv = slices.Clone(base.Argv)
		tt.more(&more)
		if got := compareEntries(base, more); got != -1 {
			t.Errorf("%s: compareEntries(less, more) = %d, want -1", tt.name, got)
		}
		if got := compareEntries(more, base); got != 1 {
			t.Errorf("%s: compareEntries(more, less) = %d, want 1", tt.name, got)
		}
		if got := compareEntries(more, more); got != 0 {
			t.Errorf("%s: compareEntries(e, e) = %d, want 0", tt.name, got)
		}
	}
}
