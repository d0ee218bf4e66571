package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// compile is the default policy set with extra files.
func compile(t *testing.T, extra policy.Files) *policy.Policy {
	t.Helper()
	files := maps.Clone(policy.Files(defaultpolicy.Default()))
	maps.Copy(files, extra)
	p, err := policy.Compile(context.Background(), files)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stricter denies writing notes, which the default policy asks about.
var stricter = policy.Files{"frozen.rego": `package toolbus

deny contains "the notes are frozen: no notes file is written" if {
	input.tool.name == "write_file"
	contains(input.args.file_path, "notes")
}
`}

// allowAll allows every call: a replay under it reaches every line.
var allowAll = policy.Files{"p.rego": `package toolbus

decision := {"verdict": "ALLOW", "reason": "everything is allowed", "remember": false}
`}

// TestWhatIfReportsWhatAnotherPolicyChanges: after a scripted session,
// whatif under a stricter policy reports exactly the call it would deny,
// with its recorded and new reasons; under the same policy nothing
// changes; under a policy that allows everything, the denied and
// cancelled calls would be allowed, and judging them again runs none of
// them.
func TestWhatIfReportsWhatAnotherPolicyChanges(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	approver(t, f)
	ids := session(t, f)
	// A call the approver cancels that would leave a mark if it ran.
	marker := filepath.Join(t.TempDir(), "ran")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inv := &events.Invocation{Tool: "run_shell_command", Args: json.RawMessage(`{"command":"touch ` + marker + `"}`)}
	if res, err := f.Client.Invoke(ctx, inv, nil); err != nil || res.Error == nil || res.Error.Type != events.ErrUserCancelled {
		t.Fatalf("touch: %+v %v", res, err)
	}
	ids["touch"] = inv.ID
	audittest.ResultsOf(t, f.Bus.JetStream(), []string{inv.ID})
	name := func(id string) string {
		for n, i := range ids {
			if i == id {
				return n
			}
		}
		return id
	}
	js := bustest.Connect(t, f.Bus).JetStream()

	w, err := audit.RunWhatIf(ctx, js, audit.Query{}, compile(t, stricter))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Changes) != 1 || name(w.Changes[0].Record.ID) != "edit" || w.Changes[0].From != events.AskUser || w.Changes[0].To != events.Deny ||
		!strings.Contains(w.Changes[0].Reason, "frozen") || w.Changes[0].Record.Reason == "" {
		t.Errorf("stricter: changes %+v", w.Changes)
	}
	// read, denied, cancelled, touch replayed alike; unknown never judged.
	if w.Invocations != 6 || w.Replayed != 5 || w.NotJudged != 1 || w.Unchanged != 4 || len(w.Failed) != 0 {
		t.Errorf("stricter: %+v", w)
	}

	same, err := audit.RunWhatIf(ctx, js, audit.Query{}, f.Executor.Policy())
	if err != nil {
		t.Fatal(err)
	}
	if len(same.Changes) != 0 || same.SameVerdict != 0 || same.Unchanged != 5 {
		t.Errorf("the same policy: %+v", same)
	}

	all, err := policy.Compile(ctx, allowAll)
	if err != nil {
		t.Fatal(err)
	}
	loose, err := audit.RunWhatIf(ctx, js, audit.Query{Tool: "run_shell_command"}, all)
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, c := range loose.Changes {
		changed = append(changed, string(c.From)+">"+string(c.To)+":"+name(c.Record.ID))
	}
	slices.Sort(changed)
	if strings.Join(changed, " ") != "ASK_USER>ALLOW:cancelled ASK_USER>ALLOW:touch DENY>ALLOW:denied" {
		t.Errorf("allow all: %v", changed)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("judging the recorded touch again ran it: %v", err)
	}
}

