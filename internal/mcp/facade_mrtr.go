package mcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
)

// Approval for clients of protocol 2026-07-28 and later. Such a client
// cannot be sent a request of the server's own (elicitation/create): a
// server that needs its user returns an "input required" result naming
// what to ask, and the client asks its user and sends the same request
// (tools/call, prompts/get or resources/read) again with the answer and
// the state the result carried (SEP-2322).
//
// A call that waits for an approval cannot end with the first request, so
// the facade holds it: the call runs on the bus on the facade's own
// context, the first request returns the question, and the retry finds the
// call by its state, sends the user's answer as the older generation's
// elicitation does (facade_confirm.go) and waits for the result. Approvers
// on tool.confirm may answer meanwhile, as ever: the first answer decides.
//
// The state the client echoes is sealed with a key of this facade (an
// HMAC): a client cannot forge or alter it to answer another call, and a
// retry must be of the same tool, with the same arguments, by the same
// caller (whose principal names the authenticated client) on the same
// MCP session. The call's answer subject never leaves the facade.

// approvalInput is the key of the approval in an input-required result,
// serverInput that of a backend server's own request
// (facade_serverrequest.go).
const (
	approvalInput = "toolbus_approval"
	serverInput   = "toolbus_server_request"
)

const (
	// maxHeldCalls bounds the calls this facade holds for clients that
	// were asked and have not come back.
	maxHeldCalls = 256
	// heldEnded is how long a held call that ended keeps its result for
	// the client's retry.
	heldEnded = 10 * time.Minute
	// heldStateLife bounds how long a sealed state is honoured: longer
	// than any confirmation waits.
	heldStateLife = time.Hour
)

// heldCall is a call of a 2026-07-28 client held across its requests.
type heldCall struct {
	inv    *events.Invocation
	state  heldState // what every sealed state of this call names, but the round
	cancel context.CancelFunc
	asks   chan *events.ConfirmRequest
	// serverAsks are the requests of the backend server serving the
	// call, each put to the client as a round of its own.
	serverAsks chan *events.ServerRequest
	done       chan struct{}
	res        *events.Result
	err        error

	mu       sync.Mutex
	round    int                    // the rounds the client was asked
	asking   *events.ConfirmRequest // the request of the last round
	server   *events.ServerRequest  // or the server's request it was
	progress func(string)           // to the request that waits on the call now
	log      func(json.RawMessage)  // its server's log messages, to that request
	expiry   *time.Timer            // drops the call once ended and not fetched
}

// heldState is what a sealed request state says.
type heldState struct {
	Invocation string `json:"i"`
	Round      int    `json:"r"`
	Tool       string `json:"t"`
	Args       string `json:"a"` // SHA-256 of the canonical arguments
	Caller     string `json:"c"`
	// Client is the client the request's credential named.
	Client string `json:"k,omitempty"`
	// Session is the MCP session the request came on, when it has one
	// ("" for a client without sessions): an answer from another
	// session, the same client's included, answers nothing.
	Session string `json:"s,omitempty"`
	Expires int64  `json:"e"` // Unix seconds
}

// heldCalls are the calls a facade holds, and the key it seals their
// states with.
type heldCalls struct {
	key  [32]byte
	life time.Duration   // of a sealed state: heldStateLife
	ctx  context.Context // the facade's: ends with Close
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu    sync.Mutex
	calls map[string]*heldCall
}

func newHeldCalls() *heldCalls {
	h := &heldCalls{calls: map[string]*heldCall{}, life: heldStateLife}
	_, _ = rand.Read(h.key[:]) // crypto/rand.Read never fails (Go 1.24)
	h.ctx, h.stop = context.WithCancel(context.Background())
	return h
}

// close gives up every held call and waits until each has ended.
func (h *heldCalls) close() {
	h.stop()
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, hc := range h.calls {
		hc.mu.Lock()
		if hc.expiry != nil {
			hc.expiry.Stop()
		}
		hc.mu.Unlock()
		delete(h.calls, id)
	}
}

