package approve_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.NATSLeaks()...) }

// seat starts an approver as id on a connection of its own.
func seat(t *testing.T, f *executortest.Fleet, id string) *approve.Approver {
	t.Helper()
	conn := bustest.Connect(t, f.Bus)
	a, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: id, Role: "approver"}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// waitFor waits until the approver's state satisfies ok, and returns it.
func waitFor(t *testing.T, a *approve.Approver, what string, ok func(approve.State) bool) approve.State {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		s, changed := a.Snapshot()
		if ok(s) {
			return s
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s never happened; state: %+v", what, s)
		}
	}
}

// find is the newest request of invocation id.
func find(s approve.State, id string) (approve.Request, bool) {
	rs := s.OfInvocation(id)
	if len(rs) == 0 {
		return approve.Request{}, false
	}
	return rs[0], true
}

// answer answers, as a, the newest request of invocation id, by its own
// AnswerTo.
func answer(a *approve.Approver, id string, ans approve.Answer) (*events.ConfirmAck, error) {
	s, _ := a.Snapshot()
	r, ok := find(s, id)
	if !ok {
		return nil, approve.ErrNotPending
	}
	return a.Answer(context.Background(), r.AnswerTo, ans)
}

func pending(id string) func(approve.State) bool {
	return func(s approve.State) bool {
		r, ok := find(s, id)
		return ok && r.Pending()
	}
}

// call invokes a tool in the background; the result comes on the channel.
func call(f *executortest.Fleet, id, tool, args string) <-chan *events.Result {
	out := make(chan *events.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := f.Client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: tool, Args: json.RawMessage(args)}, nil)
		if err != nil {
			res = &events.Result{Error: &events.ToolError{Type: "CLIENT", Message: err.Error()}}
		}
		out <- res
	}()
	return out
}

func result(t *testing.T, ch <-chan *events.Result) *events.Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("the call never returned")
		return nil
	}
}

func errType(r *events.Result) events.ErrorType {
	if r.Error == nil {
		return ""
	}
	return r.Error.Type
}

func TestApproveOnceAndTheOthersSeeWhoAnswered(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	ada, bob := seat(t, f, "approver:ada"), seat(t, f, "approver:bob")
	done := call(f, "inv-once", "write_file", `{"file_path":"notes.md","content":"one\ntwo\n"}`)

	s := waitFor(t, ada, "the request", pending("inv-once"))
	req, _ := find(s, "inv-once")
	if req.Tool != "write_file" || req.Caller.ID != "agent:test" || !strings.Contains(req.Diff, "+one") || req.AnswerTo == "" {
		t.Fatalf("the request lacks what an approver needs: %+v", req)
	}
	if len(req.Always) != 1 || req.Always[0].Outcome != events.ProceedAlways || !strings.Contains(req.Always[0].Remembers, "notes.md") {
		t.Errorf("the always answers offered: %+v", req.Always)
	}
	waitFor(t, bob, "the request at bob's", pending("inv-once"))

	ack, err := answer(ada, "inv-once", approve.Answer{Outcome: events.ProceedOnce})
	if err != nil || !ack.Accepted {
		t.Fatalf("ada's answer: %+v %v", ack, err)
	}
	if res := result(t, done); errType(res) != "" {
		t.Fatalf("the approved call failed: %+v", res.Error)
	}
	if data, err := os.ReadFile(filepath.Join(f.Workspace.Root(), "notes.md")); err != nil || string(data) != "one\ntwo\n" {
		t.Errorf("the file: %q %v", data, err)
	}
	s = waitFor(t, bob, "bob seeing ada's answer", func(s approve.State) bool {
		r, ok := find(s, "inv-once")
		return ok && r.Answer != nil
	})
	if r, _ := find(s, "inv-once"); r.Answer.Sender.ID != "approver:ada" || r.Answer.Outcome != events.ProceedOnce || r.Status() != "proceed_once by approver:ada" {
		t.Errorf("bob sees %q", r.Status())
	}
	if len(s.Pending) != 0 || len(s.Recent) != 1 {
		t.Errorf("bob's queue: %d pending, %d recent", len(s.Pending), len(s.Recent))
	}
	// Too late: nothing waits any more.
	if _, err := answer(bob, "inv-once", approve.Answer{Outcome: events.Cancel}); !errors.Is(err, approve.ErrNotPending) {
		t.Errorf("a late answer: %v", err)
	}
}

