package executor

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// waiting is how many calls wait for an answer on ex, of every principal,
// and how many principals it counts them for.
func waiting(ex *Executor) (calls, principals int) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	for _, n := range ex.asking {
		calls += n
	}
	return calls, len(ex.asking)
}

// TestQuestionsWaitingAreBoundedPerCaller, from the attacker's side: an
// agent that sends call after call the policy asks about cannot make its
// approvers hold more than MaxPendingPerCaller questions; the next one is
// refused at once, and as questions are answered it may ask again, never
// more than the bound at a time, or when one is cancelled.
func TestQuestionsWaitingAreBoundedPerCaller(t *testing.T) {
	t.Parallel()
	const bound = 2
	e := newEnv(t, func(c *Config) { c.MaxPendingPerCaller, c.ConfirmTimeout = bound, time.Minute })
	silent := startApprover(t, e.bus, func(*events.ConfirmRequest) *events.ConfirmAnswer { return nil })
	person := bustest.Connect(t, e.bus).Conn()
	ada := events.Identity{ID: "approver:ada", Role: "approver"}

	results := make(chan *events.Result, 8)
	ask := func(name string) *events.ConfirmRequest {
		t.Helper()
		go func() { results <- e.call(t, "write_file", `{"file_path":"`+name+`","content":"x"}`) }()
		select {
		case req := <-silent.requests:
			return req
		case res := <-results:
			t.Fatalf("a call under the bound was not asked about: %s %q", errType(res), res.LLMContent)
		}
		return nil
	}
	refused := func(when string) {
		t.Helper()
		if res := e.call(t, "write_file", `{"file_path":"notes.md","content":"y"}`); errType(res) != events.ErrTooManyPending {
			t.Fatalf("%s: a call past the bound got %s %q, want %s", when, errType(res), res.LLMContent, events.ErrTooManyPending)
		}
	}
	answered := func(req *events.ConfirmRequest) {
		t.Helper()
		if ack := answerAs(t, person, req, ada, events.ProceedOnce); !ack.Accepted {
			t.Fatalf("the approver's answer was refused: %s", ack.Reason)
		}
		if res := <-results; res.Error != nil {
			t.Fatalf("the approved call: %s %q", errType(res), res.LLMContent)
		}
	}
	check := func(when string, want int) {
		t.Helper()
		if calls, _ := waiting(e.exec); calls != want {
			t.Errorf("%s: %d calls counted as waiting, want %d", when, calls, want)
		}
	}

	first, second := ask("1.md"), ask("2.md")
	check("two asked", 2)
	refused("two waiting")
	answered(first)
	check("one answered", 1)
	third := ask("3.md")
	refused("two waiting again")
	answered(second)
	// A question its caller gives up on ends the wait, cancelled, and
	// frees its place.
	if err := e.client.Cancel(context.Background(), third.InvocationID, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if res := <-results; errType(res) != events.ErrCancelled || !strings.Contains(res.LLMContent, "cancelled while waiting for confirmation") {
		t.Errorf("a call cancelled while waiting: %s %q", errType(res), res.LLMContent)
	}
	if calls, principals := waiting(e.exec); calls != 0 || principals != 0 {
		t.Errorf("every call answered: %d calls of %d principals still counted", calls, principals)
	}
}

// TestQuestionRefusalsAreRecordedUpToABound, from the attacker's side: a
// client that sends answers it may not give in a loop, whether the
// executor refuses them by their subject or the policy by who sends them,
// gets each refused, but cannot flood the audit stream: the first
// maxRecordedRefusals of a question are recorded, and the log says once
// that more came.
func TestQuestionRefusalsAreRecordedUpToABound(t *testing.T) {
	t.Parallel()
	var log testkit.Buffer
	e := newEnv(t, func(c *Config) {
		c.ConfirmTimeout = time.Minute
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	nc := bustest.Connect(t, e.bus).Conn()
	caller := events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}
	for _, tt := range []struct {
		name    string
		refused func(*events.ConfirmRequest) *events.ConfirmAck
	}{
		// The subject names no way of answering: refused by the executor.
		{"bad subject", func(req *events.ConfirmRequest) *events.ConfirmAck {
			return answerWith(t, nc, req, "boss", "", events.Identity{ID: "approver:ada", Role: "approver"}, events.ProceedOnce)
		}},
		// The caller itself: refused by the policy.
		{"the caller", func(req *events.ConfirmRequest) *events.ConfirmAck {
			return answerWith(t, nc, req, events.AnswerAsApprover, "", caller, events.ProceedOnce)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, done := askCaller(t, e.client, caller, "notes.md")
			const sent = maxRecordedRefusals + 3
			for range sent {
				if ack := tt.refused(req); ack.Accepted {
					t.Fatal("a refused answer was accepted")
				}
			}
			if ack := answerAs(t, nc, req, events.AgentUser(caller), events.ProceedOnce); !ack.Accepted {
				t.Fatalf("the caller's user was refused: %s", ack.Reason)
			}
			if res := <-done; res.Error != nil {
				t.Fatalf("the approved call: %s %q", errType(res), res.LLMContent)
			}
			// The answer is recorded after every refusal before it.
			js := e.bus.JetStream()
			testkit.Eventually(t, "the answer is recorded", func() bool {
				for _, a := range audittest.Envelopes[events.ConfirmAnswer](t, js, events.SubjectConfirmAnswered) {
					if a.InvocationID == req.InvocationID {
						return true
					}
				}
				return false
			})
			recorded := 0
			for _, r := range audittest.Envelopes[events.ConfirmRejected](t, js, events.SubjectConfirmRejected) {
				if r.InvocationID == req.InvocationID {
					recorded++
				}
			}
			if recorded != maxRecordedRefusals {
				t.Errorf("%d refused answers sent, %d recorded; want %d", sent, recorded, maxRecordedRefusals)
			}
		})
	}
	logged := log.String()
	// The policy's refusals past the bound are said once; the executor's
	// own refusals are not logged.
	if n := strings.Count(logged, "more refused answers than are recorded"); n != 1 {
		t.Errorf("the log says %d times that refusals went unrecorded, want once:\n%s", n, logged)
	}
	// Nothing failed on the way: whatever the log says of a failure is a lie.
	for _, failure := range []string{"did not reach the caller", "flagged rule failed", "acknowledgement not sent"} {
		if strings.Contains(logged, failure) {
			t.Errorf("the log says %q of a question that went through:\n%s", failure, logged)
		}
	}
}

// mcpTool is an MCP server's tool, as an MCP client would host it.
type mcpTool struct{}

func (mcpTool) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "create_issue", Description: "opens an issue", Kind: events.KindOther,
		Parameters: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}}}`)}
}

func (mcpTool) Origin() (events.Source, string, bool) { return events.SourceMCP, "github", false }

func (mcpTool) Run(context.Context, *tool.Call) (*tool.Output, error) {
	return tool.Text("opened"), nil
}

// TestQuestionShowsWhatEachAlwaysKeeps: the approver is shown, for each
// "always" answer the policy would remember, exactly what it keeps (an
// approver misled about how wide an approval is gives a wider one than
// meant), is not offered the caller's user as a second answerer when the
// caller did not ask for that, and a cancel says why. What an "always"
// answer remembered is a step of the call.
func TestQuestionShowsWhatEachAlwaysKeeps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.ConfirmTimeout = 30 * time.Second })
	reply, err := e.exec.Host(context.Background(), Scope{Source: events.SourceMCP, Server: "github"}, []tool.Tool{mcpTool{}})
	if err != nil || len(reply.Tools) != 1 || reply.Tools[0].Name == "" {
		t.Fatalf("hosting the MCP tool: %+v %v", reply, err)
	}
	issue := reply.Tools[0].Name
	waitTool(t, e.exec, issue)

	steps := make(chan *events.Step, 100)
	nc := bustest.Connect(t, e.bus).Conn()
	sub, err := nc.Subscribe(events.SubjectStep, func(m *nats.Msg) {
		if st, err := events.Decode[events.Step](m.Data); err == nil {
			steps <- st
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()

	a := startApprover(t, e.bus, func(req *events.ConfirmRequest) *events.ConfirmAnswer {
		if req.Command != "" {
			return &events.ConfirmAnswer{Outcome: events.ProceedAlways}
		}
		return &events.ConfirmAnswer{Outcome: events.Cancel, Message: "not today"}
	})
	for _, tt := range []struct {
		tool, args string
		always     []events.AlwaysOption
	}{
		{"run_shell_command", shellArgs("ls -la && git status"), []events.AlwaysOption{
			{Outcome: events.ProceedAlways, Remembers: "the command git status; the command ls with any arguments"}}},
		{"write_file", `{"file_path":"notes.md","content":"x"}`, []events.AlwaysOption{
			{Outcome: events.ProceedAlways, Remembers: "the path " + e.ws.Root() + "/notes.md"}}},
		{issue, `{"title":"t"}`, []events.AlwaysOption{
			{Outcome: events.ProceedAlways, Remembers: "the tool " + issue},
			{Outcome: events.ProceedAlwaysServer, Remembers: "the MCP server github"}}},
	} {
		res := e.call(t, tt.tool, tt.args)
		req := <-a.requests
		if got, want := describeOptions(req.Always), describeOptions(tt.always); got != want {
			t.Errorf("%s: the approver is offered\n%s\nwant\n%s", tt.tool, got, want)
		}
		if req.CallerMayAnswer {
			t.Errorf("%s: the caller's user may answer a call whose caller did not ask", tt.tool)
		}
		if req.Command != "" {
			if res.Error != nil {
				t.Errorf("%s: %s %q", tt.tool, errType(res), res.LLMContent)
			}
			testkit.Eventually(t, "the remembered step", func() bool {
				for {
					select {
					case st := <-steps:
						if st.InvocationID == req.InvocationID && st.Step == "remembered" {
							if st.Detail != tt.always[0].Remembers {
								t.Errorf("remembered %q, want %q", st.Detail, tt.always[0].Remembers)
							}
							return true
						}
					default:
						return false
					}
				}
			})
			continue
		}
		if errType(res) != events.ErrUserCancelled || !strings.Contains(res.LLMContent, "approver:ada cancelled the call: not today") {
			t.Errorf("%s cancelled: %s %q", tt.tool, errType(res), res.LLMContent)
		}
	}
	a.stop()

	// No approver now, and the caller did not ask to confirm: denied at
	// once, and the caller is not asked.
	asked := make(chan *events.ConfirmRequest, 1)
	inv := &events.Invocation{Header: events.Header{Sender: events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}},
		Tool: "write_file", Args: json.RawMessage(`{"file_path":"other.md","content":"x"}`)}
	res, err := e.client.InvokeAs(context.Background(), inv, &invoke.Watch{Confirm: func(req *events.ConfirmRequest) { asked <- req }})
	if err != nil {
		t.Fatal(err)
	}
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "no approver is connected") {
		t.Errorf("no approver: %s %q", errType(res), res.LLMContent)
	}
	select {
	case <-asked:
		t.Error("a caller that did not ask to confirm was asked")
	default:
	}
}

func describeOptions(o []events.AlwaysOption) string {
	var b strings.Builder
	for _, a := range o {
		b.WriteString(string(a.Outcome) + ": " + a.Remembers + "\n")
	}
	return b.String()
}