// start sends inv for a client that will be asked through input-required
// results, on the facade's context, in the trace of the request that
// started it (asked, the request's context).
func (f *Facade) startHeld(asked context.Context, inv *events.Invocation, state heldState, serverRequests []string) (*heldCall, error) {
	h := f.held
	// A correlation id: the call is found by it only through a state
	// this facade sealed for its caller (open), never by the id alone.
	inv.ID = nuid.Next()
	inv.CallerConfirms = true
	inv.ServerRequests = serverRequests
	state.Invocation = inv.ID
	// The call outlives the request, and stays in its trace.
	ctx, cancel := context.WithCancel(trace.ContextWithSpanContext(h.ctx, trace.SpanContextFromContext(asked)))
	hc := &heldCall{inv: inv, state: state, cancel: cancel, asks: make(chan *events.ConfirmRequest, 4),
		serverAsks: make(chan *events.ServerRequest, 4), done: make(chan struct{})}
	h.mu.Lock()
	if len(h.calls) >= maxHeldCalls || h.ctx.Err() != nil {
		h.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("this facade holds %d calls waiting for their clients already", maxHeldCalls)
	}
	h.calls[inv.ID] = hc
	h.mu.Unlock()
	watch := &invoke.Watch{
		Progress: hc.forwardProgress,
		Waiting:  func(w *invoke.Waiting) { hc.forwardProgress(w.String()) },
		Queued:   func(q *events.Queued) { hc.forwardProgress(invoke.QueuedMessage(q)) },
		Log:      hc.forwardLog,
		Confirm: func(req *events.ConfirmRequest) {
			select {
			case hc.asks <- req:
			default:
				f.log.Warn("mcp facade: a held call has confirmation requests no client fetched; this one is left to the approvers", "invocation", inv.ID)
			}
		},
	}
	if len(serverRequests) > 0 {
		watch.ServerRequest = func(req *events.ServerRequest) {
			select {
			case hc.serverAsks <- req:
			default:
				// The executor sends a call at most as many at once as
				// there is room for; the server hears of it at its
				// deadline.
				f.log.Warn("mcp facade: a held call has more server requests than it holds; this one is not put to the client", "invocation", inv.ID)
			}
		}
	}
	h.wg.Go(func() {
		defer cancel()
		hc.res, hc.err = f.invoker(inv.Sender).InvokeAs(ctx, inv, watch)
		close(hc.done)
		hc.mu.Lock()
		hc.expiry = time.AfterFunc(heldEnded, func() { h.drop(hc) })
		hc.mu.Unlock()
	})
	return hc, nil
}

func (hc *heldCall) forwardProgress(chunk string) {
	hc.mu.Lock()
	p := hc.progress
	hc.mu.Unlock()
	if p != nil {
		p(chunk)
	}
}

func (hc *heldCall) forwardLog(params json.RawMessage) {
	hc.mu.Lock()
	l := hc.log
	hc.mu.Unlock()
	if l != nil {
		l(params)
	}
}

// drop forgets hc.
func (h *heldCalls) drop(hc *heldCall) {
	h.mu.Lock()
	if h.calls[hc.inv.ID] == hc {
		delete(h.calls, hc.inv.ID)
	}
	h.mu.Unlock()
}

func (h *heldCalls) get(id string) *heldCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[id]
}

