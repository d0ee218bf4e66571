package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestEveryDecisionIsRecordedReplayably: every call the policy judges
// gets a tool.decision with the input it was judged on — the allowlist
// entries that applied and the files it names, links resolved, included —
// and replaying that record under the executor's policy gives the very
// decision, whether it allowed, denied or asked, was reused from the
// cache, was made on an approver's modified arguments or rests on a
// remembered approval.
func TestEveryDecisionIsRecordedReplayably(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := bustest.Connect(t, e.bus).Conn()
	decisions := make(chan *events.Decision, 100)
	// A decision is published on its own, or folded into the record of
	// the call's result.
	sub, err := nc.Subscribe("tool.>", func(m *nats.Msg) {
		switch m.Subject {
		case events.SubjectDecision:
			d, err := events.Decode[events.Decision](m.Data)
			if err != nil {
				t.Errorf("decision event: %v", err)
				return
			}
			decisions <- d
		case events.SubjectResult:
			r, err := events.Decode[events.Result](m.Data)
			if err != nil {
				t.Errorf("result event: %v", err)
				return
			}
			if r.Decision != nil {
				decisions <- r.Decision
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	// A link to another file of the workspace: the policy is shown where
	// it leads.
	os.Mkdir(filepath.Join(e.ws.Root(), "sub"), 0o755)
	target := filepath.Join(e.ws.Root(), "sub", "target.txt")
	os.WriteFile(target, []byte("s"), 0o644)
	os.Symlink(target, filepath.Join(e.ws.Root(), "link.txt"))

	ctx := context.Background()
	pol := e.exec.Policy()
	replay := func(args json.RawMessage) *events.Decision {
		t.Helper()
		var d *events.Decision
		select {
		case d = <-decisions:
		case <-time.After(10 * time.Second):
			t.Fatal("no decision event")
		}
		if len(d.Input) == 0 {
			t.Fatalf("decision %s %s records no input", d.Tool, d.Verdict)
		}
		if d.Args != nil {
			args = d.Args
		}
		decoded, err := policy.DecodeArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		rec := policy.Recorded{Input: d.Input, ShellLine: d.ShellLine, BashChecked: d.BashChecked, Lossy: d.InputLossy, Session: d.Session}
		got, err := pol.Replay(ctx, rec, decoded)
		if err != nil || got.Verdict != d.Verdict || got.Reason != d.Reason || got.Revision != d.PolicyRevision {
			t.Errorf("%s %s: replay gives %+v (%v), recorded %s %q", d.Tool, args, got, err, d.Verdict, d.Reason)
		}
		return d
	}

	// A caller without a session is counted in its own bucket: the
	// record holds its counts, this call's, beside the input. A decision
	// is reused when the loop guards conclude the same from the counts.
	plain := sessionless(t, e)
	read := `{"file_path":"README.md"}`
	counted := func(d *events.Decision, calls, repeats int64) bool {
		return d.Session != nil && *d.Session == events.SessionCounts{Calls: calls, Repeats: repeats} && !strings.Contains(string(d.Input), `"session":{`)
	}
	callWith(t, plain, "read_file", read)
	if d := replay(json.RawMessage(read)); d.Verdict != events.Allow || d.Cached || !counted(d, 1, 1) {
		t.Errorf("first read: %s cached=%v, session %+v, input %s", d.Verdict, d.Cached, d.Session, d.Input)
	}
	callWith(t, plain, "read_file", read)
	if d := replay(json.RawMessage(read)); !d.Cached || !counted(d, 2, 2) {
		t.Errorf("the second identical read: cached=%v, session %+v, input %s", d.Cached, d.Session, d.Input)
	}
	// A caller with a session: the record holds the session's counts,
	// and the caller's repeats of the call, in any session or none.
	e.call(t, "read_file", read)
	if d := replay(json.RawMessage(read)); d.Cached || !counted(d, 1, 3) {
		t.Errorf("a session's read: cached=%v, session %+v, input %s", d.Cached, d.Session, d.Input)
	}
	e.call(t, "read_file", read)
	if d := replay(json.RawMessage(read)); !d.Cached || !counted(d, 2, 4) {
		t.Errorf("a session's second read: cached=%v, session %+v, input %s", d.Cached, d.Session, d.Input)
	}
	link := `{"file_path":"link.txt"}`
	e.call(t, "read_file", link)
	if d := replay(json.RawMessage(link)); !strings.Contains(string(d.Input), target) {
		t.Errorf("the record does not show where the link leads: %s", d.Input)
	}
	rm := `{"command":"ls && rm -rf /"}`
	e.call(t, "run_shell_command", rm)
	if d := replay(json.RawMessage(rm)); d.Verdict != events.Deny || d.ShellLine != "ls && rm -rf /" {
		t.Errorf("rm: %s line %q", d.Verdict, d.ShellLine)
	}

	// An approver modifies the line; the second decision is on its
	// arguments, which the record carries.
	a := startApprover(t, e.bus, func(r *events.ConfirmRequest) *events.ConfirmAnswer {
		if r.Command == "echo original" {
			return &events.ConfirmAnswer{Outcome: events.ModifyWithEditor, Args: json.RawMessage(`{"command":"echo edited"}`)}
		}
		return &events.ConfirmAnswer{Outcome: events.ProceedAlways}
	})
	orig := `{"command":"echo original"}`
	e.call(t, "run_shell_command", orig)
	if d := replay(json.RawMessage(orig)); d.Verdict != events.AskUser || d.Args != nil {
		t.Errorf("before the edit: %s args %s", d.Verdict, d.Args)
	}
	if d := replay(json.RawMessage(orig)); string(d.Args) != `{"command":"echo edited"}` {
		t.Errorf("after the edit the record has args %s", d.Args)
	}
	a.stop()
	// "echo edited" was answered always: the next echo is allowed by the
	// allowlist, which the record holds.
	echo := `{"command":"echo again"}`
	if res := e.call(t, "run_shell_command", echo); res.Error != nil {
		t.Fatalf("remembered echo: %s", res.LLMContent)
	}
	if d := replay(json.RawMessage(echo)); d.Verdict != events.Allow || !strings.Contains(string(d.Input), `"scope":"command"`) || !d.BashChecked {
		t.Errorf("allowlisted echo: %s bashChecked=%v input %s", d.Verdict, d.BashChecked, d.Input)
	}
}
