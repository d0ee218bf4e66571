package executor

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
)

// A candidate that denies read_file, in shadow: 100 live calls still run
// as the policy in force allows them; the candidate judges every one, and
// the report counts 100 changes, ALLOW to DENY, by the candidate's rule.
// A push of the policy in force ends the shadow.
func TestACandidateInShadowChangesNothingAndIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	js := e.bus.JetStream()
	cand, err := policy.PushShadow(ctx, js, denyReads, policy.PushOptions{By: "policy-team", Key: policytest.Team(t)})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the executor has the candidate", e.exec.shadow.active)
	for range 100 {
		if res := e.call(t, "read_file", `{"file_path":"README.md"}`); res.Error != nil {
			t.Fatalf("a call under the shadow: %s %s", errType(res), res.LLMContent)
		}
	}
	testkit.Eventually(t, "the candidate judged the 100 calls", func() bool {
		judged, disagreed, dropped := e.exec.ShadowCounts()
		return judged+dropped == 100 && disagreed == judged
	})
	if _, _, dropped := e.exec.ShadowCounts(); dropped != 0 {
		t.Errorf("%d evaluations dropped with an idle executor", dropped)
	}
	var w *audit.WhatIf
	var counts *audit.ShadowCounts
	testkit.Eventually(t, "the report counts them", func() bool {
		w, counts, err = audit.ShadowReport(ctx, js, audit.Query{}, "")
		return err == nil && len(w.Changes) == 100 && counts.Judged == 100
	})
	if w.Revision != cand.Revision || counts.Executors != 1 {
		t.Errorf("the report is of %s on %d executors; want %s on 1", w.Revision, counts.Executors, cand.Revision)
	}
	for _, c := range w.Changes {
		if c.From != events.Allow || c.To != events.Deny || !strings.Contains(c.Reason, "reads are off today") || c.Record.Tool != "read_file" {
			t.Fatalf("a change: %s → %s %q on %s", c.From, c.To, c.Reason, c.Record.Tool)
		}
	}

	policytest.Push(t, js, policy.Files(defaultPolicyFiles()), "policy-team")
	testkit.Eventually(t, "a push ends the shadow", func() bool { return !e.exec.shadow.active() })
}

// A full queue drops the candidate's evaluations and counts them, and no
// call waits for it: here nothing judges the queue at all, and every call
// still ends at once.
func TestAFullShadowQueueDropsAndCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stuck := &shadowing{e: e.exec, queue: make(chan shadowCall, 1), stop: make(chan struct{})} // no goroutine judges it
	e.exec.shadow.close()
	e.exec.shadow = stuck
	stuck.set(policytest.Default(t))
	for range 20 {
		if res := e.call(t, "read_file", `{"file_path":"README.md"}`); res.Error != nil {
			t.Fatalf("a call with the queue full: %s %s", errType(res), res.LLMContent)
		}
	}
	judged, _, dropped := e.exec.ShadowCounts()
	if judged != 0 || dropped != 19 || len(stuck.queue) != 1 {
		t.Errorf("judged %d, dropped %d, queued %d; want 0, 19 and 1", judged, dropped, len(stuck.queue))
	}
}