// seal is s as the opaque state a client echoes: the state's JSON and
// its HMAC, each base64url-encoded.
func (h *heldCalls) seal(s heldState) string {
	data, _ := json.Marshal(s) // a struct of strings and numbers encodes
	mac := hmac.New(sha256.New, h.key[:])
	mac.Write(data)
	return base64.RawURLEncoding.EncodeToString(data) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// errBadState is a request state this facade did not seal, or sealed for
// another call: one answer for both, so that a state taken from another
// caller tells nothing of the call it names.
var errBadState = errors.New("toolbus: the requestState fails its integrity check")

// errStateExpired is a state this facade sealed, past its expiry.
var errStateExpired = errors.New("toolbus: the requestState has expired; call the tool again")

// open is the state sealed in s, if this facade sealed it, and
// errStateExpired with the state when it has expired: the caller checks
// whose it is first.
func (h *heldCalls) open(s string, now time.Time) (heldState, error) {
	var st heldState
	data64, mac64, ok := strings.Cut(s, ".")
	if !ok {
		return st, errBadState
	}
	// Strict: one state has one spelling, so that no client sends a
	// state the facade never wrote and has it taken.
	data, err1 := base64.RawURLEncoding.Strict().DecodeString(data64)
	sum, err2 := base64.RawURLEncoding.Strict().DecodeString(mac64)
	if err1 != nil || err2 != nil {
		return st, errBadState
	}
	mac := hmac.New(sha256.New, h.key[:])
	mac.Write(data)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return st, errBadState
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, errBadState
	}
	if now.Unix() > st.Expires {
		return st, errStateExpired
	}
	return st, nil
}

// argsDigest is the SHA-256 of the arguments in a canonical form (object
// keys sorted, no spaces), so that a client that encodes its retry's
// arguments anew still names the same call.
func argsDigest(args json.RawMessage) string {
	var v any
	canonical := []byte(args)
	if json.Unmarshal(args, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canonical = b
		}
	}
	sum := sha256.Sum256(canonical)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// heldRequest is what a request of a 2026-07-28 client carries for a
// held call: a retry's answers and state, and the request's _meta (its
// progress token).
type heldRequest struct {
	mcp.MultiRoundTripParams
	meta *mcp.Meta
}

// heldReply is what a request of a held call gets: a question for the
// client (ask), or the call's end: its result, or why it has none.
type heldReply struct {
	ask        *mcp.MultiRoundTripResult
	invocation string
	res        *events.Result
	failure    string
}

// meta is the _meta of a reply that asks: the invocation it is for.
func (r heldReply) meta() *mcp.Meta {
	return &mcp.Meta{AdditionalFields: map[string]any{"toolbus/invocationId": r.invocation}}
}

// toolResult is r as a tools/call result.
func (f *Facade) toolResult(ctx context.Context, r heldReply) *mcp.CallToolResult {
	switch {
	case r.ask != nil:
		return &mcp.CallToolResult{Result: mcp.Result{ResultType: mcp.ResultTypeInputRequired, Meta: r.meta()}, MultiRoundTripResult: *r.ask}
	case r.res != nil:
		return f.result(ctx, r.res)
	default:
		return errorResult(r.invocation, events.ErrExecutionFailed, r.failure)
	}
}

// callModern runs a request of a 2026-07-28 client that can be asked: a
// first request starts the call inv, a retry (a request with a state)
// answers it.
func (f *Facade) callModern(ctx context.Context, req heldRequest, inv *events.Invocation, serverRequests []string) (heldReply, error) {
	want := heldState{Tool: inv.Tool, Args: argsDigest(inv.Args), Caller: inv.Sender.ID, Client: f.clientOf(ctx), Session: sessionOf(ctx)}
	if req.RequestState == "" {
		hc, err := f.startHeld(ctx, inv, want, serverRequests)
		if err != nil {
			return heldReply{failure: "toolbus: " + err.Error()}, nil
		}
		return f.awaitHeld(ctx, req, hc)
	}
	st, err := f.held.open(req.RequestState, time.Now())
	// Another call's state, another caller's, another client's or
	// another session's is answered as a forged one: nothing tells them
	// apart from a state never issued.
	if errors.Is(err, errBadState) || st.Tool != want.Tool || st.Args != want.Args || st.Caller != want.Caller || st.Client != want.Client || st.Session != want.Session {
		return heldReply{}, errBadState
	}
	if err != nil {
		return heldReply{}, err
	}
	hc := f.held.get(st.Invocation)
	if hc == nil {
		return heldReply{invocation: st.Invocation, failure: "toolbus: the call this answer is for is no longer held here (it ended long ago, or the facade restarted); call the tool again"}, nil
	}
	hc.mu.Lock()
	asking, server, current := hc.asking, hc.server, st.Round == hc.round
	hc.mu.Unlock()
	if current && server != nil {
		return f.answerHeldServerRequest(ctx, req, hc, st.Round, server)
	}
	answer := mcpserver.ElicitationResponse(req.InputResponses, approvalInput)
	switch {
	case !current || asking == nil:
		// An answer to a round that is over decides nothing: the call
		// has moved on.
	case answer != nil:
		f.answerForUser(ctx, hc.inv, asking, answer)
	default:
		select {
		case <-hc.done:
		default:
			// Sent again with no answer: the question stands.
			return f.inputRequired(hc, st.Round, asking), nil
		}
	}
	return f.awaitHeld(ctx, req, hc)
}

