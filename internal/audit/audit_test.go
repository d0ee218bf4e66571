package audit_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/approvetest"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/internal/tool"
)

// The secrets the session's arguments carry: no output of the audit may
// show them.
const (
	forgeToken = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
	dbPassword = "hunter2-very-secret"
)

// approver answers as the seat of "approver:ada": proceed_once to edits
// and to shell lines that sleep, cancel to other shell lines.
func approver(t *testing.T, f *executortest.Fleet) {
	t.Helper()
	approvetest.Seat(t, f.Bus, "approver:ada", func(r approve.Request) events.Outcome {
		if r.Tool == "run_shell_command" && !strings.HasPrefix(r.Command, "sleep") {
			return events.Cancel
		}
		return events.ProceedOnce
	})
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
	t.Parallel()
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
	t.Parallel()
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

// TestAPlainConsumerFindsOneTerminalResultPerInvocation: after a session
// of calls allowed, denied, approved, refused, timed out, cancelled by
// their caller and lost with their executor, a consumer written with
// plain nats.go (no toolbus code) finds exactly one terminal result for
// every invocation, and audit.Read gives each its verdict and outcome.
func TestAPlainConsumerFindsOneTerminalResultPerInvocation(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	approver(t, f)
	ids := session(t, f)
	call := func(name string, inv *events.Invocation, ctx context.Context) {
		t.Helper()
		f.Client.Invoke(ctx, inv, nil) // the outcome is read back from the stream
		ids[name] = inv.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call("timed out", &events.Invocation{Tool: "run_shell_command", Args: json.RawMessage(`{"command":"sleep 5"}`), TimeoutMillis: 500}, ctx)

	// Cancelled by its caller once it runs.
	started := make(chan struct{})
	cctx, ccancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(f.Workspace.Root(), "started")); err == nil {
				close(started)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() { <-started; ccancel() }()
	call("cancelled", &events.Invocation{Tool: "run_shell_command", Args: json.RawMessage(`{"command":"sleep 0.1; touch started; sleep 30"}`)}, cctx)
	ccancel()

	// Lost with the executor that ran it.
	blocked := make(chan string, 1)
	hang := tool.Func(events.ToolSpec{Name: "hang", Kind: events.KindRead, Description: "blocks"}, func(ctx context.Context, c *tool.Call) (*tool.Output, error) {
		blocked <- c.ID
		<-ctx.Done()
		return nil, ctx.Err()
	})
	conn := bustest.Connect(t, f.Bus)
	doomed, err := executor.Start(context.Background(), conn.Conn(), conn.JetStream(), executor.Config{Identity: events.Identity{ID: "executor@doomed", Role: "executor"},
		Tools: []tool.Tool{hang}, Policy: f.Executor.Policy(), Workspace: t.TempDir(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		defer scancel()
		doomed.Stop(sctx)
	}()
	// Either executor may take the call: both must know the tool.
	for _, ex := range []*executor.Executor{f.Executor, doomed} {
		testkit.Eventually(t, "hang reached the catalogue", func() bool {
			_, ok := ex.Catalog().GetTool("hang")
			return ok
		})
	}
	go func() {
		// A call still running a moment after its decision has the
		// decision published on its own: once the trail has it, the
		// executor is lost.
		var id string
		select {
		case id = <-blocked:
		case <-ctx.Done():
			return
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			// audit.Read, which says what failed rather than ending the
			// test from this goroutine.
			if recs, _, err := audit.Read(ctx, f.Bus.JetStream(), audit.Query{ID: id}); err == nil && len(recs) == 1 && recs[0].Verdict != "" {
				break
			}
		}
		conn.Conn().Close()
	}()
	// Its caller does not retry it: a loaded machine may take longer than
	// a heartbeat to see the verdict in the trail, and the heartbeat says
	// the read may be retried.
	once := invoke.NewClient(bustest.Connect(t, f.Bus).Conn(), f.Caller, "", invoke.WithoutRetries())
	defer once.Close()
	inv := &events.Invocation{Tool: "hang", Args: json.RawMessage(`{}`)}
	once.Invoke(ctx, inv, nil)
	ids["lost"] = inv.ID

	var all []string
	for _, id := range ids {
		all = append(all, id)
	}
	audittest.ResultsOf(t, f.Bus.JetStream(), all)

	// The plain consumer.
	nc, err := nats.Connect(f.Bus.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "TOOLBUS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	// Results come from executors on tool.result, and from a caller
	// whose executor was lost on tool.result.<its principal>.
	last, err := stream.GetLastMsgForSubject(ctx, "tool.result.>")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := stream.GetLastMsgForSubject(ctx, "tool.result"); err != nil {
		t.Fatal(err)
	} else if l.Sequence > last.Sequence {
		last = l
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tool.result", "tool.result.*"}})
	if err != nil {
		t.Fatal(err)
	}
	terminal := make(map[string]int)
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			InvocationID string `json:"invocationId"`
			Late         bool   `json:"late"`
		}
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			t.Fatalf("a result that is not JSON: %v", err)
		}
		if !r.Late {
			terminal[r.InvocationID]++
		}
		if meta, err := m.Metadata(); err != nil || meta.Sequence.Stream >= last.Sequence {
			break
		}
	}
	for name, id := range ids {
		if terminal[id] != 1 {
			t.Errorf("%s: %d terminal results", name, terminal[id])
		}
	}

	recs, _, err := audit.Read(ctx, js, audit.Query{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]string)
	for _, r := range recs {
		got[r.ID] = string(r.Verdict) + " " + r.Outcome
		if r.ID == ids["lost"] && (r.CallerRecord == nil || r.CallerRecord.Outcome != string(events.ErrExecutorLost)) {
			t.Errorf("lost: the caller's own record is %+v, want its EXECUTOR_LOST", r.CallerRecord)
		}
	}
	for name, want := range map[string]string{
		"timed out": "ASK_USER TIMEOUT",
		"cancelled": "ASK_USER CANCELLED",
		// A call lost with its executor keeps its verdict: a decision
		// not in a result's record a moment after it was made is
		// published on its own.
		// No executor ended it: its caller's give-up stands beside
		// it, as the caller's own record.
		"lost":   "ALLOW NO_EXECUTOR_RESULT",
		"denied": "DENY POLICY_DENIED",
	} {
		if got[ids[name]] != want {
			t.Errorf("%s: %q, want %q", name, got[ids[name]], want)
		}
	}
}
