package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/approvetest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// userAtClient is the person in front of an MCP client: it answers the
// elicitations the client gets with answer, and keeps what it was shown.
type userAtClient struct {
	answer func(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error)

	mu    sync.Mutex
	asked []string
}

func (u *userAtClient) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	u.mu.Lock()
	u.asked = append(u.asked, req.Params.Message)
	u.mu.Unlock()
	return u.answer(ctx, req)
}

func (u *userAtClient) shown() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.asked...)
}

func respond(action mcp.ElicitationResponseAction, content any) func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	return func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: action, Content: content}}, nil
	}
}

// answered collects the answers executors acted on, as an auditor
// following tool.confirm.answered sees them.
func answered(t *testing.T, ff *facadeFleet) func(want int) []*events.ConfirmAnswer {
	t.Helper()
	var mu sync.Mutex
	var got []*events.ConfirmAnswer
	sub, err := ff.Bus.Conn().Subscribe(events.SubjectConfirmAnswered, func(m *nats.Msg) {
		if a, err := events.Decode[events.ConfirmAnswer](m.Data); err == nil {
			mu.Lock()
			got = append(got, a)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ff.Bus.Conn().Flush()
	t.Cleanup(func() { sub.Unsubscribe() })
	// The answer acted on is published before the call's result, but
	// reaches this subscription's callback on its own goroutine: wait
	// for want of them, then return all there are.
	return func(want int) []*events.ConfirmAnswer {
		testkit.Poll(30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= want
		})
		ff.Bus.Conn().Flush()
		mu.Lock()
		defer mu.Unlock()
		return append([]*events.ConfirmAnswer(nil), got...)
	}
}

// With no approver on tool.confirm, an edit the policy asks about is
// confirmed by the person in front of the agent, through an elicitation
// showing the diff; their accept runs it, recorded with the client's user
// as the approver, and their decline refuses it with their reason. (A
// dismissal decides nothing: TestFacadeUsersDismissalDecidesNothing.)
func TestFacadeAsksTheAgentsUserToConfirm(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	acted := answered(t, ff)
	user := &userAtClient{answer: respond(mcp.ElicitationResponseActionAccept, nil)}
	c := ff.connect(t, "editor-client", mcpclient.WithElicitationHandler(user))

	res := callTool(t, c, "write_file", `{"file_path":"notes.md","content":"first line\n"}`)
	if res.IsError {
		t.Fatalf("an accepted edit failed: %s", text(res))
	}
	if data, err := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); err != nil || string(data) != "first line\n" {
		t.Fatalf("the file holds %q (%v)", data, err)
	}
	shown := user.shown()
	if len(shown) != 1 {
		t.Fatalf("the user was asked %d times, want once", len(shown))
	}
	for _, want := range []string{"agent:editor-client", "Tool: write_file (edit)", "Why it asks: edit tools ask the user", "+first line", "Accept to run it once"} {
		if !strings.Contains(shown[0], want) {
			t.Errorf("the elicitation does not show %q:\n%s", want, shown[0])
		}
	}
	var approvers []events.Identity
	for _, a := range acted(1) {
		approvers = append(approvers, a.Sender)
	}
	if len(approvers) != 1 || approvers[0].ID != "user-of:agent:editor-client" || approvers[0].Role != events.RoleAgentUser || approvers[0].Client != "editor-client/1.0" {
		t.Errorf("the answers acted on were given by %+v; want the user of agent:editor-client, with its client", approvers)
	}

	user.answer = respond(mcp.ElicitationResponseActionDecline, map[string]any{"reason": "not that file"})
	res = callTool(t, c, "write_file", `{"file_path":"notes.md","content":"overwritten\n"}`)
	if !res.IsError || !strings.Contains(text(res), "USER_CANCELLED: user-of:agent:editor-client cancelled the call: declined: not that file") {
		t.Errorf("declined: %v %q", res.IsError, text(res))
	}
	if data, _ := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); string(data) != "first line\n" {
		t.Errorf("a refused edit changed the file: %q", data)
	}
}

