package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// askingTool is a tool of a trusted MCP server that asks its client's user
// a question while it runs (tool.Call.Ask) and returns the answer.
type askingTool struct{}

func (askingTool) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "ask_user", Description: "Asks the user.", Kind: events.KindOther, Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (askingTool) Origin() (events.Source, string, bool) { return events.SourceMCP, "notes", true }

func (askingTool) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	if call.Ask == nil {
		return &tool.Output{LLMContent: "no ask"}, nil
	}
	res, err := call.Ask(ctx, events.MethodElicitation, json.RawMessage(`{"message":"Which repository?"}`))
	var rpc *events.RPCError
	if errors.As(err, &rpc) {
		return &tool.Output{LLMContent: fmt.Sprintf("refused %d: %s", rpc.Code, rpc.Message)}, nil
	}
	if err != nil {
		return nil, err
	}
	return &tool.Output{LLMContent: "answer: " + string(res)}, nil
}

// A backend server's request during a facade's call reaches that facade
// alone, and only the facade's own answer reaches the server: another
// facade answering on its own subject, an approver on its own, and an
// agent on any are refused, by the executor or by the bus.
func TestABackendsRequestIsAnsweredByItsCallerAlone(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.executor.Host(ctx, executor.Scope{Source: events.SourceMCP, Server: "notes", Trust: true}, []tool.Tool{askingTool{}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "ask_user is listed", func() bool {
		_, ok := f.executor.Catalog().GetTool("ask_user")
		return ok
	})
	fac := f.as(t, "facade")
	client := invoke.NewClient(fac.Conn(), events.Identity{ID: "facade", Role: "agent"}, fac.Principal())
	t.Cleanup(func() { client.Close() })
	caller := events.Identity{ID: "facade/agent:claude-code", Role: "agent", Session: "s1"}
	asked := make(chan *events.ServerRequest, 1)
	done := make(chan *events.Result, 1)
	go func() {
		inv := &events.Invocation{Header: events.Header{Sender: caller}, Tool: "ask_user", Args: json.RawMessage(`{}`),
			ServerRequests: []string{events.MethodElicitation}}
		res, err := client.InvokeAs(ctx, inv, &invoke.Watch{ServerRequest: func(r *events.ServerRequest) { asked <- r }})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var req *events.ServerRequest
	select {
	case req = <-asked:
	case res := <-done:
		t.Fatalf("the call ended before its caller was asked: %+v", res)
	case <-ctx.Done():
		t.Fatal("the caller was not asked")
	}

	accept := json.RawMessage(`{"action":"accept","content":{"repo":"elsewhere"}}`)
	answer := func(nc *nats.Conn, subject string) *events.ConfirmAck {
		t.Helper()
		data, _ := events.Encode(&events.ServerAnswer{Header: events.Header{Sender: caller}, InvocationID: req.InvocationID, Result: accept})
		m, err := nc.RequestWithContext(ctx, subject, data)
		if err != nil {
			t.Fatalf("answer on %s: %v", subject, err)
		}
		ack, err := events.Decode[events.ConfirmAck](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	// Another facade, on the subject it may send on.
	if ack := answer(f.as(t, "facade2").Conn(), events.AnswerSubject(req.AnswerTo, events.AnswerAsCaller, "facade2")); ack.Accepted || !strings.Contains(ack.Reason, `"facade2", not the caller's`) {
		t.Errorf("another facade's answer: %+v", ack)
	}
	// An approver, on its own subject.
	if ack := answer(f.as(t, "eve").Conn(), events.AnswerSubject(req.AnswerTo, events.AnswerAsApprover, "eve")); ack.Accepted || !strings.Contains(ack.Reason, "on the caller's subject") {
		t.Errorf("an approver's answer: %+v", ack)
	}
	// An agent may send on no caller's subject, its own or the facade's.
	mallory := f.as(t, "mallory").Conn()
	for _, p := range []string{"mallory", "facade"} {
		subject := events.AnswerSubject(req.AnswerTo, events.AnswerAsCaller, p)
		mallory.Publish(subject, []byte(`{}`))
		f.violated(t, "mallory", "answer a server's request as "+p, subject)
	}

	if err := client.AnswerServerRequest(ctx, caller, req, json.RawMessage(`{"action":"accept","content":{"repo":"toolbus"}}`), nil); err != nil {
		t.Fatalf("the caller's answer: %v", err)
	}
	select {
	case res := <-done:
		if res == nil || res.LLMContent != `answer: {"action":"accept","content":{"repo":"toolbus"}}` {
			t.Fatalf("the server got %+v, want the caller's answer", res)
		}
	case <-ctx.Done():
		t.Fatal("the call did not end")
	}
	f.clean(t, "facade", "executor")
}
