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

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// twoPersonPolicy is the default policy with a two-person rule for shell
// lines and edits.
func twoPersonPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	files := map[string]string{}
	for name, src := range defaultpolicy.Default() {
		files[name] = src
	}
	files["two.rego"] = "package toolbus\n\napprovals_required := 2 if input.tool.name in {\"run_shell_command\", \"write_file\"}\n"
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// answerWith sends answer to req on the subject of role as for
// principal, and returns the executor's acknowledgement.
func answerAsWith(t *testing.T, nc *nats.Conn, req *events.ConfirmRequest, as, principal string, answer *events.ConfirmAnswer) *events.ConfirmAck {
	t.Helper()
	answer.InvocationID = req.InvocationID
	return requestAck(t, nc, events.AnswerSubject(req.AnswerTo, as, principal), answer)
}

// member is an answer of the approver member name of the fleet, who is
// the person (events.Signer.Member).
func member(name string, outcome events.Outcome) *events.ConfirmAnswer {
	return &events.ConfirmAnswer{Header: events.Header{Sender: events.Identity{ID: name, Role: "approver"}}, Outcome: outcome,
		Who: &events.Signer{Member: true}, Via: events.ViaTerminal}
}

// startCall makes call of tool with args as the agent, its caller's user
// askable, and returns the confirmation request it waits on and where
// its result comes.
func startCall(t *testing.T, e *env, approver *approver, tool, args string) (*events.ConfirmRequest, <-chan *events.Result) {
	t.Helper()
	done := make(chan *events.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.client.Invoke(ctx, &events.Invocation{Tool: tool, Args: json.RawMessage(args), CallerConfirms: true}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case req := <-approver.requests:
		return req, done
	case <-time.After(30 * time.Second):
		t.Fatal("no confirmation request")
	}
	return nil, nil
}

// TestATwoPersonRuleNeedsTwoProvenPeople: the policy asks two people to
// approve a shell line. From the attacker's side: the first approval
// alone runs nothing; the same person again, an approver nobody proves,
// an "always", and the requester's own user are each refused and counted
// for nothing; the second proven person's approval runs the call once.
// The request offers no "always", and the trail records both approvals.
func TestATwoPersonRuleNeedsTwoProvenPeople(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced, c.Policy = true, twoPersonPolicy(t) })
	a := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	nc := bustest.Connect(t, e.bus).Conn()
	answered, err := nc.SubscribeSync(events.SubjectConfirmAnswered)
	if err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(e.ws.Root(), "runs.txt")
	req, done := startCall(t, e, a, "run_shell_command", shellArgs("echo ran >> runs.txt"))
	if req.ApprovalsRequired != 2 || len(req.Always) != 0 {
		t.Fatalf("the request needs %d people and offers %v", req.ApprovalsRequired, req.Always)
	}
	// Bob answers through a seat of the approve package, as toolbus
	// confirm does: it shows the request waiting, with its progress.
	bobConn := bustest.Connect(t, e.bus)
	bob, err := approve.Start(context.Background(), bobConn.Conn(), bobConn.JetStream(), approve.Config{
		Identity: events.Identity{ID: "bob", Role: "approver"}, Principal: "bob", Via: events.ViaTerminal, Who: &events.Signer{Member: true}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Stop()
	if ack := answerAsWith(t, nc, req, events.AnswerAsApprover, "alice", member("alice", events.ProceedOnce)); !ack.Accepted || ack.Approval != 1 || ack.Of != 2 {
		t.Fatalf("alice's approval: %+v", ack)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "bob's seat shows one approval of two", func() bool {
		st, _ := bob.Snapshot()
		r, ok := st.Find(req.AnswerTo)
		return ok && r.Pending() && r.Progress() == "1 of 2 approved (alice)"
	})
	for _, c := range []struct {
		what, as, principal string
		answer              *events.ConfirmAnswer
		refusal             string
	}{
		{"alice again", events.AnswerAsApprover, "alice", member("alice", events.ProceedOnce), "approved this call already"},
		{"a console's typed name", events.AnswerAsApprover, "console",
			&events.ConfirmAnswer{Header: events.Header{Sender: events.Identity{ID: "console", Role: "approver"}}, Outcome: events.ProceedOnce,
				Person: "bob", Who: &events.Signer{Name: "bob"}, Via: events.ViaConsole}, "proven"},
		{"an always", events.AnswerAsApprover, "bob", member("bob", events.ProceedAlways), "proceed_once or cancel"},
		{"an edit", events.AnswerAsApprover, "bob",
			&events.ConfirmAnswer{Header: events.Header{Sender: events.Identity{ID: "bob", Role: "approver"}}, Outcome: events.ModifyWithEditor,
				Args: json.RawMessage(shellArgs("echo other >> runs.txt")), Who: &events.Signer{Member: true}}, "proceed_once or cancel"},
	} {
		if ack := answerAsWith(t, nc, req, c.as, c.principal, c.answer); ack.Accepted || !strings.Contains(ack.Reason, c.refusal) {
			t.Errorf("%s: %+v, want refused for %q", c.what, ack, c.refusal)
		}
	}
	if _, err := os.Stat(runs); err == nil {
		t.Fatal("the line ran on one approval")
	}
	if ack, err := bob.Answer(context.Background(), req.AnswerTo, approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted || ack.Approval != 0 {
		t.Fatalf("bob's approval: %+v %v", ack, err)
	}
	select {
	case res := <-done:
		if res == nil || res.Error != nil {
			t.Fatalf("the call after two approvals: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no result after two approvals")
	}
	if data, err := os.ReadFile(runs); err != nil || string(data) != "ran\n" {
		t.Fatalf("runs.txt holds %q (%v), want one run", data, err)
	}
	var got []string
	for range 2 {
		m, err := answered.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ans, err := events.Decode[events.ConfirmAnswer](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ans.Sender.ID+" "+string(rune('0'+ans.Approval))+"/"+string(rune('0'+ans.Of)))
	}
	if strings.Join(got, ", ") != "alice 1/2, bob 2/2" {
		t.Errorf("the trail records the approvals as %q", got)
	}
}

// TestAnyNoEndsATwoPersonCall: one approval, then another person's no:
// the call ends cancelled and runs nothing.
func TestAnyNoEndsATwoPersonCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced, c.Policy = true, twoPersonPolicy(t) })
	a := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	nc := bustest.Connect(t, e.bus).Conn()
	req, done := startCall(t, e, a, "run_shell_command", shellArgs("echo ran >> runs.txt"))
	if ack := answerAsWith(t, nc, req, events.AnswerAsApprover, "alice", member("alice", events.ProceedOnce)); !ack.Accepted {
		t.Fatalf("alice: %+v", ack)
	}
	if ack := answerAsWith(t, nc, req, events.AnswerAsApprover, "bob", member("bob", events.Cancel)); !ack.Accepted {
		t.Fatalf("bob's no: %+v", ack)
	}
	res := <-done
	if errType(res) != events.ErrUserCancelled {
		t.Fatalf("the call after a no: %s %s", errType(res), res.LLMContent)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "runs.txt")); err == nil {
		t.Fatal("the line ran")
	}
}

