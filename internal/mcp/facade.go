package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/telemetry"
)

// The facade is toolbus as an MCP server: one server in front of the
// fleet that lists its active tools and turns every tools/call into a
// tool.invoke in the caller's name, so an agent that speaks MCP gets the
// registry, the policy, confirmation and the audit trail with one line
// of its own configuration.

// FacadeConfig configures a Facade.
type FacadeConfig struct {
	Conn *nats.Conn
	JS   jetstream.JetStream
	// Workspace names the workspace every call of a file or shell tool
	// acts on (Invocation.Workspace); empty for the one there is.
	Workspace string
	// Principal is the fleet identity Conn connects with (bus.Bus's
	// Principal; "" for none). Its callers are then "<principal>/agent:…":
	// the bus vouches for the facade, which vouches for its sessions.
	Principal string
	// Agent and Session, when set, name every caller of this facade (an
	// agent id configured for it); otherwise the MCP client's name (from
	// initialize) and the MCP session id do.
	Agent, Session string
	// Client names the client every request of this facade comes from
	// when the transport names none: the one process a stdio facade
	// serves. A request over HTTP comes from the client its credential
	// names (HTTPConfig.Tokens). With a Principal, each client is a
	// principal of its own, "<principal>/<client>"
	// (events.ClientPrincipal), with its own bounds, limits, sessions
	// and answers; it must then be a valid client name
	// (events.ValidClient). Empty: the facade's own principal.
	Client string
	// User and Host describe where the facade runs; they go into every
	// caller identity.
	User, Host string
	// Policy returns the policy that decides which tools a caller is shown
	// (data.toolbus.tool_denied); nil shows every active tool. The
	// executors enforce their own policy on every call either way.
	Policy func() *policy.Policy
	// NoElicitation keeps confirmation requests away from the MCP
	// clients: only the approvers on tool.confirm answer them. Otherwise a
	// client that supports elicitation is asked to put a call's request
	// to its user, where the policy allows (elicitation_allowed).
	NoElicitation bool
	Version       string
	Logger        *slog.Logger
}

// Facade is the MCP server in front of the fleet. Serve it over stdio
// (ServeStdio) or HTTP (HTTPHandler); stop it with Close.
type Facade struct {
	cfg     FacadeConfig
	log     *slog.Logger
	srv     *mcpserver.MCPServer
	replica *catalog.Replica
	clients invokers
	held    *heldCalls         // calls of 2026-07-28 clients asked to confirm (facade_mrtr.go)
	subs    subscriptions      // clients' subscriptions to resources (facade_subscribe.go)
	updates *nats.Subscription // the servers' updates of resources

	mu       sync.Mutex
	listed   string       // the tool set last given to the server, to skip no-op updates
	features featureLists // the prompts and resources last given to it

	shown shownCache

	endpoints []*mcpserver.StreamableHTTPServer // HTTPHandler's, shut down by Close

	stop chan struct{}
	done chan struct{}
}

// StartFacade follows the catalogue and serves its active tools.
func StartFacade(ctx context.Context, cfg FacadeConfig) (*Facade, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "0.1.0"
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.Client != "" {
		if err := events.ValidClient(cfg.Client); err != nil {
			return nil, fmt.Errorf("mcp facade: %w", err)
		}
	}
	replica, err := catalog.Follow(ctx, cfg.JS, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("mcp facade: %w", err)
	}
	f := &Facade{cfg: cfg, log: cfg.Logger, replica: replica, stop: make(chan struct{}), done: make(chan struct{}), held: newHeldCalls(),
		clients: invokers{nc: cfg.Conn, id: events.Identity{ID: "mcp-facade@" + cfg.Host, Role: "agent", Host: cfg.Host}}}
	f.srv = mcpserver.NewMCPServer("toolbus", cfg.Version,
		// Tools, and the list changes, are all it serves. Elicitation
		// is a capability of clients, not of servers: asking a client
		// (RequestElicitation) needs only the client's.
		mcpserver.WithToolCapabilities(true),
		mcpserver.WithPromptCapabilities(true),
		mcpserver.WithResourceCapabilities(true, true),
		mcpserver.WithHooks(f.hooks()),
		mcpserver.WithCompletions(),
		mcpserver.WithLogging(),
		mcpserver.WithToolFilter(f.visible),
		mcpserver.WithRecovery(),
		mcpserver.WithPromptCompletionProvider(completions{f}),
		mcpserver.WithResourceCompletionProvider(completions{f}),
		mcpserver.WithInstructions("The tools of a toolbus fleet. Every call is judged by the fleet's policy; some wait for a person to approve them."))
	if f.updates, err = f.followUpdates(); err != nil {
		replica.Close()
		f.clients.close()
		return nil, fmt.Errorf("mcp facade: %w", err)
	}
	// The channel is taken before the catalogue is read, so that a change
	// in between is not missed.
	changed := replica.Changed()
	f.Refresh()
	go f.follow(changed)
	return f, nil
}