// The policy keeps destructive kinds from the agent's user: a shell line
// is not put to them, and with no approver on tool.confirm it is denied.
// A client that cannot elicit is never asked either.
func TestFacadeDoesNotAskTheAgentsUserWhereThePolicySaysNo(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	user := &userAtClient{answer: respond(mcp.ElicitationResponseActionAccept, nil)}
	c := ff.connect(t, "shell-client", mcpclient.WithElicitationHandler(user))
	res := callTool(t, c, "run_shell_command", `{"command":"touch made-by-shell"}`)
	if !res.IsError || !strings.Contains(text(res), "no approver is connected") {
		t.Errorf("a shell line with no approver: %v %q", res.IsError, text(res))
	}
	if n := len(user.shown()); n != 0 {
		t.Errorf("the agent's user was asked %d times about a shell line", n)
	}
	if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "made-by-shell")); err == nil {
		t.Error("the shell line ran")
	}

	plain := ff.connect(t, "plain-client")
	res = callTool(t, plain, "write_file", `{"file_path":"notes.md","content":"x"}`)
	if !res.IsError || !strings.Contains(text(res), "no approver is connected") {
		t.Errorf("an edit from a client that cannot elicit, no approver: %v %q", res.IsError, text(res))
	}
}

// An approver on tool.confirm may answer first: their answer decides,
// the question put to the agent's user is withdrawn, and the call does not
// wait for the user.
func TestFacadeApproverAnswersBeforeTheAgentsUser(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	acted := answered(t, ff)
	conn := bustest.Connect(t, ff.Bus)
	a, err := approve.Start(context.Background(), conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: "approver:ada", Role: "approver"}, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	userAsked := make(chan struct{})
	withdrawn := make(chan struct{})
	user := &userAtClient{answer: func(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		close(userAsked)
		// The user looks away; the approver answers meanwhile. The
		// client hears no withdrawal (MCP has none for a server's
		// request), so the user's late accept must decide nothing.
		<-withdrawn
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept}}, nil
	}}
	defer func() {
		select {
		case <-withdrawn:
		default:
			close(withdrawn)
		}
	}()
	c := ff.connect(t, "slow-client", mcpclient.WithElicitationHandler(user))
	go func() {
		<-userAsked
		for {
			s, changed := a.Snapshot()
			for _, r := range s.Pending {
				a.Answer(context.Background(), r.AnswerTo, approve.Answer{Outcome: events.Cancel, Message: "not today"})
			}
			select {
			case <-changed:
			case <-time.After(30 * time.Second):
				return
			}
		}
	}()
	res := callTool(t, c, "write_file", `{"file_path":"notes.md","content":"x"}`)
	if !res.IsError || !strings.Contains(text(res), "approver:ada cancelled the call: not today") {
		t.Errorf("the approver's cancel: %v %q", res.IsError, text(res))
	}
	close(withdrawn)
	got := acted(1)
	if len(got) != 1 || got[0].Sender.ID != "approver:ada" {
		t.Errorf("answers acted on: %d, want the approver's alone", len(got))
	}
}

