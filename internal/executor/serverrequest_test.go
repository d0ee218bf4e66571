package executor

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
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
)

// askingTool stands for a tool of an MCP server that, while it runs,
// makes a request of its client (tool.Call.Ask) with its arguments
// {"method", "params"}, and returns what came back: "answer: <result>",
// "refused <code>: <message>", or "no ask" when the call has none.
type askingTool struct {
	name, server string
	trusted      bool
}

func (a askingTool) Origin() (events.Source, string, bool) {
	return events.SourceMCP, a.server, a.trusted
}

func (a askingTool) Spec() events.ToolSpec {
	return events.ToolSpec{Name: a.name, Description: "Asks its client.", Kind: events.KindOther,
		Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (a askingTool) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	if call.Ask == nil {
		return &tool.Output{LLMContent: "no ask"}, nil
	}
	var args struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	json.Unmarshal(call.Args, &args)
	res, err := call.Ask(ctx, args.Method, args.Params)
	var rpc *events.RPCError
	switch {
	case errors.As(err, &rpc):
		return &tool.Output{LLMContent: fmt.Sprintf("refused %d: %s", rpc.Code, rpc.Message)}, nil
	case err != nil:
		return nil, err
	}
	return &tool.Output{LLMContent: "answer: " + string(res)}, nil
}

// hostAsking hosts an askingTool named name as a tool of MCP server
// server, trusted or not.
func (e *env) hostAsking(t *testing.T, name, server string, trusted bool) {
	t.Helper()
	if _, err := e.exec.Host(context.Background(), Scope{Source: events.SourceMCP, Server: server, Trust: trusted}, []tool.Tool{askingTool{name, server, trusted}}); err != nil {
		t.Fatal(err)
	}
	waitTool(t, e.exec, name)
}

// callAsking calls tool name, whose server asks method with params, as
// the env's client, taking server requests as take does (nil: none) and
// saying it can answer methods.
func (e *env) callAsking(t *testing.T, name, method, params string, methods []string, take func(*events.ServerRequest)) <-chan *events.Result {
	t.Helper()
	done := make(chan *events.Result, 1)
	go func() {
		args := fmt.Sprintf(`{"method":%q,"params":%s}`, method, params)
		inv := &events.Invocation{Header: events.Header{Sender: events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}},
			Tool: name, Args: json.RawMessage(args), ServerRequests: methods}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.client.InvokeAs(ctx, inv, &invoke.Watch{ServerRequest: take})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

func resultOf(t *testing.T, done <-chan *events.Result) *events.Result {
	t.Helper()
	select {
	case res := <-done:
		if res == nil {
			t.Fatal("no result")
		}
		return res
	case <-time.After(time.Minute):
		t.Fatal("the call did not end")
	}
	return nil
}

// answerServerRequestAs sends answer to req on the answer subject of role as and
// principal, and returns the executor's acknowledgement.
func answerServerRequestAs(t *testing.T, nc *nats.Conn, req *events.ServerRequest, as, principal string, answer events.Envelope) *events.ConfirmAck {
	t.Helper()
	return requestAck(t, nc, events.AnswerSubject(req.AnswerTo, as, principal), answer)
}

// TestServerRequestGoesToTheCallerAlone: a request the server makes
// during a call goes to the call's caller, with the server's name, the
// method and the params as sent; only the caller's own answer, for that
// call, on that request's token, reaches the server: an answer sent with
// another identity, naming another caller, on the approvers' subject, of
// another type, or for another call is refused, and the wait goes on.
func TestServerRequestGoesToTheCallerAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.hostAsking(t, "ask_user", "notes", true)
	asked := make(chan *events.ServerRequest, 1)
	params := `{"message":"Which repository?","requestedSchema":{"type":"object","properties":{"repo":{"type":"string"}}}}`
	done := e.callAsking(t, "ask_user", events.MethodElicitation, params, events.ServerRequestMethods, func(r *events.ServerRequest) { asked <- r })
	var req *events.ServerRequest
	select {
	case req = <-asked:
	case res := <-done:
		t.Fatalf("the call ended before its caller was asked: %s", res.LLMContent)
	case <-time.After(30 * time.Second):
		t.Fatal("the caller was not asked")
	}
	if req.Method != events.MethodElicitation || req.Server != "notes" || string(req.Params) != params || req.DeadlineMillis <= 0 {
		t.Fatalf("got the request %+v, want the server's elicitation as it sent it, with a deadline", req)
	}

	caller := events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}
	accept := json.RawMessage(`{"action":"accept","content":{"repo":"toolbus/toolbus"}}`)
	other := bustest.Connect(t, e.bus).Conn()
	for _, a := range []struct {
		name, as, principal string
		answer              events.Envelope
		refusal             string
	}{
		{"another identity", events.AnswerAsCaller, "mallory",
			&events.ServerAnswer{Header: events.Header{Sender: caller}, InvocationID: req.InvocationID, Result: accept}, `identity "mallory", not the caller's`},
		{"another caller named", events.AnswerAsCaller, events.Unproven,
			&events.ServerAnswer{Header: events.Header{Sender: events.Identity{ID: "agent:other"}}, InvocationID: req.InvocationID, Result: accept}, `names "agent:other"`},
		{"the approvers' subject", events.AnswerAsApprover, events.Unproven,
			&events.ServerAnswer{Header: events.Header{Sender: caller}, InvocationID: req.InvocationID, Result: accept}, "on the caller's subject"},
		{"an approval", events.AnswerAsCaller, events.Unproven,
			&events.ConfirmAnswer{Header: events.Header{Sender: events.AgentUser(caller)}, InvocationID: req.InvocationID, Outcome: events.ProceedOnce}, "not valid"},
		{"another call", events.AnswerAsCaller, events.Unproven,
			&events.ServerAnswer{Header: events.Header{Sender: caller}, InvocationID: "another-call", Result: accept}, `for invocation "another-call"`},
	} {
		ack := answerServerRequestAs(t, other, req, a.as, a.principal, a.answer)
		if ack.Accepted || !strings.Contains(ack.Reason, a.refusal) {
			t.Errorf("%s: accepted %v, %q; want refused: %q", a.name, ack.Accepted, ack.Reason, a.refusal)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.client.AnswerServerRequest(ctx, caller, req, accept, nil); err != nil {
		t.Fatalf("the caller's answer: %v", err)
	}
	if res := resultOf(t, done); res.LLMContent != "answer: "+string(accept) {
		t.Fatalf("the server got %q, want the caller's answer", res.LLMContent)
	}
	// The request is over: a second answer is heard by nobody.
	if err := e.client.AnswerServerRequest(ctx, caller, req, accept, nil); err == nil {
		t.Error("a second answer was taken")
	}
}

// TestServerRequestRefusedAtOnce: a request the caller cannot answer
// never reaches it, and the server hears so at once: the caller did not
// say it can answer the method, it takes no requests, or the policy
// refuses an untrusted server's elicitation. A client's error answer
// reaches the server as the client gave it.
func TestServerRequestRefusedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.hostAsking(t, "ask_trusted", "notes", true)
	e.hostAsking(t, "ask_untrusted", "stranger", false)
	seatApprover(t, e)
	never := func(r *events.ServerRequest) { t.Errorf("the caller was sent %s", r.Method) }
	sample := `{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10}`
	ask := `{"message":"Your API token?","requestedSchema":{"type":"object","properties":{"token":{"type":"string"}}}}`
	for _, tc := range []struct {
		name, tool, method, params string
		methods                    []string
		take                       func(*events.ServerRequest)
		want                       string
	}{
		{"no methods", "ask_trusted", events.MethodSampling, sample, nil, never, "no ask"},
		{"no taker", "ask_trusted", events.MethodSampling, sample, events.ServerRequestMethods, nil, "no ask"},
		{"another method", "ask_trusted", events.MethodElicitation, ask, []string{events.MethodSampling}, never,
			fmt.Sprintf("refused %d: toolbus: the caller's client cannot answer elicitation/create", events.CodeMethodNotFound)},
		{"untrusted elicitation", "ask_untrusted", events.MethodElicitation, ask, events.ServerRequestMethods, never,
			fmt.Sprintf(`refused %d: toolbus: the policy refuses the request: MCP server "stranger" is not trusted`, events.CodeInvalidRequest)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := resultOf(t, e.callAsking(t, tc.tool, tc.method, tc.params, tc.methods, tc.take))
			if !strings.HasPrefix(res.LLMContent, tc.want) {
				t.Fatalf("the server got %q, want %q", res.LLMContent, tc.want)
			}
		})
	}
	t.Run("the client's error", func(t *testing.T) {
		caller := events.Identity{ID: "agent:test", Role: "agent", Session: "s1"}
		res := resultOf(t, e.callAsking(t, "ask_untrusted", events.MethodSampling, sample, events.ServerRequestMethods, func(r *events.ServerRequest) {
			go func() {
				err := e.client.AnswerServerRequest(context.Background(), caller, r, nil, &events.RPCError{Code: -1, Message: "the user rejected the request"})
				if err != nil {
					t.Error(err)
				}
			}()
		}))
		if want := "refused -1: the user rejected the request"; res.LLMContent != want {
			t.Fatalf("the server got %q, want %q", res.LLMContent, want)
		}
	})
}

// seatApprover answers every confirmation request with proceed_once, so
// that an untrusted server's tool runs.
func seatApprover(t *testing.T, e *env) {
	t.Helper()
	startApprover(t, e.bus, answer(events.ProceedOnce))
}