// Server is the MCP server, for transports of the caller's own.
func (f *Facade) Server() *mcpserver.MCPServer { return f.srv }

// ServeStdio serves one MCP client over in and out until ctx ends or in
// closes.
func (f *Facade) ServeStdio(ctx context.Context, in *os.File, out *os.File) error {
	s := mcpserver.NewStdioServer(f.srv)
	s.SetErrorLogger(slog.NewLogLogger(f.log.Handler(), slog.LevelWarn))
	err := s.Listen(ctx, in, out)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Close stops following the catalogue and the facade's bus client.
func (f *Facade) Close() {
	select {
	case <-f.stop:
		return
	default:
	}
	close(f.stop)
	<-f.done
	f.mu.Lock()
	endpoints := f.endpoints
	f.endpoints = nil
	f.mu.Unlock()
	for _, ep := range endpoints {
		// Its sessions end, and its sweeper of idle sessions stops.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ep.Shutdown(ctx)
		cancel()
	}
	f.held.close()
	f.updates.Unsubscribe()
	f.closeSubscriptions()
	f.replica.Close()
	f.clients.close()
}

// follow refreshes the tool list on every catalogue change after the one
// changed announces. The next channel is taken before Refresh reads the
// catalogue: taken after, a change made while Refresh ran would close a
// channel no one waits on, and the list would miss it until the next.
func (f *Facade) follow(changed <-chan struct{}) {
	defer close(f.done)
	for {
		select {
		case <-f.stop:
			return
		case <-changed:
			changed = f.replica.Changed()
			f.Refresh()
		}
	}
}

// Refresh gives the server the catalogue's active tools; the server tells
// initialised clients (notifications/tools/list_changed) when the set or a
// declaration changed. Call it when the policy changes too: it decides
// what each caller is shown.
func (f *Facade) Refresh() {
	f.mu.Lock()
	defer f.mu.Unlock()
	cat := f.replica.Catalog()
	f.refreshFeatures(cat)
	active := cat.AllTools()
	tools := make([]mcpserver.ServerTool, 0, len(active))
	var key strings.Builder
	for _, t := range active {
		mt, err := mcpTool(t)
		if err != nil {
			f.log.Warn("mcp facade: a tool is left out", "tool", t.Name, "err", err)
			continue
		}
		tools = append(tools, mcpserver.ServerTool{Tool: mt, Handler: f.handler(t.Name)})
		// An update keeps a tool's Seq: its time tells a new declaration.
		fmt.Fprintf(&key, "%s\x00%d\x00%d\x00", t.Name, t.Seq, t.UpdatedAt.UnixNano())
	}
	// The policy decides what each caller is shown: a new revision is a
	// change of the list even when the tools are the same.
	if f.cfg.Policy != nil {
		if p := f.cfg.Policy(); p != nil {
			key.WriteString(p.Revision())
		}
	}
	if key.String() == f.listed {
		return
	}
	f.listed = key.String()
	f.srv.SetTools(tools...)
}

// mcpTool is a catalogue entry as an MCP tools/list entry: its catalogue
// name (which maps back as is), its description and input schema, and
// what an MCP server declared of it as the server sent it: title,
// outputSchema, annotations, icons and _meta. A tool of toolbus's own
// has its display name as its annotations' title. mcp-go's Tool has room
// for the annotation and icon keys MCP defines and for no other: those
// the catalogue keeps beyond them are not listed here.
func mcpTool(t *events.Tool) (mcp.Tool, error) {
	schema := t.Parameters
	if len(bytes.TrimSpace(schema)) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	mt := mcp.NewToolWithRawSchema(t.Name, t.Description, schema)
	mt.Title = t.Title
	if len(t.OutputSchema) > 0 {
		mt.RawOutputSchema = t.OutputSchema
	}
	if t.Source != events.SourceMCP && t.DisplayName != "" && t.DisplayName != t.Name {
		mt.Annotations.Title = t.DisplayName
	}
	if len(t.Icons) > 0 {
		// Icons that do not decode are left out, not the tool: they
		// only decorate it.
		if json.Unmarshal(t.Icons, &mt.Icons) != nil {
			mt.Icons = nil
		}
	}
	mt.Meta = rawMeta(t.Meta)
	if len(t.Annotations) > 0 {
		if err := json.Unmarshal(t.Annotations, &mt.Annotations); err != nil {
			return mt, fmt.Errorf("annotations: %w", err)
		}
	}
	if t.ReadOnly && mt.Annotations.ReadOnlyHint == nil {
		mt.Annotations.ReadOnlyHint = mcp.ToBoolPtr(true)
	}
	// mcp-go refuses (panics on) a tool whose x-mcp-header annotations
	// break SEP-2243: such a tool is left out, not the whole list.
	if err := mcp.ValidateParamHeaderAnnotations(&mt); err != nil {
		return mt, err
	}
	return mt, nil
}

// visible leaves out the tools the policy denies to this caller whatever
// the arguments. A policy that cannot say hides the tool: listing it
// would only lead to a call the executor refuses.
func (f *Facade) visible(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	if f.cfg.Policy == nil {
		return tools
	}
	pol := f.cfg.Policy()
	if pol == nil {
		return tools
	}
	caller := f.caller(ctx)
	cat := f.replica.Catalog()
	out := make([]mcp.Tool, 0, len(tools))
	for _, mt := range tools {
		t, ok := cat.Lookup(mt.Name)
		if !ok {
			continue
		}
		key := shownKey{name: t.Name, kind: t.Kind, source: t.Source, server: t.Server, trust: t.Trust, readOnly: t.ReadOnly, caller: caller}
		shown, ok := f.shown.get(pol, key)
		if !ok {
			reasons, err := pol.ToolDenied(ctx, policy.ToolInput{Name: t.Name, Kind: t.Kind, Source: t.Source, Server: t.Server, Trust: t.Trust, ReadOnly: t.ReadOnly}, caller)
			if err != nil {
				f.log.Warn("mcp facade: the policy's tool_denied failed; the tool is not listed", "tool", t.Name, "err", err)
				continue
			}
			shown = len(reasons) == 0
			f.shown.put(pol, key, shown)
		}
		if shown {
			out = append(out, mt)
		}
	}
	return out
}

// maxShownCached bounds the cache of what callers are shown; when it is
// reached the cache starts over.
const maxShownCached = 10000

// shownKey is everything tool_denied is asked: the fields of the tool
// that ToolDenied passes on, and the caller.
type shownKey struct {
	name            string
	kind            events.Kind
	source          events.Source
	server          string
	trust, readOnly bool
	caller          events.Identity
}

// shownCache remembers what a deterministic policy's tool_denied said for
// a tool and a caller. mcp-go asks the tool filter again on every
// tools/call, for the tool called: without the cache every call would pay
// a policy evaluation the executor then makes again with the arguments.
// A policy that calls a nondeterministic built-in is asked every time; a
// new policy starts the cache over.
type shownCache struct {
	mu     sync.Mutex
	policy *policy.Policy
	m      map[shownKey]bool
}

func (c *shownCache) get(p *policy.Policy, k shownKey) (shown, ok bool) {
	if !p.Deterministic() {
		return false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.policy != p {
		return false, false
	}
	shown, ok = c.m[k]
	return shown, ok
}

func (c *shownCache) put(p *policy.Policy, k shownKey, shown bool) {
	if !p.Deterministic() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.policy != p || len(c.m) >= maxShownCached {
		c.policy, c.m = p, make(map[shownKey]bool)
	}
	c.m[k] = shown
}

// caller is who a request comes from: under the principal of the client
// its credential names (principalOf), the configured agent, else the MCP
// client's name; the configured session, else the MCP session, which the
// server made and bound to that client (clientSessions), else the client
// itself; the client program's name/version always. The principal part
// is what the bus proves (the facade's) and the facade vouches for (the
// client); the rest is the client's claim, like every caller's
// (policy/README.md).
func (f *Facade) caller(ctx context.Context) events.Identity {
	client := f.clientOf(ctx)
	id := events.Identity{Role: "agent", Agent: f.cfg.Agent, Session: f.cfg.Session, User: f.cfg.User, Host: f.cfg.Host}
	if s := mcpserver.ClientSessionFromContext(ctx); s != nil {
		if ci, ok := s.(mcpserver.SessionWithClientInfo); ok {
			info := ci.GetClientInfo()
			name := cleanName(info.Name)
			if name != "" {
				id.Client = name
				if v := cleanName(info.Version); v != "" {
					id.Client += "/" + v
				}
				if id.Agent == "" {
					id.Agent = name
				}
			}
		}
		if id.Session == "" {
			id.Session = cleanName(s.SessionID())
		}
	}
	if id.Session == "" {
		// A client without a session (a 2026-07-28 client, stateless)
		// is one session: its credential's, not a name it chooses.
		id.Session = client
	}
	if id.Agent == "" {
		id.Agent = "mcp-client"
	}
	id.ID = "agent:" + id.Agent
	if p := f.principalOf(client); p != "" {
		id.ID = p + "/" + id.ID
	}
	return id
}

// clientOf is the client a request comes from: the one its credential
// named (HTTP), else the facade's one client (stdio); "" for none.
func (f *Facade) clientOf(ctx context.Context) string {
	if c, ok := ctx.Value(clientKey{}).(string); ok {
		return c
	}
	return f.cfg.Client
}

// principalOf is the principal the calls of client go with: the
// facade's, or its client's under it; "" without identities.
func (f *Facade) principalOf(client string) string {
	if f.cfg.Principal == "" || client == "" {
		return f.cfg.Principal
	}
	return events.ClientPrincipal(f.cfg.Principal, client)
}

// principalOfCaller is the principal of a caller this facade named
// (caller): its id up to "/agent:".
func (f *Facade) principalOfCaller(caller events.Identity) string {
	if f.cfg.Principal == "" {
		return ""
	}
	p, _, _ := strings.Cut(caller.ID, "/agent:")
	return p
}

// invoker is the bus client that sends the calls of caller, on its
// principal's subjects.
func (f *Facade) invoker(caller events.Identity) *invoke.Client {
	return f.clients.get(f.principalOfCaller(caller))
}

// clientKey is the context key of the client a request's credential
// names.
type clientKey struct{}

// WithClient is ctx for a request of client, for a transport of the
// caller's own that authenticates its clients.
func WithClient(ctx context.Context, client string) context.Context {
	return context.WithValue(ctx, clientKey{}, client)
}

// invokers are the facade's bus clients, one per principal its callers
// have: each sends, cancels, gives up and reads outputs on its
// principal's subjects only. There are as many as clients with a
// credential, and one without identities.
type invokers struct {
	nc *nats.Conn
	id events.Identity

	mu     sync.Mutex
	m      map[string]*invoke.Client
	closed bool
}

func (v *invokers) get(principal string) *invoke.Client {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.m[principal]
	if c == nil {
		id := v.id
		if principal != "" {
			id.ID = principal + "/" + id.ID
		}
		c = invoke.NewClient(v.nc, id, principal)
		if v.closed {
			// The facade is closing: a call on it fails.
			c.Close()
			return c
		}
		if v.m == nil {
			v.m = map[string]*invoke.Client{}
		}
		v.m[principal] = c
	}
	return c
}

func (v *invokers) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	for p, c := range v.m {
		c.Close()
		delete(v.m, p)
	}
}

// cleanName keeps a name a client chose printable and short: it lands in
// identities, the audit trail and terminals.
func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsGraphic(r) && r != ' ' {
			return r
		}
		return '_'
	}, s)
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

