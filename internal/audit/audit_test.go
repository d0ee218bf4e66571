package audit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus/bustest"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor/executortest"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
)

// The secrets the session's arguments carry: no output of the audit may
// show them.
const (
	forgeToken = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
	dbPassword = "hunter2-very-secret"
)

// approver answers as the seat of "approver:ada": proceed_once to edits,
// cancel to shell lines.
func approver(t *testing.T, f *executortest.Fleet) {
	t.Helper()
	conn := bustest.Connect(t, f.Bus)
	a, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{
		Identity: events.Identity{ID: "approver:ada", Role: "approver"}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			s, changed := a.Snapshot()
			for _, r := range s.Pending {
				outcome := events.ProceedOnce
				if r.Tool == "run_shell_command" {
					outcome = events.Cancel
				}
				a.Answer(ctx, r.InvocationID, approve.Answer{Outcome: outcome})
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// session runs a scripted session and returns its invocation ids, by
// name.
func session(t *testing.T, f *executortest.Fleet) map[string]string {
	t.Helper()
	calls := []struct{ name, tool, args string }{
		{"read", "read_file", `{"file_path":"README.md"}`},
		{"edit", "write_file", `{"file_path":"notes.txt","content":"token: ` + forgeToken + `"}`},
		{"denied", "run_shell_command", `{"command":"rm -rf /"}`},
		{"cancelled", "run_shell_command", `{"command":"echo DB_PASSWORD=` + dbPassword + `"}`},
		{"unknown", "no_such_tool", `{"password":"` + dbPassword + `"}`},
	}
	ids := make(map[string]string)
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		inv := &events.Invocation{Tool: c.tool, Args: json.RawMessage(c.args)}
		if _, err := f.Client.Invoke(ctx, inv, nil); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cancel()
		ids[c.name] = inv.ID
	}
	var all []string
	for _, id := range ids {
		all = append(all, id)
	}
	audittest.ResultsOf(t, f.Bus.JetStream(), all)
	return ids
}

func TestListJoinsEachInvocationWithItsDecisionAndOutcome(t *testing.T) {
	f := executortest.Start(t)
	approver(t, f)
	before := time.Now()
	ids := session(t, f)
	ctx := context.Background()
	js := bustest.Connect(t, f.Bus).JetStream() // a reader of its own

	recs, st, err := audit.Read(ctx, js, audit.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Malformed != 0 {
		t.Errorf("%d malformed events", st.Malformed)
	}
	byID := make(map[string]*audit.Record)
	for _, r := range recs {
		byID[r.ID] = r
	}
	want := map[string]struct {
		verdict  events.Verdict
		outcome  string
		approver string
	}{
		"read":      {events.Allow, audit.OutcomeOK, ""},
		"edit":      {events.AskUser, audit.OutcomeOK, "approver:ada"},
		"denied":    {events.Deny, string(events.ErrPolicyDenied), ""},
		"cancelled": {events.AskUser, string(events.ErrUserCancelled), "approver:ada"},
		"unknown":   {"", string(events.ErrToolNotFound), ""},
	}
	for name, w := range want {
		r := byID[ids[name]]
		if r == nil {
			t.Errorf("%s: not listed", name)
			continue
		}
		got := ""
		if r.Approver != nil {
			got = r.Approver.ID
		}
		if r.Verdict != w.verdict || r.Outcome != w.outcome || got != w.approver || r.Caller.ID != f.Caller.ID {
			t.Errorf("%s: verdict %q outcome %q approver %q caller %q; want %q %q %q", name, r.Verdict, r.Outcome, got, r.Caller.ID, w.verdict, w.outcome, w.approver)
		}
		if w.verdict != "" && r.PolicyRevision == "" {
			t.Errorf("%s: no policy revision", name)
		}
	}

	// Filters.
	for _, tc := range []struct {
		q    audit.Query
		want []string
	}{
		{audit.Query{Verdict: "DENY"}, []string{"denied"}},
		{audit.Query{Tool: "run_shell_command"}, []string{"denied", "cancelled"}},
		{audit.Query{Approver: "approver:ada", Outcome: "OK"}, []string{"edit"}},
		{audit.Query{Caller: "agent:test", Outcome: string(events.ErrToolNotFound)}, []string{"unknown"}},
		{audit.Query{Since: before.Add(-time.Minute), Until: before}, nil},
		{audit.Query{Since: time.Now().Add(time.Hour)}, nil},
	} {
		recs, _, err := audit.Read(ctx, js, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			for name, id := range ids {
				if id == r.ID {
					got = append(got, name)
				}
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%+v: got %v, want %v", tc.q, got, tc.want)
		}
	}

	// One invocation's whole story, in order.
	story, err := audit.Show(ctx, js, ids["edit"], time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range story.Events {
		types = append(types, e.Type)
	}
	for _, typ := range []string{"tool.invocation", "tool.decision", "tool.confirm.request", "tool.confirm.answer", "tool.result"} {
		if !strings.Contains(strings.Join(types, " "), typ) {
			t.Errorf("the story lacks %s: %v", typ, types)
		}
	}
	if _, err := audit.Show(ctx, js, "no-such-id", time.Time{}); err == nil {
		t.Error("a story of nothing")
	}

	// Nothing of what is shown holds a secret.
	var shown strings.Builder
	for _, r := range recs {
		data, _ := json.Marshal(audit.Redact(r, redact.Default))
		shown.Write(data)
	}
	data, _ := json.Marshal(audit.Redact(story, redact.Default))
	shown.Write(data)
	for _, id := range []string{ids["edit"], ids["cancelled"], ids["unknown"]} {
		s, err := audit.Show(ctx, js, id, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(audit.Redact(s, redact.Default))
		shown.Write(data)
	}
	for _, secret := range []string{forgeToken, dbPassword} {
		if strings.Contains(shown.String(), secret) {
			t.Errorf("%s shown", secret)
		}
	}
	// ... while the stream keeps what was sent.
	raw, _ := json.Marshal(story)
	if !strings.Contains(string(raw), forgeToken) {
		t.Error("the record itself lost the arguments")
	}
}

// Tail shows each invocation once its result is in, with its verdict,
// and only those its query selects.
func TestTailFollowsNewInvocations(t *testing.T) {
	f := executortest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *audit.Record, 10)
	done := make(chan error, 1)
	go func() {
		done <- audit.Tail(ctx, bustest.Connect(t, f.Bus).JetStream(), audit.Query{Tool: "run_shell_command"}, func(r *audit.Record) { got <- r })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The consumer starts at the stream's end whenever it gets there:
	// calls made before are not followed, so the calls go on until one is.
	var r *audit.Record
	for attempt := 0; r == nil && attempt < 20; attempt++ {
		for _, c := range []struct{ tool, args string }{
			{"read_file", `{"file_path":"README.md"}`},
			{"run_shell_command", `{"command":"rm -rf /"}`},
		} {
			cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
			if _, err := f.Client.Invoke(cctx, &events.Invocation{Tool: c.tool, Args: json.RawMessage(c.args)}, nil); err != nil {
				t.Fatal(err)
			}
			ccancel()
		}
		select {
		case r = <-got:
		case <-time.After(3 * time.Second):
		}
	}
	if r == nil {
		t.Fatal("tail showed nothing")
	}
	if r.Tool != "run_shell_command" || r.Verdict != events.Deny || r.Outcome != string(events.ErrPolicyDenied) {
		t.Errorf("tail: %+v", r)
	}
	for wait := time.After(1500 * time.Millisecond); ; {
		select {
		case r := <-got:
			if r.Tool != "run_shell_command" {
				t.Errorf("tail showed %s too", r.Tool)
			}
			continue
		case <-wait:
		}
		break
	}
}
