package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// Server requests: an MCP server that serves a call may ask its client
// something (sampling/createMessage, elicitation/create). The client that
// can answer is the caller's, and only the caller's: the request goes to
// the call's reply subject alone, which the bus made for the caller, and
// the answer is taken only from the caller's principal, on a token made
// for this one request (events.ServerRequest). Anything else, and a
// request the caller did not say it can answer, the policy refuses or no
// answer comes for, fails the server's request: the server is answered
// with an error, never with a guess.

// Bounds of a call's server requests: at most maxOpenServerRequests
// waiting at once (one more is refused at once), and the first
// maxRecordedServerRequests of them recorded as steps.
const (
	maxOpenServerRequests     = 4
	maxRecordedServerRequests = 20
)

// asker is the call's tool.Call.Ask and the methods it takes: no Ask
// when the caller can answer no server request, or could not be sent one
// (no reply subject).
func (c *call) asker() (ask func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error), methods []string) {
	for _, m := range events.ServerRequestMethods {
		if slices.Contains(c.inv.ServerRequests, m) {
			methods = append(methods, m)
		}
	}
	if c.reply == "" || len(methods) == 0 {
		return nil, nil
	}
	var open, asked atomic.Int32
	return func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		if open.Add(1) > maxOpenServerRequests {
			open.Add(-1)
			return nil, &events.RPCError{Code: events.CodeInvalidRequest,
				Message: fmt.Sprintf("toolbus: this call has %d requests of its server waiting for the caller already, as many as one call may", maxOpenServerRequests)}
		}
		defer open.Add(-1)
		record := asked.Add(1) <= maxRecordedServerRequests
		res, err := c.askCaller(ctx, method, params)
		if record {
			what := method + " answered by the caller"
			if err != nil {
				what = method + " failed: " + err.Error()
			}
			c.step("server-request", what)
		}
		return res, err
	}, methods
}

// askCaller puts the server's request to the caller and waits for its
// answer, until ctx ends, the call ends, or ConfirmTimeout passes: a
// person may be the one to answer.
func (c *call) askCaller(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	e := c.e
	server := c.tool.Server
	if c.host != nil {
		server = c.host.judged.Server
	}
	if !slices.Contains(c.tc.ServerRequests, method) {
		return nil, &events.RPCError{Code: events.CodeMethodNotFound,
			Message: fmt.Sprintf("toolbus: the caller's client cannot answer %s (it did not declare it)", method)}
	}
	if len(params) > events.MaxServerRequestParams {
		return nil, &events.RPCError{Code: events.CodeInvalidRequest,
			Message: fmt.Sprintf("toolbus: the request's params are %d bytes; at most %d are passed on", len(params), events.MaxServerRequestParams)}
	}
	if err := c.serverRequestAllowed(ctx, method, params); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ConfirmTimeout)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	deadline, _ := ctx.Deadline()
	req := &events.ServerRequest{Header: c.header(), InvocationID: c.inv.ID, Server: server, Method: method, Params: params,
		AnswerTo: events.NewAnswerTo(), DeadlineMillis: max(time.Until(deadline).Milliseconds(), 0)}
	data, err := events.Encode(req)
	if err != nil {
		return nil, &events.RPCError{Code: events.CodeInvalidRequest, Message: "toolbus: the request cannot be passed on: " + err.Error()}
	}
	answers, err := e.nc.SubscribeSync(req.AnswerTo + ".>")
	if err != nil {
		return nil, fmt.Errorf("toolbus: %w", err)
	}
	defer answers.Unsubscribe()
	m := nats.NewMsg(c.reply)
	m.Header.Set(events.KindHeader, events.KindServerRequest)
	m.Header.Set(events.ExecutorHeader, e.id.ID)
	m.Data = data
	if err := e.nc.PublishMsg(m); err != nil {
		return nil, fmt.Errorf("toolbus: the request did not reach the caller: %w", err)
	}
	for {
		msg, err := answers.NextMsgWithContext(ctx)
		if err != nil {
			if c.ctx.Err() != nil {
				return nil, &events.RPCError{Code: events.CodeRequestTimeout, Message: "toolbus: the call ended before the caller answered"}
			}
			return nil, &events.RPCError{Code: events.CodeRequestTimeout, Message: "toolbus: the caller did not answer in time"}
		}
		answer, why := c.serverAnswer(req, msg)
		c.ack(msg, answer != nil, why)
		if answer == nil {
			e.log.Warn("an answer to a server's request was refused", "invocation", c.inv.ID, "reason", why)
			continue
		}
		if answer.Error != nil {
			return nil, answer.Error
		}
		return answer.Result, nil
	}
}

// serverRequestAllowed asks the policy whether the server's request may
// reach the caller (data.toolbus.server_request_denied).
func (c *call) serverRequestAllowed(ctx context.Context, method string, params json.RawMessage) error {
	if c.host == nil {
		return &events.RPCError{Code: events.CodeInvalidRequest, Message: "toolbus: the call is not run here"}
	}
	t := c.host.judged
	t.Name = c.tool.Name
	reasons, err := c.pol.ServerRequestDenied(ctx, t, c.inv.Sender, method, params)
	if err != nil {
		return &events.RPCError{Code: events.CodeInvalidRequest, Message: "toolbus: the policy could not judge the request, so it is refused: " + err.Error()}
	}
	if len(reasons) > 0 {
		return &events.RPCError{Code: events.CodeInvalidRequest, Message: "toolbus: the policy refuses the request: " + strings.Join(reasons, "; ")}
	}
	return nil
}

// serverAnswer is the answer msg holds to req when it is valid, for this
// call, and from this call's caller: sent on the caller's answer subject
// with the principal that sent the invocation, naming the invocation's
// caller. Otherwise nil, and why.
func (c *call) serverAnswer(req *events.ServerRequest, msg *nats.Msg) (*events.ServerAnswer, string) {
	answer, err := events.Decode[events.ServerAnswer](msg.Data)
	if err != nil {
		return nil, "the answer is not valid: " + err.Error()
	}
	if answer.InvocationID != c.inv.ID {
		return nil, fmt.Sprintf("the answer is for invocation %q, not %q", answer.InvocationID, c.inv.ID)
	}
	if err := c.bindServerAnswer(req, msg.Subject, answer.Sender); err != nil {
		return nil, err.Error()
	}
	return answer, ""
}

// bindServerAnswer checks who answered a server's request against the
// subject it came on. Only the call's caller answers: on the caller's
// subject, with the principal the invocation came with (which the bus
// proves where it enforces identities, and which nobody else may then
// use), naming the invocation's caller. Without identities the principal
// is a claim, as every sender is.
func (c *call) bindServerAnswer(req *events.ServerRequest, subject string, who events.Identity) error {
	as, principal, _, err := events.SplitAnswerSubject(req.AnswerTo, subject)
	switch {
	case err != nil:
		return err
	case as != events.AnswerAsCaller:
		return errors.New("a server's request is answered by the call's caller, on the caller's subject")
	case principal != c.principal:
		return fmt.Errorf("the answer was sent with the identity %q, not the caller's", principal)
	case who.ID != c.inv.Sender.ID:
		return fmt.Errorf("the answer names %q, not the call's caller %q", who.ID, c.inv.Sender.ID)
	}
	return nil
}