// handler runs one tools/call as a tool.invoke.
func (f *Facade) handler(name string) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, span := f.callSpan(ctx, req)
		defer span.End()
		args := req.Params.RawArguments
		if len(bytes.TrimSpace(args)) == 0 || bytes.Equal(bytes.TrimSpace(args), []byte("null")) {
			data, err := json.Marshal(req.Params.Arguments)
			if err != nil {
				return mcp.NewToolResultError("toolbus: the arguments do not encode: " + err.Error()), nil
			}
			args = data
			if bytes.Equal(args, []byte("null")) {
				args = json.RawMessage(`{}`)
			}
		}
		inv := &events.Invocation{Header: events.Header{Sender: f.caller(ctx)}, Tool: name, Args: args, Workspace: f.cfg.Workspace}
		canAsk := !f.cfg.NoElicitation && canElicit(ctx)
		if canAsk && mcpserver.IsModernRequest(ctx) {
			reply, err := f.callModern(ctx, heldRequest{req.Params.MultiRoundTripParams, req.Params.Meta}, inv, declaredRequests(ctx))
			if err != nil {
				return nil, err
			}
			return f.toolResult(ctx, reply), nil
		}
		var notified atomic.Bool
		notify, log := f.progress(ctx, req.Params.Meta), f.logTo(ctx)
		if notify != nil {
			progress := notify
			notify = func(s string) { notified.Store(true); progress(s) }
		}
		watch := &invoke.Watch{Progress: notify, Log: func(params json.RawMessage) { notified.Store(true); log(params) }}
		if notify != nil {
			// A client that shows progress shows why the call takes long.
			watch.Waiting = func(w *invoke.Waiting) { notify(w.String()) }
			watch.Queued = func(q *events.Queued) { notify(invoke.QueuedMessage(q)) }
		}
		if canAsk {
			ask, wait := f.askingWatch(ctx, inv)
			defer wait()
			watch.Confirm = ask
		}
		if methods := serverRequestsOf(ctx); len(methods) > 0 {
			// The backend server's own requests go to this client
			// (facade_serverrequest.go).
			inv.ServerRequests = methods
			take, wait := f.serverRequestWatch(ctx, inv)
			defer wait()
			watch.ServerRequest = take
		}
		res, err := f.invoker(inv.Sender).InvokeAs(ctx, inv, watch)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return errorResult(inv.ID, events.ErrExecutionFailed, "toolbus: "+err.Error()), nil
		}
		if notified.Load() {
			settle()
		}
		return f.result(ctx, res), nil
	}
}

