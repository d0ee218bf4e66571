package approve_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

// agent is a client of the fleet that the executors take to be principal.
func agent(t *testing.T, f *executortest.Fleet, principal string) *invoke.Client {
	t.Helper()
	c := invoke.NewClient(bustest.Connect(t, f.Bus).Conn(), events.Identity{ID: principal, Role: "agent", Session: "s1"}, principal)
	t.Cleanup(func() { c.Close() })
	return c
}

// callIn invokes a tool as c in workspace ws in the background.
func callIn(c *invoke.Client, id, ws, tool, args string) <-chan *events.Result {
	out := make(chan *events.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := c.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: tool, Args: json.RawMessage(args), Workspace: ws}, nil)
		if err != nil {
			res = &events.Result{Error: &events.ToolError{Type: "CLIENT", Message: err.Error()}}
		}
		out <- res
	}()
	return out
}

// The workspace swap: a prompt-injected agent has a harmless edit waiting
// for an approver, then asks for a shell line under the same id in another
// workspace, hoping the approver's "yes" to the edit runs the line. The
// executor that took the edit's key refuses the line; another executor
// takes it as a call of its own, with an id of its own, asked about on
// its own AnswerTo. Either way the approver's queue still shows the edit,
// and the answer runs the edit alone. Another caller's request under the
// same id is a request of its own beside it, answered on its own
// AnswerTo.
func TestARequestUnderAPendingIDNeverTakesItsPlace(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.IdentitiesEnforced = true })
	other := t.TempDir()
	node, err := executornode.Start(context.Background(), executornode.Config{Bus: f.Bus, Workspace: other,
		Executor:  executor.Config{Identity: events.Identity{ID: "executor@other", Role: "executor"}, WorkspaceName: "other", Logger: bustest.Quiet()},
		Configure: func(c *executor.Config) { c.IdentitiesEnforced = true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(context.Background()) })
	home := f.Workspace.Root()
	ada := seat(t, f, "approver:ada")
	mallory, alice := agent(t, f, "mallory"), agent(t, f, "alice")

	edit := callIn(mallory, "swap-1", home, "write_file", `{"file_path":"notes.md","content":"harmless\n"}`)
	s := waitFor(t, ada, "the edit's request", pending("swap-1"))
	editReq, _ := find(s, "swap-1")
	shell := callIn(mallory, "swap-1", "other", "run_shell_command", `{"command":"touch pwned"}`)
	isShell := func(r approve.Request, caller string) bool {
		return r.Pending() && r.Tool == "run_shell_command" && r.Caller.ID == caller
	}
	asked := func(s approve.State, caller string) (approve.Request, bool) {
		for _, r := range s.Pending {
			if isShell(r, caller) {
				return r, true
			}
		}
		return approve.Request{}, false
	}
	var shellReq approve.Request
	shellAsked := false
	for !shellAsked {
		s, changed := ada.Snapshot()
		if shellReq, shellAsked = asked(s, "mallory"); shellAsked {
			break
		}
		select {
		case res := <-shell:
			if errType(res) != events.ErrInvocationIDReused {
				t.Fatalf("the shell line under the edit's id: %s %q, want %s or a request of its own", errType(res), res.LLMContent, events.ErrInvocationIDReused)
			}
			shell = nil
		case <-changed:
			continue
		case <-time.After(30 * time.Second):
			t.Fatalf("the shell line was neither refused nor asked about: %+v", s)
		}
		break
	}
	if shellAsked && (shellReq.AnswerTo == editReq.AnswerTo || shellReq.Call == editReq.Call) {
		t.Fatalf("the shell line is asked about under the edit's answer token or call id: %+v", shellReq.ConfirmRequest)
	}
	before := len(s.Pending)
	if shellAsked {
		before = 2
	}
	theirs := callIn(alice, "swap-1", "other", "run_shell_command", `{"command":"touch alice-ran"}`)
	s = waitFor(t, ada, "alice's request beside the edit", func(s approve.State) bool { return len(s.Pending) == before+1 })
	if r, ok := s.Find(editReq.AnswerTo); !ok || !r.Pending() || r.Tool != "write_file" || r.Caller.ID != "mallory" {
		t.Fatalf("the edit's request is no longer what its AnswerTo names: %+v", r.ConfirmRequest)
	}
	if ack, err := ada.Answer(context.Background(), editReq.AnswerTo, approve.Answer{Outcome: events.ProceedOnce}); err != nil || !ack.Accepted {
		t.Fatalf("the answer to the edit: %+v %v", ack, err)
	}
	if res := result(t, edit); errType(res) != "" {
		t.Fatalf("the edit: %+v", res.Error)
	}
	if b, err := os.ReadFile(filepath.Join(home, "notes.md")); err != nil || string(b) != "harmless\n" {
		t.Errorf("the edit wrote %q, %v", b, err)
	}
	select {
	case res := <-theirs:
		t.Fatalf("the answer to the edit ended alice's call too: %+v", res)
	case res := <-shell:
		t.Fatalf("the answer to the edit ended the shell line too: %+v", res)
	default:
	}
	for _, name := range []string{"pwned", "alice-ran"} {
		if _, err := os.Stat(filepath.Join(other, name)); err == nil {
			t.Errorf("%s ran on the answer to the edit", name)
		}
	}
	s, _ = ada.Snapshot()
	for _, r := range s.Pending {
		if r.AnswerTo == editReq.AnswerTo {
			continue // answered: the approver may not have seen it close yet
		}
		if ack, err := ada.Answer(context.Background(), r.AnswerTo, approve.Answer{Outcome: events.Cancel}); err != nil || !ack.Accepted {
			t.Fatalf("cancel %s's line: %+v %v", r.Caller.ID, ack, err)
		}
	}
	if res := result(t, theirs); errType(res) != events.ErrUserCancelled {
		t.Errorf("alice's line: %s", errType(res))
	}
	if shell != nil {
		if res := result(t, shell); errType(res) != events.ErrUserCancelled {
			t.Errorf("mallory's line, asked about on its own: %s", errType(res))
		}
	}
	if _, err := os.Stat(filepath.Join(other, "pwned")); err == nil {
		t.Error("mallory's shell line ran")
	}
}

