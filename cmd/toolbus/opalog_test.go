package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/open-policy-agent/opa/v1/plugins/logs"

	"github.com/toolbus/toolbus/internal/testkit"
)

// A policy team's OPA tooling reads toolbus's decisions: `audit export
// --follow --format opa-decision-log` writes the decisions a fleet made,
// one OPA decision-log event a line, which OPA's own type reads, with
// the revision that decided, the caller and the input; an allowed read
// and a denied one are both there, and nothing but decisions is.
func TestAuditExportOfDecisionsForOPA(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("# hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--console", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	call(t, url, "read_file", `{"file_path":"README.md"}`)
	if err := os.WriteFile(filepath.Join(ws, ".env"), []byte("TOKEN=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, code := toolbus(t, "call", "read_file", "--args", `{"file_path":".env"}`, "--nats", url); code == 0 {
		t.Fatalf("a read of .env ran: %s", out)
	}

	export := startDaemon(t, "toolbus", "audit", "export", "--follow", "--format", "opa-decision-log", "--since", "1h",
		"--checkpoint", filepath.Join(t.TempDir(), "decisions.seq"), "--nats", url)
	var (
		mu  sync.Mutex
		got []logs.EventV1
		bad []string
	)
	go func() {
		for l := range export.lines {
			var ev logs.EventV1
			mu.Lock()
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				bad = append(bad, l)
			} else {
				got = append(got, ev)
			}
			mu.Unlock()
		}
	}()
	verdicts := map[string]bool{}
	testkit.Eventually(t, "an ALLOW and a DENY are written", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range got {
			if r, ok := (*ev.Result).(map[string]any); ok {
				verdicts[r["verdict"].(string)] = true
			}
		}
		return verdicts["ALLOW"] && verdicts["DENY"]
	})
	if err := endBy(t, export, syscall.SIGTERM); err != nil {
		t.Fatalf("a stop by SIGTERM: %v; stderr:\n%s", err, export.output.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("lines OPA's type does not read: %q", bad)
	}
	for _, ev := range got {
		if ev.DecisionID == "" || ev.Path != "toolbus/decision" || ev.Bundles["toolbus"].Revision == "" || ev.RequestedBy == "" ||
			ev.Input == nil || ev.Timestamp.IsZero() || ev.Labels["id"] == "" {
			t.Errorf("a decision lacks what OPA's log has: %+v", ev)
		}
	}
}