// callSpan starts the span of a tools/call (OpenTelemetry's MCP
// conventions), a child of the client's: the trace context in the
// request's _meta (MCP's SEP-414), else in its HTTP headers. Both are the
// client's claim: they name a parent, and grant nothing.
func (f *Facade) callSpan(ctx context.Context, req mcp.CallToolRequest) (context.Context, trace.Span) {
	parent := ctx
	if req.Params.Meta != nil {
		parent = telemetry.FromMeta(ctx, req.Params.Meta.AdditionalFields)
	}
	if !trace.SpanContextFromContext(parent).IsValid() && req.Header != nil {
		parent = telemetry.Propagator.Extract(ctx, propagation.HeaderCarrier(req.Header))
	}
	tracer := telemetry.TracerOf(nil)
	if tracer == nil {
		return parent, trace.SpanFromContext(parent) // off: the client's context goes on as it came
	}
	ctx, span := tracer.Start(parent, "tools/call "+req.Params.Name, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", req.Params.Name),
			attribute.String("gen_ai.operation.name", "execute_tool"))
	}
	return ctx, span
}

// notificationSettle is how long a handler that sent its client
// notifications waits before it returns the result. mcp-go's streamable-
// HTTP server forwards a request's notifications from a goroutine of its
// own, which drops one it has taken but not yet written when the handler
// returns: the last log message or progress of a call would be lost now
// and then. The pause lets it write what it took.
const notificationSettle = 10 * time.Millisecond