// TestWhatIfTakesTheExecutorsDecision: the stream takes what anyone on
// the bus publishes. A decision about a call published by someone other
// than the executor that ran it is not the one a replay starts from; a
// damaged record of the executor's own is reported as such, never
// counted as a verdict.
func TestWhatIfTakesTheExecutorsDecision(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
	if _, err := f.Client.Invoke(ctx, read, nil); err != nil {
		t.Fatal(err)
	}
	damaged := &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
	if _, err := f.Client.Invoke(ctx, damaged, nil); err != nil {
		t.Fatal(err)
	}
	audittest.ResultsOf(t, f.Bus.JetStream(), []string{read.ID, damaged.ID})
	nc := bustest.Connect(t, f.Bus).Conn()
	publish := func(d *events.Decision) {
		data, err := events.Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		nc.Publish(events.SubjectDecision, data)
	}
	// Mallory says the read was a write, judged on an input of her own.
	publish(&events.Decision{Header: events.Header{Sender: events.Identity{ID: "agent:mallory"}}, InvocationID: read.ID, Tool: "write_file",
		Verdict: events.Allow, PolicyRevision: "x", Input: json.RawMessage(`{"tool":{"name":"write_file","kind":"edit"}}`)})
	// A damaged record in the executor's name.
	publish(&events.Decision{Header: events.Header{Sender: events.Identity{ID: "executor@test", Role: "executor"}}, InvocationID: damaged.ID,
		Verdict: events.Allow, PolicyRevision: "x", Input: json.RawMessage(`[1]`)})
	nc.Flush()
	js := bustest.Connect(t, f.Bus).JetStream()
	var w *audit.WhatIf
	testkit.Poll(10*time.Second, func() bool {
		var err error
		if w, err = audit.RunWhatIf(ctx, js, audit.Query{}, compile(t, stricter)); err != nil {
			t.Fatal(err)
		}
		return len(w.Failed) > 0
	})
	if len(w.Changes) != 0 || w.Unchanged != 1 || w.Replayed != 1 {
		t.Errorf("the forged decision was replayed: %+v", w)
	}
	if len(w.Failed) != 1 || w.Failed[0].ID != damaged.ID || !strings.Contains(w.Failed[0].Reason, "not an object") {
		t.Errorf("the damaged record: %+v", w.Failed)
	}
}

// TestExplainNamesTheRulesOfARecordedCall: policy explain reads a call's
// recorded decision and names the rules behind it, under the policy that
// made it or another one.
func TestExplainNamesTheRulesOfARecordedCall(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	approver(t, f)
	ids := session(t, f)
	ctx := context.Background()
	js := bustest.Connect(t, f.Bus).JetStream()
	r, ex, err := audit.Explain(ctx, js, ids["denied"], time.Time{}, f.Executor.Policy())
	if err != nil {
		t.Fatal(err)
	}
	hit := func(file, text string) bool {
		return slices.ContainsFunc(ex.Rules, func(h policy.RuleHit) bool { return strings.HasSuffix(h.File, file) && strings.Contains(h.Rule, text) })
	}
	if r.Verdict != events.Deny || ex.Decision.Verdict != events.Deny || ex.Decision.Reason != r.Reason ||
		!hit("toolbus.rego", `decision := {"verdict": "DENY"`) || !hit("shell.rego", "deny contains") {
		t.Errorf("denied: recorded %s %q, explained %+v, rules %+v", r.Verdict, r.Reason, ex.Decision, ex.Rules)
	}
	_, ex, err = audit.Explain(ctx, js, ids["edit"], time.Time{}, compile(t, stricter))
	if err != nil || ex.Decision.Verdict != events.Deny || !hit("frozen.rego", "deny contains") {
		t.Errorf("edit under the stricter policy: %v %+v", err, ex)
	}
	if _, _, err := audit.Explain(ctx, js, ids["unknown"], time.Time{}, f.Executor.Policy()); !errors.Is(err, audit.ErrNotJudged) {
		t.Errorf("a call never judged: %v", err)
	}
}