func TestAnApproverStartedLaterSeesWhatWaits(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	seat(t, f, "approver:early") // an approver is present, so the call waits
	done := call(f, "inv-later", "write_file", `{"file_path":"a.txt","content":"x"}`)
	early := seat(t, f, "approver:early2")
	waitFor(t, early, "the request", pending("inv-later"))
	// Start promises the requests the stream holds; the stream's copy
	// of one may come a moment after the approvers following the subject
	// have it.
	testkit.Eventually(t, "the request in stream "+events.ConfirmStream, func() bool {
		held := false
		_, err := bus.Read(context.Background(), f.Bus.JetStream(), events.ConfirmStream, bus.Range{}, func(m *bus.StoredMsg) error {
			held = held || strings.Contains(string(m.Data), `"inv-later"`)
			return nil
		})
		return err == nil && held
	})

	late := seat(t, f, "approver:late")
	if _, ok := func() (approve.Request, bool) { s, _ := late.Snapshot(); return find(s, "inv-later") }(); !ok {
		t.Fatal("an approver started after the request does not have it once Start returns")
	}
	ack, err := answer(late, "inv-later", approve.Answer{Outcome: events.Cancel, Message: "write it to b.txt instead"})
	if err != nil || !ack.Accepted {
		t.Fatalf("answer: %+v %v", ack, err)
	}
	res := result(t, done)
	if errType(res) != events.ErrUserCancelled || !strings.Contains(res.LLMContent, "approver:late cancelled the call: write it to b.txt instead") {
		t.Errorf("the cancelled call: %s %q", errType(res), res.LLMContent)
	}
}

// The policy judges every answer: an agent answering its own call, or an
// identity without the approver role, is refused, told why, and recorded;
// the call goes on waiting until an accepted answer comes.
func TestAnswersThePolicyRefusesDecideNothing(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	watcher := seat(t, f, "approver:watcher")
	done := call(f, "inv-self", "write_file", `{"file_path":"a.txt","content":"x"}`)
	waitFor(t, watcher, "the request", pending("inv-self"))

	conn := bustest.Connect(t, f.Bus)
	// The agent itself, claiming the approver role.
	self, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{Identity: f.Caller, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer self.Stop()
	waitFor(t, self, "the request", pending("inv-self"))
	ack, err := answer(self, "inv-self", approve.Answer{Outcome: events.ProceedAlways})
	if err != nil || ack.Accepted || !strings.Contains(ack.Reason, "nobody may approve a call they made") {
		t.Fatalf("the caller approving its own call: %+v %v", ack, err)
	}
	// Another agent, not claiming the role at all.
	other, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: "agent:other", Role: "agent"}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	waitFor(t, other, "the request", pending("inv-self"))
	if ack, err := answer(other, "inv-self", approve.Answer{Outcome: events.ProceedOnce}); err != nil || ack.Accepted || !strings.Contains(ack.Reason, "only the approver role may answer") {
		t.Fatalf("an agent answering: %+v %v", ack, err)
	}
	// Both refusals are on record, and the call still waits.
	s := waitFor(t, watcher, "the refusals", func(s approve.State) bool {
		r, ok := find(s, "inv-self")
		return ok && len(r.Rejected) == 2
	})
	if r, _ := find(s, "inv-self"); !r.Pending() || r.Rejected[0].Answer.Sender.ID != "agent:test" {
		t.Errorf("after the refusals: %s %+v", r.Status(), r.Rejected)
	}
	if _, err := os.Stat(filepath.Join(f.Workspace.Root(), "a.txt")); err == nil {
		t.Fatal("a refused approval wrote the file")
	}
	// Nothing was remembered from the refused "always".
	ack, err = answer(watcher, "inv-self", approve.Answer{Outcome: events.ProceedOnce})
	if err != nil || !ack.Accepted {
		t.Fatalf("the watcher's answer: %+v %v", ack, err)
	}
	if res := result(t, done); errType(res) != "" {
		t.Fatalf("the call: %+v", res.Error)
	}
	// A second write of the same file asks again: the refused "always"
	// left no allowlist entry.
	again := call(f, "inv-again", "write_file", `{"file_path":"a.txt","content":"y"}`)
	waitFor(t, watcher, "the second request", pending("inv-again"))
	if ack, err := answer(watcher, "inv-again", approve.Answer{Outcome: events.Cancel}); err != nil || !ack.Accepted {
		t.Fatalf("cancel: %+v %v", ack, err)
	}
	if res := result(t, again); errType(res) != events.ErrUserCancelled {
		t.Errorf("the second call: %s", errType(res))
	}
}