func settle() { time.Sleep(notificationSettle) }

// askingWatch has inv confirmed by the client's user too (elicitation/
// create, facade_confirm.go): it returns the Watch.Confirm that asks them,
// and a wait that ends the questions still open and waits for them. A
// question ends with the call (another approver may answer first): call
// wait when the call has ended.
func (f *Facade) askingWatch(ctx context.Context, inv *events.Invocation) (ask func(*events.ConfirmRequest), wait func()) {
	var asking sync.WaitGroup
	callCtx, endCall := context.WithCancel(ctx)
	inv.CallerConfirms = true
	ask = func(req *events.ConfirmRequest) {
		asking.Go(func() { f.askUser(callCtx, inv, req) })
	}
	return ask, func() {
		endCall()
		asking.Wait()
	}
}

// logTo sends the client of ctx the log messages of the server that serves
// its call, those at or above the level it chose (logging/setLevel, or
// the level in a 2026-07-28 request's _meta; none when it chose none).
func (f *Facade) logTo(ctx context.Context) func(json.RawMessage) {
	return func(params json.RawMessage) {
		var p struct {
			Level  mcp.LoggingLevel `json:"level"`
			Logger string           `json:"logger"`
			Data   any              `json:"data"`
		}
		if err := json.Unmarshal(params, &p); err != nil || p.Level == "" {
			return
		}
		n := mcp.NewLoggingMessageNotification(p.Level, p.Logger, p.Data)
		if err := f.srv.SendLogMessageToClient(ctx, n); err != nil {
			f.log.Debug("mcp facade: a server's log message not sent", "err", err)
		}
	}
}