// awaitHeld waits for hc's result, or for a question to put to the
// client, which ends this request. A request that ends before either (its
// client cancelled it) gives the call up.
func (f *Facade) awaitHeld(ctx context.Context, req heldRequest, hc *heldCall) (heldReply, error) {
	hc.mu.Lock()
	hc.progress, hc.log = f.progress(ctx, req.meta), f.logTo(ctx)
	hc.mu.Unlock()
	defer func() {
		hc.mu.Lock()
		hc.progress, hc.log = nil, nil
		hc.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			hc.cancel()
			<-hc.done
			f.held.drop(hc)
			return heldReply{}, ctx.Err()
		case <-hc.done:
			f.held.drop(hc)
			if hc.err != nil {
				return heldReply{invocation: hc.inv.ID, failure: "toolbus: " + hc.err.Error()}, nil
			}
			return heldReply{invocation: hc.inv.ID, res: hc.res}, nil
		case r := <-hc.asks:
			// The request came to this call's inbox; an id of another
			// call is ignored, as for the older generation.
			if !ownRequest(hc.inv, r) {
				f.log.Warn("mcp facade: a confirmation request for another call came to this one; ignored", "invocation", hc.inv.ID, "request", r.InvocationID)
				continue
			}
			hc.mu.Lock()
			hc.round++
			hc.asking, hc.server = r, nil
			round := hc.round
			hc.mu.Unlock()
			return f.inputRequired(hc, round, r), nil
		case r := <-hc.serverAsks:
			if r.InvocationID != hc.inv.ID {
				f.log.Warn("mcp facade: a server's request for another call came to this one; ignored", "invocation", hc.inv.ID, "request", r.InvocationID)
				continue
			}
			hc.mu.Lock()
			hc.round++
			hc.asking, hc.server = nil, r
			round := hc.round
			hc.mu.Unlock()
			res, err := f.serverInputRequired(hc, round, r)
			if err != nil {
				f.answerServerRequest(ctx, hc.inv, r, nil, err)
				continue
			}
			return res, nil
		}
	}
}

// inputRequired is the reply that asks the client's user to confirm
// round of hc.
func (f *Facade) inputRequired(hc *heldCall, round int, r *events.ConfirmRequest) heldReply {
	st := hc.state
	st.Round, st.Expires = round, time.Now().Add(f.held.life).Unix()
	ask := mcpserver.NewInputRequestBuilder(f.held.seal(st)).Elicit(approvalInput, mcp.ElicitationParams{
		Message:         elicitationMessage(r),
		RequestedSchema: elicitationSchema,
	}).ToolResult().MultiRoundTripResult
	return heldReply{ask: &ask, invocation: hc.inv.ID}
}

// sessionOf is the id of the MCP session of ctx's request, when it
// belongs to one the server made (an ephemeral session of a client
// without sessions has none).
func sessionOf(ctx context.Context) string {
	if s := mcpserver.ClientSessionFromContext(ctx); s != nil {
		return s.SessionID()
	}
	return ""
}
