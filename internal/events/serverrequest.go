package events

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Server requests. An MCP server may make a request of its own to its
// client while it serves a call: ask the client's model for a completion
// (sampling/createMessage) or the client's user for information
// (elicitation/create). Through toolbus the server's client is the
// executor, and the client that can answer is the caller's: the executor
// sends the request to the call's reply subject alone, as a ServerRequest
// of kind KindServerRequest, and the caller answers it with a
// ServerAnswer sent as a request to AnswerSubject(AnswerTo,
// AnswerAsCaller, its principal); the executor acknowledges it with a
// ConfirmAck and hands the answer to the server.
//
// Only the caller of the call may answer, and only the request it was
// sent: the token is the request's own, and the executor takes an answer
// only from the principal that sent the invocation (the bus proves it on
// the answer subject). A caller that did not say it can answer the
// method (Invocation.ServerRequests) is never sent it: the server gets
// an error at once.

// The server requests a caller may be sent (Invocation.ServerRequests).
const (
	MethodSampling    = "sampling/createMessage"
	MethodElicitation = "elicitation/create"
)

// ServerRequestMethods are the methods a server's request may have.
var ServerRequestMethods = []string{MethodSampling, MethodElicitation}

// IsServerRequestMethod reports whether method is one of
// ServerRequestMethods.
func IsServerRequestMethod(method string) bool { return slices.Contains(ServerRequestMethods, method) }

// MaxServerRequestParams bounds the params of a server's request an
// executor passes on, in bytes: the request is one message.
const MaxServerRequestParams = 512 << 10

// ServerRequest is a request an MCP server made of its client while it
// served the call InvocationID, sent by the executor to the call's reply
// subject alone (kind KindServerRequest). It is the caller's alone and is
// not recorded: the call's steps say that one was made and how it ended.
type ServerRequest struct {
	Header
	InvocationID string `json:"invocationId"`
	// Server is the MCP server that made the request, as configured.
	Server string `json:"server"`
	// Method is one of ServerRequestMethods.
	Method string `json:"method"`
	// Params are the request's params as the server sent them.
	Params json.RawMessage `json:"params,omitempty"`
	// AnswerTo is the request's own token (events.NewAnswerTo): the
	// answer goes to AnswerSubject(AnswerTo, AnswerAsCaller, principal).
	AnswerTo string `json:"answerTo"`
	// DeadlineMillis is how long from now the executor waits for the
	// answer; the server is then told the request failed. A span, not a
	// time, so that the caller's clock need not agree.
	DeadlineMillis int64 `json:"deadlineMillis"`
}

// EnvelopeType implements Envelope.
func (*ServerRequest) EnvelopeType() string { return "tool.server.request" }

// Validate implements Envelope.
func (r *ServerRequest) Validate() error {
	typ := r.EnvelopeType()
	if err := r.header().validateAbout(typ, r.InvocationID); err != nil {
		return err
	}
	switch {
	case !IsServerRequestMethod(r.Method):
		return invalid(typ, "method %q is not a server request toolbus passes on", r.Method)
	case r.AnswerTo == "":
		return invalid(typ, "answerTo is empty")
	case len(r.Params) > 0 && !isJSONObject(r.Params):
		return invalid(typ, "params is not a JSON object")
	case len(r.Params) > MaxServerRequestParams:
		return invalid(typ, "params are %d bytes; at most %d", len(r.Params), MaxServerRequestParams)
	case r.DeadlineMillis < 0:
		return invalid(typ, "deadlineMillis is negative")
	}
	return nil
}

// ForInvocation is the id of the invocation whose server made the request
// (InvocationID).
func (r *ServerRequest) ForInvocation() string { return r.InvocationID }

// ServerAnswer answers a ServerRequest: the result the caller's client
// gave, as it gave it, or the JSON-RPC error it answered with. Its Sender
// is the call's caller.
type ServerAnswer struct {
	Header
	InvocationID string `json:"invocationId"`
	// Result is the client's result (a CreateMessageResult, an
	// ElicitResult), a JSON object.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the client's error, or the caller's: it could not ask.
	Error *RPCError `json:"error,omitempty"`
}

// RPCError is a JSON-RPC error, as a client answered a request.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error implements error: a request answered with e failed so.
func (e *RPCError) Error() string { return fmt.Sprintf("%s (%d)", e.Message, e.Code) }

// JSON-RPC error codes toolbus answers a server's request with when it
// does not reach the caller's client, or reaches it and is not answered.
const (
	// CodeMethodNotFound: the caller's client cannot answer the method
	// (it did not declare the capability, or no caller can be found).
	CodeMethodNotFound = -32601
	// CodeInvalidRequest: the policy, or a bound, refuses the request.
	CodeInvalidRequest = -32600
	// CodeRequestTimeout: no answer came before the deadline, or the
	// call ended first.
	CodeRequestTimeout = -32001
)

// MaxServerAnswer bounds a ServerAnswer's result and error data, in
// bytes.
const MaxServerAnswer = 512 << 10

// EnvelopeType implements Envelope.
func (*ServerAnswer) EnvelopeType() string { return "tool.server.answer" }

// Validate implements Envelope.
func (a *ServerAnswer) Validate() error {
	typ := a.EnvelopeType()
	if err := a.header().validateAbout(typ, a.InvocationID); err != nil {
		return err
	}
	switch {
	case (len(a.Result) > 0) == (a.Error != nil):
		return invalid(typ, "an answer has a result or an error, and not both")
	case len(a.Result) > 0 && !isJSONObject(a.Result):
		return invalid(typ, "result is not a JSON object")
	case len(a.Result) > MaxServerAnswer:
		return invalid(typ, "result is %d bytes; at most %d", len(a.Result), MaxServerAnswer)
	case a.Error != nil && len(a.Error.Data)+len(a.Error.Message) > MaxServerAnswer:
		return invalid(typ, "the error is more than %d bytes", MaxServerAnswer)
	}
	return nil
}

// ForInvocation is the id of the invocation whose server's request is
// answered (InvocationID).
func (a *ServerAnswer) ForInvocation() string { return a.InvocationID }