// A policy set that does not say who may approve accepts nobody.
func TestAPolicyWithoutTheApproverRuleAcceptsNoAnswer(t *testing.T) {
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus
decision := {"verdict": "ASK_USER", "reason": "asking", "remember": false}
`})
	if err != nil {
		t.Fatal(err)
	}
	f := executortest.Start(t, func(c *executor.Config) { c.Policy = pol; c.ConfirmTimeout = 3 * time.Second })
	a := seat(t, f, "approver:ada")
	done := call(f, "inv-norule", "read_file", `{"file_path":"README.md"}`)
	waitFor(t, a, "the request", pending("inv-norule"))
	ack, err := answer(a, "inv-norule", approve.Answer{Outcome: events.ProceedOnce})
	if err != nil || ack.Accepted || !strings.Contains(ack.Reason, "defines no data.toolbus.approver_allowed") {
		t.Fatalf("answer: %+v %v", ack, err)
	}
	if res := result(t, done); errType(res) != events.ErrConfirmationTimeout {
		t.Errorf("the call: %s %q", errType(res), res.LLMContent)
	}
	s := waitFor(t, a, "the closed request", func(s approve.State) bool {
		r, ok := find(s, "inv-norule")
		return ok && r.Closed != nil
	})
	if r, _ := find(s, "inv-norule"); r.Closed.ErrorType != events.ErrConfirmationTimeout {
		t.Errorf("closed as %s", r.Closed.ErrorType)
	}
}

// Modify: the edited arguments are judged again, and asked about again;
// the queue shows the new round as pending.
func TestModifyAsksAgainWithTheNewArguments(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	a := seat(t, f, "approver:ada")
	done := call(f, "inv-mod", "write_file", `{"file_path":"a.txt","content":"first"}`)
	waitFor(t, a, "the request", pending("inv-mod"))
	ack, err := answer(a, "inv-mod", approve.Answer{Outcome: events.ModifyWithEditor, Args: json.RawMessage(`{"file_path":"b.txt","content":"second"}`)})
	if err != nil || !ack.Accepted {
		t.Fatalf("modify: %+v %v", ack, err)
	}
	s := waitFor(t, a, "the second round", func(s approve.State) bool {
		r, ok := find(s, "inv-mod")
		return ok && r.Pending() && strings.Contains(string(r.Args), "b.txt")
	})
	if r, _ := find(s, "inv-mod"); !strings.Contains(r.Diff, "+second") {
		t.Errorf("the second round's diff: %q", r.Diff)
	}
	if ack, err := answer(a, "inv-mod", approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted {
		t.Fatalf("approve: %+v %v", ack, err)
	}
	if res := result(t, done); errType(res) != "" {
		t.Fatalf("the call: %+v", res.Error)
	}
	if _, err := os.Stat(filepath.Join(f.Workspace.Root(), "a.txt")); err == nil {
		t.Error("the original arguments ran")
	}
	if data, _ := os.ReadFile(filepath.Join(f.Workspace.Root(), "b.txt")); string(data) != "second" {
		t.Errorf("b.txt: %q", data)
	}
}

// A shell line's request names the parts the policy flags, and the
// always answer remembers what the policy says.
func TestShellRequestsCarryFlagsAndAlways(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	a := seat(t, f, "approver:ada")
	done := call(f, "inv-sh", "run_shell_command", `{"command":"git status && ls /etc > out.txt"}`)
	s := waitFor(t, a, "the request", pending("inv-sh"))
	r, _ := find(s, "inv-sh")
	if r.Command != "git status && ls /etc > out.txt" {
		t.Errorf("command %q", r.Command)
	}
	want := map[events.Flag]bool{{Text: "git status", Why: "not on the allowlist"}: true, {Text: "/etc", Why: "outside the workspace"}: true,
		{Text: "out.txt", Why: "output written to a file"}: true}
	for _, fl := range r.Flagged {
		delete(want, fl)
	}
	if len(want) > 0 {
		t.Errorf("flags %+v lack %v", r.Flagged, want)
	}
	// An "always" the policy did not offer never reaches the executor.
	if _, err := answer(a, "inv-sh", approve.Answer{Outcome: events.ProceedAlwaysServer}); !errors.Is(err, approve.ErrNotOffered) {
		t.Errorf("an always not offered: %v", err)
	}
	if _, err := answer(a, "inv-sh", approve.Answer{Outcome: events.ModifyWithEditor, Args: json.RawMessage(`[1]`)}); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("a modify without an object: %v", err)
	}
	if _, err := answer(a, "inv-sh", approve.Answer{Outcome: events.Cancel}); err != nil {
		t.Fatal(err)
	}
	result(t, done)
}

// What an injected agent can send to a request's answer subject: garbage,
// an answer for another call, and refused answers in a loop. Each is
// refused with a reason; the refusals on record are bounded; a real
// answer still decides.
func TestAnswerSubjectUnderAttack(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	a := seat(t, f, "approver:ada")
	done := call(f, "inv-attack", "write_file", `{"file_path":"a.txt","content":"x"}`)
	s := waitFor(t, a, "the request", pending("inv-attack"))
	req, _ := find(s, "inv-attack")
	nc := bustest.Connect(t, f.Bus).Conn()
	send := func(data []byte) *events.ConfirmAck {
		t.Helper()
		msg, err := nc.Request(events.AnswerSubject(req.AnswerTo, events.AnswerAsApprover, ""), data, 10*time.Second)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		ack, err := events.Decode[events.ConfirmAck](msg.Data)
		if err != nil {
			t.Fatalf("ack: %v", err)
		}
		return ack
	}
	encode := func(ans *events.ConfirmAnswer) []byte {
		data, err := events.Encode(ans)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if ack := send([]byte(`{"v":1,"type":"tool.confirm.answer","outcome":"proceed_once"`)); ack.Accepted || !strings.Contains(ack.Reason, "not valid") {
		t.Errorf("garbage: %+v", ack)
	}
	other := encode(&events.ConfirmAnswer{Header: events.Header{Sender: events.Identity{ID: "approver:mallory", Role: "approver"}}, InvocationID: "inv-other", Outcome: events.ProceedOnce})
	if ack := send(other); ack.Accepted || !strings.Contains(ack.Reason, `for invocation "inv-other"`) {
		t.Errorf("another call's answer: %+v", ack)
	}
	self := encode(&events.ConfirmAnswer{Header: events.Header{Sender: f.Caller}, InvocationID: "inv-attack", Outcome: events.ProceedAlwaysTool})
	for range 30 {
		if ack := send(self); ack.Accepted {
			t.Fatal("the caller's own answer was accepted")
		}
	}
	ack, err := answer(a, "inv-attack", approve.Answer{Outcome: events.Cancel, Message: "no"})
	if err != nil || !ack.Accepted {
		t.Fatalf("the real answer: %+v %v", ack, err)
	}
	if res := result(t, done); errType(res) != events.ErrUserCancelled {
		t.Errorf("the call: %s", errType(res))
	}
	s = waitFor(t, a, "the call ended", func(s approve.State) bool { r, ok := find(s, "inv-attack"); return ok && !r.Pending() })
	if r, _ := find(s, "inv-attack"); len(r.Rejected) != 20 {
		t.Errorf("%d refusals on record, want the bound of 20", len(r.Rejected))
	}
}

// Requests reach an approver as they are sent, whatever its reads of the
// stream do: with them stopped (as when its copy of the stream is
// catching up after a restart), a call still waits in its queue, and the
// answer goes through. Every event comes twice, live and from the stream:
// a copy adds nothing, and a copy of a request that ended does not bring
// it back.
func TestRequestsComeLiveAndFromTheStreamOnce(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	ada := seat(t, f, "approver:ada")
	approve.StopFollowingTheStream(ada)
	done := call(f, "inv-live", "write_file", `{"file_path":"live.md","content":"live\n"}`)
	waitFor(t, ada, "the request, live", pending("inv-live"))
	request := bustest.Recorded(t, f.Bus, events.SubjectConfirm)
	nc := bustest.Connect(t, f.Bus).Conn()
	if err := nc.Publish(events.SubjectConfirm, request); err != nil {
		t.Fatal(err)
	}
	if ack, err := answer(ada, "inv-live", approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted {
		t.Fatalf("the answer: %+v %v", ack, err)
	}
	if res := result(t, done); errType(res) != "" {
		t.Fatalf("the approved call failed: %+v", res.Error)
	}
	waitFor(t, ada, "the answer, live", func(s approve.State) bool { r, ok := find(s, "inv-live"); return ok && r.Answer != nil })
	// The copy of the request that ended, once more, and a fence behind
	// it: a request of another call, which must be the only one pending.
	if err := nc.Publish(events.SubjectConfirm, request); err != nil {
		t.Fatal(err)
	}
	other := call(f, "inv-after", "write_file", `{"file_path":"after.md","content":"after\n"}`)
	s := waitFor(t, ada, "the next request", pending("inv-after"))
	if len(s.Pending) != 1 || len(s.Recent) != 1 {
		t.Errorf("after copies: %d pending, %d recent; want the next call pending and the first ended once", len(s.Pending), len(s.Recent))
	}
	answer(ada, "inv-after", approve.Answer{Outcome: events.Cancel})
	result(t, other)
}

// An approver started before its fleet's cluster has made the audit
// stream and the stream of confirmations beside it (the nodes take their
// ports first) waits for them, and follows them once they are there.
func TestAnApproverWaitsForTheAuditStream(t *testing.T) {
	b := bustest.Start(t, "")
	ctx := context.Background()
	streams := []string{events.ConfirmStream, events.AuditStream}
	for _, s := range streams {
		if err := b.JetStream().DeleteStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	conn := bustest.Connect(t, b) // a part that connects makes the streams again: it must come later
	for _, s := range streams {
		if err := conn.JetStream().DeleteStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan error, 1)
	var a *approve.Approver
	go func() {
		var err error
		a, err = approve.Start(ctx, conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: "approver:early", Role: "approver"}, Logger: bustest.Quiet()})
		started <- err
	}()
	select {
	case err := <-started:
		t.Fatalf("the approver started, or failed, with no audit stream: %v", err)
	case <-time.After(time.Second):
	}
	bustest.Connect(t, b) // as a fleet's node does once its cluster is up
	if err := <-started; err != nil {
		t.Fatalf("the approver did not start once the stream was there: %v", err)
	}
	a.Stop()
}