// progress forwards the call's output as MCP progress notifications when
// the client asked for them with a progress token in the request's meta.
func (f *Facade) progress(ctx context.Context, meta *mcp.Meta) func(string) {
	if meta == nil || meta.ProgressToken == nil {
		return nil
	}
	token := meta.ProgressToken
	var n atomic.Int64
	return func(chunk string) {
		params := map[string]any{"progressToken": token, "progress": n.Add(1), "message": chunk}
		if err := f.srv.SendNotificationToClient(ctx, "notifications/progress", params); err != nil {
			f.log.Debug("mcp facade: progress not sent", "err", err)
		}
	}
}

// result is a toolbus result as an MCP tool result. An MCP tool's result
// comes back as its server sent it: its content block by block (Parts,
// with PartsWhole), its structuredContent and its _meta, and isError with
// its own content when the tool failed; what toolbus added on the way
// (notes, hooks' feedback) is a text block after the tool's. A result
// cut to the output limit is its text, cut, and its parts that are not
// text, as is any other tool's result. Any other failure is isError with
// the error type and the reason. _meta names the invocation (for toolbus
// cancel and the audit trail) and where the whole output (or a
// structuredContent too large to carry) is when it was cut, beside the
// tool's own keys.
func (f *Facade) result(ctx context.Context, res *events.Result) *mcp.CallToolResult {
	toolFailed := res.Error != nil && res.Error.Type == events.ErrMCPToolError
	if res.Error != nil && !toolFailed {
		out := errorResult(res.InvocationID, res.Error.Type, fmt.Sprintf("%s: %s", res.Error.Type, res.Error.Message))
		if res.LLMContent != "" && res.LLMContent != res.Error.Message {
			out.Content = append(out.Content, mcp.NewTextContent(res.LLMContent))
		}
		if ms := res.Error.RetryAfterMillis; ms > 0 {
			// For the client's code to act on; the model reads it in the
			// message.
			out.Meta.AdditionalFields["toolbus/retryAfterMillis"] = ms
		}
		return out
	}
	out := &mcp.CallToolResult{IsError: toolFailed, RawStructuredContent: res.StructuredContent}
	meta := rawFields(res.Meta, 4)
	meta["toolbus/invocationId"] = res.InvocationID
	if toolFailed {
		meta["toolbus/errorType"] = string(res.Error.Type)
	}
	if res.Truncated {
		meta["toolbus/truncated"] = true
		meta["toolbus/outputRef"] = res.OutputRef
	}
	if res.StructuredRef != "" {
		meta["toolbus/structuredContentRef"] = res.StructuredRef
	}
	out.Meta = &mcp.Meta{AdditionalFields: meta}
	if res.PartsWhole && !res.Truncated {
		out.Content = make([]mcp.Content, 0, len(res.Parts)+1)
		for _, p := range res.Parts {
			out.Content = append(out.Content, f.block(ctx, p))
		}
		if res.PartsText <= len(res.LLMContent) {
			if added := strings.TrimLeft(res.LLMContent[res.PartsText:], "\n"); added != "" {
				out.Content = append(out.Content, mcp.NewTextContent(added))
			}
		}
		return out
	}
	// The text holds the text parts and the links.
	media := slices.DeleteFunc(slices.Clone(res.Parts), func(p events.Part) bool { return p.Type == events.PartText || p.Type == events.PartLink })
	if res.LLMContent != "" || len(media) == 0 {
		out.Content = append(out.Content, mcp.NewTextContent(res.LLMContent))
	}
	for _, p := range media {
		out.Content = append(out.Content, f.block(ctx, p))
	}
	return out
}

// block is p as MCP content, or a text that says why it is not.
func (f *Facade) block(ctx context.Context, p events.Part) mcp.Content {
	c, err := f.content(ctx, p)
	if err != nil {
		return mcp.NewTextContent(fmt.Sprintf("[%s part not included: %v]", p.Type, err))
	}
	return c
}

