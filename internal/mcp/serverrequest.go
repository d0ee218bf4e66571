package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcptransport "github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
)

// A server's own requests. While it serves a call, a server may ask its
// client for a completion of the client's model (sampling/createMessage)
// or for an answer of the client's user (elicitation/create). toolbus is
// the server's client, and the client that can answer is the caller's: the
// request goes to the call (tool.Call.Ask), which puts it to its caller
// over the bus. A request names no call, so toolbus ties it to one by the
// way it came, as it ties log messages (session.logged):
//
//   - over streamable HTTP, a request the server sends on a call's own
//     response stream is that call's: mcp-go's client hands it over with a
//     context made from the call's, which carries the call's token
//     (callToken);
//   - on a session of one caller (callersession.go), or over stdio, a
//     request that comes elsewhere goes to the one call in flight, and to
//     none when there are several.
//
// A request toolbus cannot tie to one call, or whose call's caller cannot
// answer it, is refused at once with a JSON-RPC error: another caller must
// never be asked, and a server must not wait for an answer that will not
// come.

// callToken is the context key under which serverTool.Run puts the token
// of a call: a request mcp-go's client hands over with a context made from
// the call's names the call so.
type callToken struct{}

// serverAsks are, for each call in flight on a session by its token, the
// way to its caller's client (tool.Call.Ask), or nil when the caller can
// answer nothing.
type serverAsks struct {
	mu sync.Mutex
	m  map[string]askFunc
	// oneCaller: every call on the session is one caller's, so that a
	// request that comes on no call's stream goes to the one call in
	// flight.
	oneCaller bool
}

type askFunc = func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)

// watchAsks lets the requests tied to the call of token reach ask (nil:
// none may) until done is called.
func (s *session) watchAsks(token string, ask askFunc) (done func()) {
	a := &s.asking
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]askFunc{}
	}
	a.m[token] = ask
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.m, token)
		a.mu.Unlock()
	}
}

// askable declares to a server that its requests of methods will be
// answered; on a caller session (callersession.go) they are what the
// caller's client declared.
func askable(methods []string) client.ClientOption {
	var caps mcp.ClientCapabilities
	for _, m := range methods {
		switch m {
		case events.MethodSampling:
			caps.Sampling = &mcp.SamplingCapability{}
		case events.MethodElicitation:
			caps.Elicitation = &mcp.ElicitationCapability{Form: &struct{}{}}
		}
	}
	return client.WithClientCapabilities(caps)
}

// answerRequests has the session answer the server's requests itself, in
// place of mcp-go's client, which would decode their params into its own
// types (a sampling request's _meta, or a field it does not know, would
// be lost) and answer any error with -32603.
func (s *session) answerRequests() {
	if t, ok := s.client.GetTransport().(mcptransport.BidirectionalInterface); ok {
		t.SetRequestHandler(s.serverRequest)
	}
}

// answerMargin is the time kept, before the deadline mcp-go's client sets
// a request it hands over, to send the server the answer (or the error).
// Over streamable HTTP that deadline is 30 seconds after the request came
// (client/transport/streamable_http.go, handleIncomingRequest), and the
// answer is sent under the same context: one given at the deadline is
// never sent, and the server would wait for its own timeout. So a request
// nobody answered fails about 28 seconds after it came, however long a
// person would take.
const answerMargin = 2 * time.Second

// serverRequest answers one request of the server.
func (s *session) serverRequest(ctx context.Context, req mcptransport.JSONRPCRequest) (*mcptransport.JSONRPCResponse, error) {
	switch req.Method {
	case string(mcp.MethodPing):
		return mcptransport.NewJSONRPCResultResponse(req.ID, json.RawMessage(`{}`)), nil
	case events.MethodSampling, events.MethodElicitation:
	default:
		return mcptransport.NewJSONRPCErrorResponse(req.ID, mcp.METHOD_NOT_FOUND, "toolbus does not answer "+req.Method, nil), nil
	}
	ask, why := s.askerOf(ctx)
	if ask == nil {
		return mcptransport.NewJSONRPCErrorResponse(req.ID, events.CodeMethodNotFound, "toolbus: "+why, nil), nil
	}
	params, err := json.Marshal(req.Params)
	if err != nil {
		return mcptransport.NewJSONRPCErrorResponse(req.ID, mcp.INVALID_PARAMS, "toolbus: the params do not encode: "+err.Error(), nil), nil
	}
	if string(params) == "null" {
		params = nil
	}
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-answerMargin))
		defer cancel()
	}
	result, err := ask(ctx, req.Method, params)
	if err != nil {
		var rpc *events.RPCError
		if errors.As(err, &rpc) {
			var data any
			if len(rpc.Data) > 0 {
				data = rpc.Data
			}
			return mcptransport.NewJSONRPCErrorResponse(req.ID, rpc.Code, rpc.Message, data), nil
		}
		return mcptransport.NewJSONRPCErrorResponse(req.ID, mcp.INTERNAL_ERROR, err.Error(), nil), nil
	}
	return mcptransport.NewJSONRPCResultResponse(req.ID, result), nil
}

// askerOf is the way to the client of the call a request that came with
// ctx is tied to, or nil and why there is none.
func (s *session) askerOf(ctx context.Context) (askFunc, string) {
	a := &s.asking
	if token, ok := ctx.Value(callToken{}).(string); ok {
		a.mu.Lock()
		ask := a.m[token]
		a.mu.Unlock()
		if ask == nil {
			return nil, "the caller of the call this request came during cannot answer it"
		}
		return ask, ""
	}
	a.mu.Lock()
	oneCaller := a.oneCaller
	a.mu.Unlock()
	if s.tapped && !oneCaller {
		return nil, "the request came on no call's stream, so it names no call, and this session serves several callers"
	}
	// One stream, or one caller: the one call in flight, if there is
	// one alone.
	s.inflightMu.Lock()
	n, token := len(s.inflight), ""
	for t := range s.inflight {
		token = t
	}
	s.inflightMu.Unlock()
	if n != 1 {
		return nil, "the request names no call, and there is not one call in flight to tie it to"
	}
	a.mu.Lock()
	ask := a.m[token]
	a.mu.Unlock()
	if ask == nil {
		return nil, "the caller of the call in flight cannot answer it"
	}
	return ask, ""
}
