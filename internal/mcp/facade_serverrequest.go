package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/events"
)

// A backend server's requests, at the facade. An MCP server serving a call
// may ask its client something (sampling/createMessage,
// elicitation/create); the executor sends the request to the call's
// caller, here, when the caller said its client can answer it
// (Invocation.ServerRequests: what the client declared). The facade puts it
// to the client of the call, as a request of its own, and sends the
// client's answer back as the caller (invoke.Client.AnswerServerRequest),
// which the executor takes from the caller's principal alone.
//
// A client of protocol 2026-07-28 cannot be sent a request of the
// server's own. Where the facade holds its call across requests
// (facade_mrtr.go: a client that declared elicitation), a backend's
// request is a round of the call: an input-required result asks it, and
// the client's retry carries the answer. Any other call of such a client
// says it takes no requests, and a backend's request during it is refused
// at once.

// serverRequestsOf are the requests of a backend server the client of ctx
// can be sent as requests of the facade's own: those it declared, for a
// client of protocol 2025-11-25 or before.
func serverRequestsOf(ctx context.Context) []string {
	if mcpserver.IsModernRequest(ctx) {
		return nil
	}
	return declaredRequests(ctx)
}

// declaredRequests are the requests of a backend server the client of
// ctx declared it can answer (sampling, elicitation).
func declaredRequests(ctx context.Context) []string {
	s, ok := mcpserver.ClientSessionFromContext(ctx).(mcpserver.SessionWithClientInfo)
	if !ok {
		return nil
	}
	caps := s.GetClientCapabilities()
	var methods []string
	if caps.Sampling != nil {
		methods = append(methods, events.MethodSampling)
	}
	if caps.Elicitation != nil {
		methods = append(methods, events.MethodElicitation)
	}
	return methods
}

// serverRequestWatch has the requests of inv's backend server put to the
// client of ctx: it returns the Watch.ServerRequest that does, and a wait
// that ends the requests still open and waits for them. Call wait when
// the call has ended.
func (f *Facade) serverRequestWatch(ctx context.Context, inv *events.Invocation) (take func(*events.ServerRequest), wait func()) {
	var asking sync.WaitGroup
	callCtx, endCall := context.WithCancel(ctx)
	take = func(req *events.ServerRequest) {
		asking.Go(func() { f.putServerRequest(callCtx, inv, req) })
	}
	return take, func() {
		endCall()
		asking.Wait()
	}
}

// answerTimeout bounds sending the executor an answer.
const answerTimeout = 10 * time.Second

// putServerRequest puts req, a request of the server serving inv, to the
// client of ctx and answers it with what the client answered, or with why
// it could not be asked.
func (f *Facade) putServerRequest(ctx context.Context, inv *events.Invocation, req *events.ServerRequest) {
	// The request came to this call's inbox; one for another call is
	// not answered (the executor answers its server itself when no
	// answer comes).
	if req.InvocationID != inv.ID {
		f.log.Warn("mcp facade: a server's request for another call came to this one; ignored", "invocation", inv.ID, "request", req.InvocationID)
		return
	}
	askCtx, cancel := context.WithTimeout(ctx, time.Duration(req.DeadlineMillis)*time.Millisecond)
	result, rpcErr := f.askClient(askCtx, req)
	cancel()
	if ctx.Err() != nil {
		return // the call is over: nobody waits for the answer
	}
	f.answerServerRequest(ctx, inv, req, result, rpcErr)
}

// answerServerRequest sends the executor the answer to req, a request of
// the server serving inv: result, or rpcErr.
func (f *Facade) answerServerRequest(ctx context.Context, inv *events.Invocation, req *events.ServerRequest, result json.RawMessage, rpcErr *events.RPCError) {
	answerCtx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	if err := f.invoker(inv.Sender).AnswerServerRequest(answerCtx, inv.Sender, req, result, rpcErr); err != nil && ctx.Err() == nil {
		f.log.Info("mcp facade: the client's answer to a server's request was not taken", "invocation", inv.ID, "method", req.Method, "err", err)
	}
}

