package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAuditThroughUp: calls made through `toolbus up` are listed by
// `toolbus audit list` with their verdict and outcome, told whole by
// `audit show`, exported one a line, and no secret of their arguments
// appears in any of it.
func TestAuditThroughUp(t *testing.T) {
	// A toolbus up of its own, on free ports and its own data.
	t.Parallel()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# readme\n"), 0o644)
	data := t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "off",
		"--audit-checkpoint", "100ms")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	const token = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"

	if _, errOut, code := toolbus(t, "call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", url); code != 0 {
		t.Fatalf("read_file: %s", errOut)
	}
	if _, errOut, code := toolbus(t, "call", "run_shell_command", "--args", `{"command":"rm -rf / # GITHUB_TOKEN=`+token+`"}`, "--nats", url); code == 0 || !strings.Contains(errOut, "POLICY_DENIED") {
		t.Fatalf("the dangerous line: exit %d %s", code, errOut)
	}

	var recs []map[string]any
	testkit.Poll(30*time.Second, func() bool {
		out, errOut, code := toolbus(t, "audit", "list", "--json", "--since", "1h", "--nats", url)
		if code != 0 {
			t.Fatalf("audit list: exit %d %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatalf("audit list --json: %v: %s", err, out)
		}
		return len(recs) == 2 && recs[1]["outcome"] != "PENDING"
	})
	if len(recs) != 2 || recs[0]["tool"] != "read_file" || recs[0]["verdict"] != "ALLOW" || recs[0]["outcome"] != "OK" ||
		recs[1]["verdict"] != "DENY" || recs[1]["outcome"] != "POLICY_DENIED" {
		t.Fatalf("audit list: %v", recs)
	}
	table, _, _ := toolbus(t, "audit", "list", "--verdict", "DENY", "--nats", url)
	story, _, code := toolbus(t, "audit", "show", recs[1]["id"].(string), "--nats", url)
	if code != 0 || !strings.Contains(story, "tool.invocation") || !strings.Contains(story, "tool.result") {
		t.Errorf("audit show: exit %d\n%s", code, story)
	}
	export, _, code := toolbus(t, "audit", "export", "--nats", url)
	if code != 0 || strings.Count(export, "\n") != 2 {
		t.Errorf("audit export: exit %d\n%s", code, export)
	}
	for what, out := range map[string]string{"list": table, "show": story, "export": export} {
		if strings.Contains(out, token) {
			t.Errorf("audit %s shows the token:\n%s", what, out)
		}
	}
	if !strings.Contains(table, "run_shell_command") || strings.Contains(table, "read_file") {
		t.Errorf("audit list --verdict DENY:\n%s", table)
	}
	if _, errOut, code := toolbus(t, "audit", "list", "--since", "yesterday", "--nats", url); code != 2 || !strings.Contains(errOut, "--since") {
		t.Errorf("a bad --since: exit %d %s", code, errOut)
	}
	if _, errOut, code := toolbus(t, "audit", "show", "no-such-id", "--nats", url); code != 1 || !strings.Contains(errOut, "no invocation") {
		t.Errorf("show of nothing: exit %d %s", code, errOut)
	}

	// The bus's owner signs checkpoints; verify checks them with its
	// public key, and refuses to trust a key it cannot read.
	key := filepath.Join(data, "audit-signing.pub")
	var verified string
	testkit.Poll(30*time.Second, func() bool {
		out, errOut, code := toolbus(t, "audit", "verify", "--key", key, "--nats", url)
		if code != 0 {
			t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
		}
		verified = out
		return !strings.Contains(out, "checkpoints matching 0")
	})
	if !strings.Contains(verified, "ok: no sequence is missing") {
		t.Errorf("audit verify:\n%s", verified)
	}
	if out, errOut, code := toolbus(t, "audit", "verify", "--data", data, "--nats", url); code != 0 || !strings.Contains(out, "ok: no sequence is missing") {
		t.Errorf("audit verify --data: exit %d %s %s", code, out, errOut)
	}
	if _, errOut, code := toolbus(t, "audit", "verify", "--key", filepath.Join(data, "nothing.pub"), "--nats", url); code != 2 || !strings.Contains(errOut, "public key") {
		t.Errorf("verify without a key: exit %d %s", code, errOut)
	}

	// What another policy would have decided: a stricter one denies the
	// read, and only it; one that allows everything would have let the
	// dangerous line run, which whatif reports without its token and
	// without running anything.
	stricter := policyDir(t, `package toolbus

deny contains "reads of this workspace are frozen" if {
	input.tool.name == "read_file"
	some p in input.paths
	startswith(p, "`+ws+`")
}
`, true)
	out, errOut, code := toolbus(t, "audit", "whatif", "--policy", stricter, "--nats", url)
	if code != 0 || !strings.Contains(out, "1 would change") || !strings.Contains(out, "ALLOW → DENY: 1") || !strings.Contains(out, recs[0]["id"].(string)) ||
		!strings.Contains(out, "reads of this workspace are frozen") || strings.Contains(out, recs[1]["id"].(string)) {
		t.Errorf("whatif, stricter: exit %d %s\n%s", code, errOut, out)
	}
	if _, errOut, code := toolbus(t, "audit", "whatif", "--policy", stricter, "--fail-on-change", "--nats", url); code != 3 || !strings.Contains(errOut, "1 decisions would change") {
		t.Errorf("whatif --fail-on-change: exit %d %s", code, errOut)
	}
	loose := policyDir(t, `package toolbus

decision := {"verdict": "ALLOW", "reason": "anything goes", "remember": false}
`, false)
	out, errOut, code = toolbus(t, "audit", "whatif", "--policy", loose, "--json", "--nats", url)
	var w struct {
		Replayed int `json:"replayed"`
		Changes  []struct {
			From, To string
			Call     struct{ ID string }
		} `json:"changes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &w) != nil || w.Replayed != 2 || len(w.Changes) != 1 || w.Changes[0].Call.ID != recs[1]["id"] ||
		w.Changes[0].From != "DENY" || w.Changes[0].To != "ALLOW" || strings.Contains(out, token) {
		t.Errorf("whatif, loose: exit %d %s\n%s", code, errOut, out)
	}
	broken := policyDir(t, "package toolbus\n\ndecision := {\n", false)
	if _, errOut, code := toolbus(t, "audit", "whatif", "--policy", broken, "--nats", url); code != 1 || !strings.Contains(errOut, "refused") {
		t.Errorf("whatif with broken Rego: exit %d %s", code, errOut)
	}

	// Why the line was denied, from OPA's trace.
	for _, args := range [][]string{{"policy", "explain", recs[1]["id"].(string), "--trace"}, {"audit", "show", recs[1]["id"].(string), "--explain", "--trace"}} {
		out, errOut, code := toolbus(t, append(args, "--nats", url)...)
		if code != 0 || !strings.Contains(out, "decides: DENY") || !strings.Contains(out, "shell.rego:") || !strings.Contains(out, "deny contains") ||
			!strings.Contains(out, "OPA's trace") || strings.Contains(out, token) {
			t.Errorf("%v: exit %d %s\n%.3000s", args, code, errOut, out)
		}
	}
	out, _, code = toolbus(t, "policy", "explain", recs[1]["id"].(string), "--json", "--nats", url)
	var ex struct {
		Recorded, Decision map[string]string
		Rules              []struct{ File, Rule string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &ex) != nil || ex.Decision["verdict"] != "DENY" || ex.Recorded["verdict"] != "DENY" || len(ex.Rules) == 0 {
		t.Errorf("policy explain --json: exit %d\n%s", code, out)
	}
	out, _, code = toolbus(t, "policy", "explain", recs[0]["id"].(string), "--policy", stricter, "--nats", url)
	if code != 0 || !strings.Contains(out, "decides: DENY") || !strings.Contains(out, "frozen.rego:") || !strings.Contains(out, "another revision") {
		t.Errorf("explain under the stricter policy: exit %d\n%s", code, out)
	}
}

// TestAuditVerifyNamesALostStart: a bus whose audit stream keeps 64 KiB,
// flooded with events until its first checkpoint is pushed out. What
// remains verifies, but verify does not say ok: it names what is gone
// and exits 1; with --since, which chooses the start, it says ok. (The
// trail lets its oldest go only as they age; the test has it let them
// go when full, to push them out at once.)
func TestAuditVerifyNamesALostStart(t *testing.T) {
	t.Parallel()
	addr, data := testkit.UnusedAddr(t), t.TempDir()
	busd := startDaemon(t, "bus", "--listen", addr, "--data", data, "--audit-max-bytes", "65536", "--audit-checkpoint", "100ms")
	url := "nats://" + addr
	busd.waitLog(t, "bus listening")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A plain connection, which makes no stream: one made by a part that
	// connects while the bus starts would not have the bus's limit.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var stream jetstream.Stream
	testkit.Eventually(t, "the bus's audit stream", func() bool {
		stream, err = js.Stream(ctx, events.AuditStream)
		return err == nil
	})
	cfg := stream.CachedInfo().Config
	cfg.Discard = jetstream.DiscardOld
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	step, err := events.Encode(&events.Step{Header: events.Header{Sender: events.Identity{ID: "executor@test"}}, InvocationID: "flood", Tool: "read_file", Step: "validated"})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		for range n {
			if err := nc.Publish(events.SubjectStep, step); err != nil {
				t.Fatal(err)
			}
		}
		nc.Flush()
	}
	publish(10)
	var first uint64 // the sequence of the chain's first checkpoint
	testkit.Eventually(t, "a first checkpoint", func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, events.SubjectAuditCheckpoint)
		if err == nil {
			first = m.Sequence
		}
		return err == nil
	})
	testkit.Eventually(t, "the first checkpoint pushed out", func() bool {
		publish(20)
		info, err := stream.Info(ctx)
		return err == nil && info.State.FirstSeq > first
	})
	// Back to a trail that lets nothing go, with room for the
	// checkpoints to come: any part that connects (toolbus audit verify
	// too) would turn DiscardNew back on anyway.
	cfg.Discard, cfg.MaxBytes = jetstream.DiscardNew, 1<<20
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(data, "audit-signing.pub")
	// The bus checkpoints the flood's last events, then falls quiet.
	var out, errOut string
	var code int
	if !testkit.Poll(30*time.Second, func() bool {
		out, errOut, code = toolbus(t, "audit", "verify", "--key", key, "--nats", url)
		return strings.Contains(out, "after the last checkpoint 1\n")
	}) {
		t.Fatalf("the bus did not fall quiet after the flood: exit %d\n%s%s", code, out, errOut)
	}
	if code != 1 || !regexp.MustCompile(`lost: events #1\.\.#\d+ and (1 checkpoint|\d+ checkpoints) are no longer in the stream`).MatchString(out) ||
		!strings.Contains(out, "what remains verifies") || strings.Contains(out, "ok:") || !strings.Contains(errOut, "not whole") {
		t.Errorf("verify of a trail that lost its start: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = toolbus(t, "audit", "verify", "--since", "1h", "--key", key, "--nats", url)
	if code != 0 || !strings.Contains(out, "ok:") || strings.Contains(out, "lost:") {
		t.Errorf("verify --since: exit %d\n%s%s", code, out, errOut)
	}
}

// policyDir writes a policy set: src as frozen.rego, after the built-in
// policy's files when withDefault.
func policyDir(t *testing.T, src string, withDefault bool) string {
	t.Helper()
	dir := t.TempDir()
	if withDefault {
		files, _ := filepath.Glob("../../policy/*.rego")
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644)
		}
	}
	os.WriteFile(filepath.Join(dir, "frozen.rego"), []byte(src), 0o644)
	return dir
}
