package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
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
// as the approver, and their decline refuses it with their reason.
func TestFacadeAsksTheAgentsUserToConfirm(t *testing.T) {
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
	user.answer = respond(mcp.ElicitationResponseActionCancel, nil)
	res = callTool(t, c, "write_file", `{"file_path":"notes.md","content":"overwritten\n"}`)
	if !res.IsError || !strings.Contains(text(res), "USER_CANCELLED") {
		t.Errorf("dismissed: %v %q", res.IsError, text(res))
	}
	if data, _ := os.ReadFile(filepath.Join(ff.Workspace.Root(), "notes.md")); string(data) != "first line\n" {
		t.Errorf("a refused edit changed the file: %q", data)
	}
}

// The policy keeps destructive kinds from the agent's user: a shell line
// is not put to them, and with no approver on tool.confirm it is denied.
// A client that cannot elicit is never asked either.
func TestFacadeDoesNotAskTheAgentsUserWhereThePolicySaysNo(t *testing.T) {
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