func errorResult(invocation string, t events.ErrorType, text string) *mcp.CallToolResult {
	out := mcp.NewToolResultError(text)
	out.Meta = &mcp.Meta{AdditionalFields: map[string]any{"toolbus/invocationId": invocation, "toolbus/errorType": string(t)}}
	return out
}

// content is a typed part as MCP content, with its annotations and
// _meta; a part kept in the object store (too large for a message) is
// fetched.
func (f *Facade) content(ctx context.Context, p events.Part) (mcp.Content, error) {
	data, text := p.Data, p.Text
	if p.Ref != "" {
		// An executor reads it for the facade, whose calls made it.
		r, err := f.invoker(f.caller(ctx)).ReadOutput(ctx, p.Ref)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		if p.RefText {
			text = string(b)
		} else {
			data = string(b)
		}
	}
	var a mcp.Annotated
	if len(p.Annotations) > 0 {
		a.Annotations = new(mcp.Annotations)
		if err := json.Unmarshal(p.Annotations, a.Annotations); err != nil {
			return nil, fmt.Errorf("annotations: %w", err)
		}
	}
	meta := rawMeta(p.Meta)
	switch p.Type {
	case events.PartText:
		return mcp.TextContent{Annotated: a, Meta: meta, Type: mcp.ContentTypeText, Text: text}, nil
	case events.PartImage:
		return mcp.ImageContent{Annotated: a, Meta: meta, Type: mcp.ContentTypeImage, Data: data, MIMEType: p.MIMEType}, nil
	case events.PartAudio:
		return mcp.AudioContent{Annotated: a, Meta: meta, Type: mcp.ContentTypeAudio, Data: data, MIMEType: p.MIMEType}, nil
	case events.PartLink:
		return linkContent{mcp.ResourceLink{Annotated: a, Meta: meta, Type: mcp.ContentTypeLink, URI: p.URI, Name: p.Name,
			Title: p.Title, Description: p.Description, MIMEType: p.MIMEType, Size: p.ResourceSize}}, nil
	case events.PartResource:
		var resMeta map[string]any
		if len(p.ResourceMeta) > 0 {
			resMeta = rawFields(p.ResourceMeta, 0)
		}
		var contents mcp.ResourceContents = mcp.TextResourceContents{Meta: resMeta, URI: p.URI, MIMEType: p.MIMEType, Text: text}
		if data != "" {
			contents = mcp.BlobResourceContents{Meta: resMeta, URI: p.URI, MIMEType: p.MIMEType, Blob: data}
		}
		return mcp.EmbeddedResource{Annotated: a, Meta: meta, Type: mcp.ContentTypeResource, Resource: contents}, nil
	}
	return nil, fmt.Errorf("unknown part type %q", p.Type)
}

// linkContent is a resource_link block as its server sent it:
// mcp.ResourceLink writes description and mimeType even when they are
// empty, which MCP has as optional, and no server that left them out
// would recognise its link. Embedding the block keeps it mcp.Content.
type linkContent struct{ mcp.ResourceLink }

func (l linkContent) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Annotations *mcp.Annotations `json:"annotations,omitempty"`
		Meta        *mcp.Meta        `json:"_meta,omitempty"`
		Type        string           `json:"type"`
		URI         string           `json:"uri"`
		Name        string           `json:"name"`
		Title       string           `json:"title,omitempty"`
		Description string           `json:"description,omitempty"`
		MIMEType    string           `json:"mimeType,omitempty"`
		Size        *int64           `json:"size,omitempty"`
	}{l.Annotations, l.Meta, l.Type, l.URI, l.Name, l.Title, l.Description, l.MIMEType, l.Size})
}

// rawMeta is a _meta object as mcp-go carries it, its values the JSON the
// server sent (numbers keep their digits); nil for none.
func rawMeta(raw json.RawMessage) *mcp.Meta {
	if len(raw) == 0 {
		return nil
	}
	return &mcp.Meta{AdditionalFields: rawFields(raw, 0)}
}

// rawFields is the JSON object raw as a map of its members' JSON, with
// room for more; empty when raw is not an object.
func rawFields(raw json.RawMessage, room int) map[string]any {
	var fields map[string]json.RawMessage
	if len(raw) > 0 {
		json.Unmarshal(raw, &fields)
	}
	m := make(map[string]any, len(fields)+room)
	for k, v := range fields {
		m[k] = v
	}
	return m
}