// In MCP, cancel is a dismissal with no choice made, which a headless
// client sends by itself: it is not the person's no. In both protocol
// generations, a dismissed question goes on to the fleet's approvers when
// one is present, whose answer decides (once); with none, the call is
// denied at once, naming where to approve. Neither is recorded as the
// user's refusal.
func TestFacadeUsersDismissalDecidesNothing(t *testing.T) {
	t.Parallel()
	generations := []struct {
		name    string
		connect func(ff *facadeFleet, t testing.TB, name string, options ...mcpclient.ClientOption) *mcpclient.Client
	}{
		{"2025-11-25 elicitation", (*facadeFleet).connect},
		{"2026-07-28 input required", (*facadeFleet).connectModern},
	}
	for _, g := range generations {
		t.Run(g.name, func(t *testing.T) {
			const hint = "open the console at http://console.test/ or run `toolbus confirm`"
			ff := startFacade(t, nil, "", func(c *executor.Config) { c.ApproveHint = hint })
			acted := answered(t, ff)
			closed := confirmClosed(t, ff)
			steps := stepsOf(t, ff)
			user := &userAtClient{answer: respond(mcp.ElicitationResponseActionCancel, nil)}
			c := g.connect(ff, t, "headless-client", mcpclient.WithElicitationHandler(user))

			// Nobody else to ask: refused at once, with where to approve.
			res := callTool(t, c, "write_file", `{"file_path":"notes.md","content":"alone\n"}`)
			for _, want := range []string{"POLICY_DENIED", "user-of:agent:headless-client made no decision on it (dismissed the question)", "no approver is connected to give it", "To approve calls like this one, " + hint} {
				if !res.IsError || !strings.Contains(text(res), want) {
					t.Errorf("dismissed with no approver: got %v %q, want an error saying %q", res.IsError, text(res), want)
				}
			}
			if strings.Contains(text(res), "USER_CANCELLED") {
				t.Errorf("a dismissal was taken as the user's refusal: %q", text(res))
			}
			if got := closed(1); len(got) != 1 || got[0].ErrorType != events.ErrPolicyDenied || !strings.Contains(got[0].Reason, hint) {
				t.Errorf("the question's end recorded: %+v; want one, denied, naming where to approve", got)
			}
			if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "notes.md")); err == nil {
				t.Error("a dismissed edit ran")
			}

			// An approver present: the question waits for them; their yes
			// runs the call once.
			approvetest.Seat(t, ff.Bus, "approver:ada", func(approve.Request) events.Outcome {
				// Only once the user has dismissed it, so that the call
				// is seen to outlive the dismissal.
				if steps("dismissed") {
					return events.ProceedOnce
				}
				return events.Cancel
			})
			res = callTool(t, c, "write_file", `{"file_path":"notes.md","content":"approved\n"}`)
			if res.IsError {
				t.Fatalf("dismissed by the user, approved by an approver: %s", text(res))
			}
			if data, err := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); err != nil || string(data) != "approved\n" {
				t.Errorf("the file holds %q (%v)", data, err)
			}
			if got := acted(1); len(got) != 1 || got[0].Sender.ID != "approver:ada" || got[0].Outcome != events.ProceedOnce {
				t.Errorf("answers acted on: %+v; want the approver's yes alone", got)
			}
			if n := len(user.shown()); n != 2 {
				t.Errorf("the user was asked %d times, want once per call (2)", n)
			}
		})
	}
}

// confirmClosed collects the questions recorded as ended with no answer.
func confirmClosed(t *testing.T, ff *facadeFleet) func(want int) []*events.ConfirmClosed {
	t.Helper()
	var mu sync.Mutex
	var got []*events.ConfirmClosed
	sub, err := ff.Bus.Conn().Subscribe(events.SubjectConfirmClosed, func(m *nats.Msg) {
		if c, err := events.Decode[events.ConfirmClosed](m.Data); err == nil {
			mu.Lock()
			got = append(got, c)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ff.Bus.Conn().Flush()
	t.Cleanup(func() { sub.Unsubscribe() })
	return func(want int) []*events.ConfirmClosed {
		testkit.Poll(30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= want
		})
		mu.Lock()
		defer mu.Unlock()
		return append([]*events.ConfirmClosed(nil), got...)
	}
}

// stepsOf follows the steps executors record; the function it returns
// reports whether a step named step has been recorded, waiting for it up
// to a deadline.
func stepsOf(t *testing.T, ff *facadeFleet) func(step string) bool {
	t.Helper()
	var mu sync.Mutex
	var got []string
	sub, err := ff.Bus.Conn().Subscribe(events.SubjectStep, func(m *nats.Msg) {
		if s, err := events.Decode[events.Step](m.Data); err == nil {
			mu.Lock()
			got = append(got, s.Step)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ff.Bus.Conn().Flush()
	t.Cleanup(func() { sub.Unsubscribe() })
	return func(step string) bool {
		return testkit.Poll(30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(got, step)
		})
	}
}
