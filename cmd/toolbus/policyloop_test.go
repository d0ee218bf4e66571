package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// The policy team's loop on a `toolbus up`: a revision pushed to a share
// of the fleet, signed by the developer's key, which up's executor
// trusts; its status and history with author, message and tests; the
// diff to the stable one; a rollout completed, then rolled back in one
// command; every push in the trail with a signature audit verify checks,
// and a forged one it flags.
func TestThePolicyTeamsLoop(t *testing.T) {
	t.Parallel()
	ws, data := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# readme\n"), 0o644)
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	ids := filepath.Join(data, "identities")
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := toolbus(t, append(args, "--nats", url)...)
		if code != 0 {
			t.Fatalf("toolbus %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	candidate := t.TempDir()
	regos, _ := filepath.Glob("../../policy/*.rego")
	for _, name := range regos {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(candidate, filepath.Base(name)), src, 0o644)
	}
	os.WriteFile(filepath.Join(candidate, "extra.rego"), []byte("package toolbus\n\n# a change of the team's\nteam_note := \"v2\"\n"), 0o644)

	// What up's executor does with each revision it is given.
	dev := connectHostile(t, "developer", url, filepath.Join(ids, "developer.nk"))
	reports, err := dev.nc.SubscribeSync(events.SubjectPolicyPrefix + "*")
	if err != nil {
		t.Fatal(err)
	}
	dev.nc.Flush()
	pushed := run("policy", "push", candidate, "--to", "30", "-m", "a note for the team")
	rev := regexp.MustCompile(`pushed (sha256:[0-9a-f]{16})`).FindStringSubmatch(pushed)
	if rev == nil || !strings.Contains(pushed, "rolled out to 30% of principals") {
		t.Fatalf("push --to 30: %s", pushed)
	}
	status := run("policy", "status")
	if !strings.Contains(status, "rolling out: "+rev[1]+" (30% of principals)") || !strings.Contains(status, "stable:      the executors' own policy (the rest)") {
		t.Errorf("status during the rollout:\n%s", status)
	}
	history := run("policy", "history")
	if !strings.Contains(history, rev[1]) || !strings.Contains(history, "a note for the team") || !strings.Contains(history, "30% of principals") || strings.Contains(history, "(unsigned)") {
		t.Errorf("history:\n%s", history)
	}
	// The executor trusts the developer's key (toolbus init wrote it
	// into the trust list up gives it): it applies the revision.
	waitReport(t, reports, "applied", rev[1])
	if diff := run("policy", "diff", rev[1]); !strings.Contains(diff, "-team_note := \"v2\"") {
		t.Errorf("diff to the built-in policy:\n%s", diff)
	}

	// In shadow: a candidate that denies every read. The calls still run,
	// and the report says what it would have changed, by which rule.
	denying := t.TempDir()
	for _, name := range regos {
		if strings.HasSuffix(name, "_test.rego") {
			continue // the default policy's tests read files
		}
		src, _ := os.ReadFile(name)
		os.WriteFile(filepath.Join(denying, filepath.Base(name)), src, 0o644)
	}
	os.WriteFile(filepath.Join(denying, "reads.rego"), []byte("package toolbus\n\ndeny contains \"reads are frozen for the audit\" if input.tool.name == \"read_file\"\n"), 0o644)
	shadowRev := regexp.MustCompile(`(sha256:[0-9a-f]{16}) in shadow`).FindStringSubmatch(run("policy", "shadow", "push", denying))
	if shadowRev == nil {
		t.Fatal("shadow push said no revision")
	}
	if status := run("policy", "status"); !strings.Contains(status, "in shadow:") {
		t.Errorf("status with a shadow:\n%s", status)
	}
	waitReport(t, reports, "shadowed", shadowRev[1])
	for range 5 {
		if out := run("call", "read_file", "--args", `{"file_path":"README.md"}`); out != "# readme\n" {
			t.Fatalf("a call under the shadow: %q", out)
		}
	}
	testkit.Eventually(t, "the shadow report counts the reads", func() bool {
		out := run("policy", "shadow", "report")
		return strings.Contains(out, "ALLOW → DENY: 5") && strings.Contains(out, `read_file, by the rule "reads are frozen for the audit": 5`)
	})
	if out := run("policy", "shadow", "stop"); !strings.Contains(out, "no longer in shadow") {
		t.Errorf("shadow stop: %s", out)
	}

	run("policy", "push", candidate, "--to", "100")
	if status := run("policy", "status"); !strings.Contains(status, "stable:      "+rev[1]+" (all calls)") {
		t.Errorf("status after --to 100:\n%s", status)
	}
	back := run("policy", "rollback")
	if !strings.Contains(back, "the executors' own policy") {
		t.Errorf("rollback: %s", back)
	}
	if status := run("policy", "status"); !strings.Contains(status, "stable:      the executors' own policy (all calls)") {
		t.Errorf("status after the rollback:\n%s", status)
	}
	if out := run("audit", "verify", "--data", data, "--policy-signers", filepath.Join(ids, "policy-signers")); !strings.Contains(out, "ok:") {
		t.Errorf("audit verify of the pushes: %s", out)
	}

	// A push recorded with a signature that is not of its revision: the
	// admin can write the trail's policy subject, and audit verify says so.
	forged := &events.PolicyEvent{Header: events.Header{Sender: events.Identity{ID: "developer"}}, Status: "pushed", Revision: rev[1], Source: "bucket",
		Digest: strings.TrimPrefix(rev[1], "sha256:") + strings.Repeat("0", 48), Signer: "UBOGUS", Signature: "AAAA"}
	data2, err := events.Encode(forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.nc.Request(events.SubjectPolicyPrefix+"pushed", data2, 10*time.Second); err != nil {
		t.Fatalf("the forged push was not recorded: %v", err)
	}
	out, _, code := toolbus(t, "audit", "verify", "--data", data, "--nats", url)
	if code == 0 || !strings.Contains(out, "problem:") || !strings.Contains(out, "policy "+rev[1]) {
		t.Errorf("audit verify of a forged push: exit %d\n%s", code, out)
	}
	up.stop(t)
}

// waitReport waits for the executor to report status of revision on the
// policy subjects, and fails on a rejection.
func waitReport(t *testing.T, reports *nats.Subscription, status, revision string) {
	t.Helper()
	for {
		m, err := reports.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the executor did not report %s %s: %v", revision, status, err)
		}
		ev, err := events.Decode[events.PolicyEvent](m.Data)
		if err == nil && ev.Status == "rejected" {
			t.Fatalf("the executor rejected %s: %s", ev.Revision, ev.Error)
		}
		if err == nil && ev.Status == status && ev.Revision == revision {
			return
		}
	}
}