// One caller floods the approvers with calls that ask, each with a large
// edit: past the bound the executor refuses them at once, the number of
// its calls waiting stays at the bound, what an approver is shown of each
// is cut to the bound of a request (the whole call stays in the
// invocation's record), and another caller is still asked.
func TestOneCallerCannotFillTheApproversQueue(t *testing.T) {
	t.Parallel()
	const bound = 4
	f := executortest.Start(t, func(c *executor.Config) { c.IdentitiesEnforced, c.MaxPendingPerCaller = true, bound })
	ada := seat(t, f, "approver:ada")
	mallory, alice := agent(t, f, "mallory"), agent(t, f, "alice")
	big := strings.Repeat("x", 600<<10)
	// The results come as they come: the calls within the bound wait
	// for an answer, those past it are refused at once.
	results := make(chan *events.Result, 3*bound)
	for i := range 3 * bound {
		c := callIn(mallory, "flood-"+string(rune('a'+i)), "", "write_file", `{"file_path":"flood.md","content":"`+big+`"}`)
		go func() { results <- <-c }()
	}
	for range 2 * bound {
		res := result(t, results)
		if errType(res) != events.ErrTooManyPending {
			t.Fatalf("a call past the bound: %s %q", errType(res), res.LLMContent)
		}
	}
	if n := f.Executor.Pending("mallory"); n != bound {
		t.Errorf("mallory has %d calls waiting, want the bound %d", n, bound)
	}
	s := waitFor(t, ada, "the requests within the bound", func(s approve.State) bool { return len(s.Pending) == bound })
	for _, r := range s.Pending {
		if !r.Shortened || len(r.Args) > events.MaxShownArgs+256 || strings.Contains(string(r.Args), big) {
			t.Fatalf("a request shows %d bytes of arguments (shortened %v), want at most about %d", len(r.Args), r.Shortened, events.MaxShownArgs)
		}
	}
	theirs := callIn(alice, "alice-1", "", "write_file", `{"file_path":"alice.md","content":"hi\n"}`)
	waitFor(t, ada, "alice's request", pending("alice-1"))
	if n := f.Executor.Pending("mallory"); n > bound {
		t.Errorf("mallory has %d calls waiting", n)
	}
	s, _ = ada.Snapshot()
	for _, r := range s.Pending {
		if _, err := ada.Answer(context.Background(), r.AnswerTo, approve.Answer{Outcome: events.Cancel}); err != nil {
			t.Fatal(err)
		}
	}
	for range bound {
		if res := result(t, results); errType(res) != events.ErrUserCancelled {
			t.Errorf("a call within the bound: %s", errType(res))
		}
	}
	if res := result(t, theirs); errType(res) != events.ErrUserCancelled {
		t.Errorf("alice's call: %s", errType(res))
	}
	testkit.Eventually(t, "mallory's waiting calls are counted down", func() bool { return f.Executor.Pending("mallory") == 0 })
}