// serverInputRequired is the reply that puts r, a request of the server
// serving hc, to a client of protocol 2026-07-28 as round of hc; or the
// error to answer the server with when r cannot be put so.
func (f *Facade) serverInputRequired(hc *heldCall, round int, r *events.ServerRequest) (heldReply, *events.RPCError) {
	st := hc.state
	st.Round, st.Expires = round, time.Now().Add(f.held.life).Unix()
	b := mcpserver.NewInputRequestBuilder(f.held.seal(st))
	params := r.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	switch r.Method {
	case events.MethodSampling:
		var p mcp.CreateMessageParams
		if err := json.Unmarshal(params, &p); err != nil {
			return heldReply{}, &events.RPCError{Code: mcp.INVALID_PARAMS, Message: "toolbus: the sampling request does not decode: " + err.Error()}
		}
		b.Sample(serverInput, p)
	case events.MethodElicitation:
		var p mcp.ElicitationParams
		if err := json.Unmarshal(params, &p); err != nil {
			return heldReply{}, &events.RPCError{Code: mcp.INVALID_PARAMS, Message: "toolbus: the elicitation request does not decode: " + err.Error()}
		}
		b.Elicit(serverInput, p)
	default:
		return heldReply{}, &events.RPCError{Code: events.CodeMethodNotFound, Message: "toolbus: " + r.Method + " is not put to clients"}
	}
	ask := b.ToolResult().MultiRoundTripResult
	return heldReply{ask: &ask, invocation: hc.inv.ID}, nil
}

// answerHeldServerRequest takes a retry of a held call whose current
// round put server, a request of its backend server, to the client: the
// client's answer goes to the server, and the call is waited for again.
// A retry with no answer is asked again.
func (f *Facade) answerHeldServerRequest(ctx context.Context, req heldRequest, hc *heldCall, round int, server *events.ServerRequest) (heldReply, error) {
	resp, ok := mcpserver.InputResponse(req.InputResponses, serverInput)
	if !ok {
		select {
		case <-hc.done:
		default:
			if res, rpcErr := f.serverInputRequired(hc, round, server); rpcErr == nil {
				return res, nil
			}
		}
		return f.awaitHeld(ctx, req, hc)
	}
	hc.mu.Lock()
	if hc.server == server {
		hc.server = nil
	}
	hc.mu.Unlock()
	if raw, err := json.Marshal(resp); err != nil || !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
		f.answerServerRequest(ctx, hc.inv, server, nil, &events.RPCError{Code: mcp.INVALID_PARAMS, Message: "the client's answer is not a JSON object"})
	} else {
		f.answerServerRequest(ctx, hc.inv, server, raw, nil)
	}
	return f.awaitHeld(ctx, req, hc)
}

// askClient puts req to the client of ctx: its result as JSON, or the
// error to answer with.
func (f *Facade) askClient(ctx context.Context, req *events.ServerRequest) (json.RawMessage, *events.RPCError) {
	params := req.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	var (
		result any
		err    error
	)
	switch req.Method {
	case events.MethodSampling:
		var p mcp.CreateMessageParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &events.RPCError{Code: mcp.INVALID_PARAMS, Message: "toolbus: the sampling request does not decode: " + err.Error()}
		}
		result, err = f.srv.RequestSampling(ctx, mcp.CreateMessageRequest{
			Request: mcp.Request{Method: string(mcp.MethodSamplingCreateMessage)}, CreateMessageParams: p})
	case events.MethodElicitation:
		var p mcp.ElicitationParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &events.RPCError{Code: mcp.INVALID_PARAMS, Message: "toolbus: the elicitation request does not decode: " + err.Error()}
		}
		result, err = f.srv.RequestElicitation(ctx, mcp.ElicitationRequest{
			Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)}, Params: p})
	default:
		return nil, &events.RPCError{Code: events.CodeMethodNotFound, Message: "toolbus: " + req.Method + " is not put to clients"}
	}
	if err != nil {
		code := mcp.INTERNAL_ERROR
		if ctx.Err() != nil {
			code = events.CodeRequestTimeout
		}
		return nil, &events.RPCError{Code: code, Message: fmt.Sprintf("the client did not answer %s: %v", req.Method, err)}
	}
	data, err := json.Marshal(result)
	if err != nil {
		return nil, &events.RPCError{Code: mcp.INTERNAL_ERROR, Message: "toolbus: the client's answer does not encode: " + err.Error()}
	}
	return data, nil
}