// TestTheRequestersUserDoesNotCount: an edit needs two people, and its
// caller's own user may answer it (elicitation): their yes does not
// count toward the two, and two proven approvers still run it.
func TestTheRequestersUserDoesNotCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced, c.Policy = true, twoPersonPolicy(t) })
	a := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	nc := bustest.Connect(t, e.bus).Conn()
	req, done := startCall(t, e, a, "write_file", `{"file_path":"new.txt","content":"hello\n"}`)
	if !req.CallerMayAnswer {
		t.Fatal("the caller's user was not asked: the test asks nothing of the rule")
	}
	user := events.AgentUser(events.Identity{ID: "agent:test", Role: "agent", Session: "s1"})
	ack := answerAsWith(t, nc, req, events.AnswerAsCaller, "", &events.ConfirmAnswer{Header: events.Header{Sender: user}, Outcome: events.ProceedOnce})
	if ack.Accepted || !strings.Contains(ack.Reason, "requester's own user") {
		t.Fatalf("the requester's user: %+v", ack)
	}
	for _, who := range []string{"alice", "bob"} {
		if ack := answerAsWith(t, nc, req, events.AnswerAsApprover, who, member(who, events.ProceedOnce)); !ack.Accepted {
			t.Fatalf("%s: %+v", who, ack)
		}
	}
	if res := <-done; res == nil || res.Error != nil {
		t.Fatalf("the edit after two approvals: %+v", res)
	}
}

