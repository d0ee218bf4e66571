package executor

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestARevokedApprovalStopsCovering: the allowlist bucket is the fleet's
// one record of remembered approvals. An entry removed from it (revoked,
// by an admin or another executor) stops covering calls here, and one
// another executor writes starts to, without a restart.
func TestARevokedApprovalStopsCovering(t *testing.T) {
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