// readmeExample is the example policy of policy/README.md's section on
// data.toolbus.approvals_required, as a module: the docs' rules are the
// ones tested.
func readmeExample(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../policy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(data), "## Output: `data.toolbus.approvals_required`")
	_, block, ok := strings.Cut(section, "```rego\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("no rego example in policy/README.md's approvals_required section")
	}
	return "package toolbus\n\n" + block
}

// TestGroupsAndTwoPeopleDecideProdShellLines: the README's example policy,
// on an executor of the workspace prod. A shell line needs two people of
// sre. A person the console signed in with the organization's provider,
// in the group dev, is refused with the rule's reason; a claim of the
// group without a sign-in counts for nothing; a person approving their
// own agent's call is refused; two signed-in people of sre approve, and
// the call runs once.
func TestGroupsAndTwoPeopleDecideProdShellLines(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for name, src := range defaultpolicy.Default() {
		if !strings.HasSuffix(name, "_test.rego") { // they test the default's approvers, which this changes
			files[name] = src
		}
	}
	files["example.rego"] = readmeExample(t)
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced, c.Policy, c.WorkspaceName = true, pol, "prod" })
	a := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	nc := bustest.Connect(t, e.bus).Conn()
	e.client.Close()
	e.client = invoke.NewClient(e.callerConn, events.Identity{ID: "agent:test", Role: "agent", Session: "s1", User: "own@example.com"}, "")
	req, done := startCall(t, e, a, "run_shell_command", shellArgs("echo ran >> runs.txt"))
	if req.ApprovalsRequired != 2 {
		t.Fatalf("a prod shell line needs %d people", req.ApprovalsRequired)
	}
	console := func(who *events.Signer) *events.ConfirmAnswer {
		return &events.ConfirmAnswer{Header: events.Header{Sender: events.Identity{ID: "console", Role: "approver"}}, Outcome: events.ProceedOnce, Who: who, Via: events.ViaConsole}
	}
	const issuer = "https://id.example.com"
	for what, c := range map[string]struct {
		who     *events.Signer
		refusal string
	}{
		"a signed-in person of dev":     {&events.Signer{Issuer: issuer, Subject: "u-dev", Email: "dev@example.com", Groups: []string{"dev"}}, "sre group's to approve"},
		"a name claiming sre, unsigned": {&events.Signer{Name: "mallory", Groups: []string{"sre"}}, "sre group's to approve"},
		"the agent's own person":        {&events.Signer{Issuer: issuer, Subject: "u-own", Email: "own@example.com", Groups: []string{"sre"}}, "their own agent's call"},
	} {
		if ack := answerAsWith(t, nc, req, events.AnswerAsApprover, "console", console(c.who)); ack.Accepted || !strings.Contains(ack.Reason, c.refusal) {
			t.Errorf("%s: %+v", what, ack)
		}
	}
	for i, who := range []string{"sre1", "sre2"} {
		ack := answerAsWith(t, nc, req, events.AnswerAsApprover, "console", console(&events.Signer{Issuer: issuer, Subject: "u-" + who, Email: who + "@example.com", Groups: []string{"sre"}}))
		if !ack.Accepted || (i == 0) != (ack.Approval == 1) {
			t.Fatalf("%s: %+v", who, ack)
		}
	}
	if res := <-done; res == nil || res.Error != nil {
		t.Fatalf("the line after two of sre: %+v", res)
	}
	if data, err := os.ReadFile(filepath.Join(e.ws.Root(), "runs.txt")); err != nil || string(data) != "ran\n" {
		t.Fatalf("runs.txt holds %q (%v), want one run", data, err)
	}
}
