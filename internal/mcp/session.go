package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcptransport "github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/proctree"
)

// A session is one connection to one server: a child process for stdio,
// an SSE stream or a streamable-HTTP session, and the mcp-go client over
// it. It ends once (dead closes), by Close or by the server going away;
// the server's runner then starts a new one.
type session struct {
	client *client.Client
	tree   *proctree.Tree // the stdio server's processes; nil over HTTP
	stderr *tail          // what a stdio server last wrote to stderr

	dead     chan struct{}
	deadOnce sync.Once
	cause    error // why the session ended, set before dead closes

	// Progress notifications go to the call that asked for them, by
	// token.
	progressMu sync.Mutex
	progress   map[string]func(mcp.ProgressNotificationParams)
	nextToken  atomic.Uint64

	nextListID atomic.Uint64 // ids of the tools/list requests listTools sends

	// onListChanged is called when the server says its tool list
	// changed; set before the session starts, as notifications may come
	// at once.
	onListChanged func()
	// onUpdated, once set, is told the URI of each resource the server
	// says changed (notifications/resources/updated).
	onUpdated atomic.Pointer[func(uri string)]

	// The calls in flight on the session, by their token (the progress
	// token each call's request carries), each with where its server's
	// log messages go (nil: nowhere). A log message names no call. Over
	// streamable HTTP the one the server sends on a call's own response
	// stream is that call's (logTap); one sent on the session's standalone
	// stream (mcp-go's servers send a session's notifications on whichever
	// of its streams reads first) goes to the one call in flight on a
	// session of one caller (callersession.go), and nowhere on a session
	// several callers share. Over stdio and SSE there is one stream: a
	// message goes to the one call in flight, and to none when there are
	// several. Another caller must never read it.
	inflightMu sync.Mutex
	inflight   map[string]func(json.RawMessage)
	// tapped is set for a session whose logTap sees its calls' streams.
	tapped bool

	// The requests the server makes of its client (serverrequest.go).
	asking serverAsks
}

// track counts a call in flight under token until done is called; its
// server's log messages go to log.
func (s *session) track(token string, log func(json.RawMessage)) (done func()) {
	s.inflightMu.Lock()
	if s.inflight == nil {
		s.inflight = map[string]func(json.RawMessage){}
	}
	s.inflight[token] = log
	s.inflightMu.Unlock()
	return func() {
		s.inflightMu.Lock()
		delete(s.inflight, token)
		s.inflightMu.Unlock()
	}
}

// logTo is where the log messages of the call in flight under token go.
func (s *session) logTo(token string) func(json.RawMessage) {
	s.inflightMu.Lock()
	defer s.inflightMu.Unlock()
	return s.inflight[token]
}

// logged hands a log message of the server, which came on no call's own
// stream, to the one call in flight on a session of one stream.
func (s *session) logged(n mcp.JSONRPCNotification) {
	s.inflightMu.Lock()
	var log func(json.RawMessage)
	if len(s.inflight) == 1 && !s.tapped {
		for _, l := range s.inflight {
			log = l
		}
	}
	s.inflightMu.Unlock()
	if log == nil {
		return
	}
	params, err := json.Marshal(n.Params)
	if err == nil {
		log(params)
	}
}

// loggedAside hands a log message the server sent on the session's
// standalone stream to the one call in flight, when every call on the
// session is one caller's: it is that caller's, and most likely that
// call's. On a session several callers share it may be anyone's, and
// goes nowhere.
func (s *session) loggedAside(params json.RawMessage) {
	s.asking.mu.Lock()
	oneCaller := s.asking.oneCaller
	s.asking.mu.Unlock()
	if !oneCaller {
		return
	}
	s.inflightMu.Lock()
	var log func(json.RawMessage)
	if len(s.inflight) == 1 {
		for _, l := range s.inflight {
			log = l
		}
	}
	s.inflightMu.Unlock()
	if log != nil {
		log(params)
	}
}

// newToken is a token for one request of the session: its progress
// token, by which its progress and its log messages find it.
func (s *session) newToken() string { return fmt.Sprintf("toolbus-%d", s.nextToken.Add(1)) }

// protocol keeps sessions on the initialize handshake of protocol
// 2025-11-25, which every server in use speaks. mcp-go would first probe
// for the stateless protocol of 2026-07-28 (server/discover), and takes a
// server that answers any unknown method with an empty result, as the
// MCP conformance suite's does, for one of those, never initialising it.
var protocol = client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION)

// clientInfo is how toolbus introduces itself to servers.
var clientInfo = mcp.Implementation{Name: "toolbus", Version: "0.1"}

// dial connects to the server cfg describes and initialises the session.
// Processes it started are ended when it fails.
// opts are more options of the session's client (a caller session's
// capabilities, callersession.go).
func dial(ctx context.Context, cfg *ServerConfig, starter *proctree.Starter, log *slog.Logger, listChanged func(), opts ...client.ClientOption) (*session, error) {
	// mcp-go's transports log through the server's logger, at debug: what
	// they say (a stream opened) is theirs, not the operator's business.
	log = slog.New(debugOnly{log.Handler()}).With("server", cfg.Name)
	s := &session{dead: make(chan struct{}), progress: make(map[string]func(mcp.ProgressNotificationParams)),
		onListChanged: listChanged}
	var err error
	switch cfg.Transport {
	case Stdio:
		err = s.startStdio(cfg, starter)
	case SSE:
		var t *mcptransport.SSE
		t, err = mcptransport.NewSSE(cfg.URL, client.WithHeaders(cfg.Headers), mcptransport.WithSSELogger(log))
		if err == nil {
			s.client = client.NewClient(t, protocol)
		}
	case HTTP:
		var t *mcptransport.StreamableHTTP
		// Listening continuously is what brings the server's
		// notifications (tools/list_changed) outside of a call.
		s.tapped = true
		t, err = mcptransport.NewStreamableHTTP(cfg.URL, mcptransport.WithHTTPHeaders(cfg.Headers),
			mcptransport.WithContinuousListening(), mcptransport.WithHTTPLogger(log),
			mcptransport.WithHTTPBasicClient(&http.Client{Transport: &logTap{base: http.DefaultTransport, sess: s}}))
		if err == nil {
			s.client = client.NewClient(&cancellingHTTP{t}, append([]client.ClientOption{protocol}, opts...)...)
		}
	default:
		err = fmt.Errorf("unknown transport %q", cfg.Transport)
	}
	if err != nil {
		s.end(err)
		return nil, err
	}
	s.client.OnNotification(s.notified)
	s.client.OnConnectionLost(func(err error) { s.end(fmt.Errorf("connection lost: %w", err)) })
	if err := s.client.Start(context.WithoutCancel(ctx)); err != nil {
		s.Close()
		return nil, s.explain(fmt.Errorf("start: %w", err))
	}
	s.answerRequests()
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = clientInfo
	if _, err := s.client.Initialize(ctx, req); err != nil {
		s.Close()
		return nil, s.explain(fmt.Errorf("initialize: %w", err))
	}
	// Every message, which goes to the call it comes during: the client
	// of that call chooses what it is shown (logging/setLevel at the
	// facade).
	if s.client.GetServerCapabilities().Logging != nil {
		level := mcp.SetLevelRequest{}
		level.Params.Level = mcp.LoggingLevelDebug
		if err := s.client.SetLevel(ctx, level); err != nil {
			log.Debug("logging/setLevel refused", "err", err)
		}
	}
	return s, nil
}

// startStdio starts the server's command as a process tree, so that
// every process it starts (npx starts node, which may start more) ends
// with the session, and none outlives toolbus.
func (s *session) startStdio(cfg *ServerConfig, starter *proctree.Starter) error {
	path, err := lookCommand(cfg.Command, cfg.Cwd)
	if err != nil {
		return err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW := io.Pipe()
	s.stderr = &tail{max: 4 << 10}
	env := os.Environ()
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	tree, err := starter.Start(proctree.Command{Path: path, Args: append([]string{cfg.Command}, cfg.Args...),
		Dir: cfg.Cwd, Env: env, Stdin: inR, Stdout: outW, Stderr: s.stderr, Grace: stdioGrace})
	inR.Close()
	if err != nil {
		inW.Close()
		return fmt.Errorf("start %s: %w", cfg.Command, err)
	}
	s.tree = tree
	go func() {
		// The tree's end is the session's: requests waiting on the
		// server fail at the end of its output.
		status, err := tree.Wait()
		outW.Close()
		if err == nil {
			err = fmt.Errorf("the server process exited (%s)", describeStatus(status))
		}
		s.end(s.explain(err))
	}()
	s.client = client.NewClient(mcptransport.NewIO(outR, inW, io.NopCloser(strings.NewReader(""))), protocol, askable(events.ServerRequestMethods))
	return nil
}

// stdioGrace is how long a stdio server has between SIGTERM and SIGKILL,
// and stdioExit how long it has to exit on its own once its input ends,
// as the MCP specification asks a client to end a stdio server.
const (
	stdioGrace = 2 * time.Second
	stdioExit  = time.Second
)

// describeStatus says how a process ended. A signal goes by its name
// (SIGKILL): its String ("killed") would read "killed by killed".
func describeStatus(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		name := unix.SignalName(ws.Signal())
		if name == "" {
			name = fmt.Sprintf("signal %d", int(ws.Signal()))
		}
		return "killed by " + name
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// lookCommand finds a stdio server's program as a shell would, a relative
// path with a slash taken from the server's directory.
func lookCommand(command, dir string) (string, error) {
	if command == "" {
		return "", errors.New("no command")
	}
	if strings.Contains(command, "/") && !filepath.IsAbs(command) && dir != "" {
		command = filepath.Join(dir, command)
	}
	path, err := exec.LookPath(command)
	if err != nil {
		return "", fmt.Errorf("command %q: %w", command, err)
	}
	return path, nil
}

// ended reports whether the session ended.
func (s *session) ended() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// end records why the session ended, once, and closes dead.
func (s *session) end(cause error) {
	s.deadOnce.Do(func() {
		s.cause = cause
		close(s.dead)
	})
}

// Close ends the session: the client, and a stdio server's processes.
func (s *session) Close() {
	s.end(errors.New("closed"))
	if s.client != nil {
		s.client.Close() // a stdio server's input ends
	}
	if s.tree != nil {
		select {
		case <-s.tree.Done():
		case <-time.After(stdioExit):
			s.tree.Stop()
			<-s.tree.Done()
		}
	}
}

// explain adds what a stdio server last wrote to stderr to err, which is
// often the only account of why it failed.
func (s *session) explain(err error) error {
	if s.stderr == nil {
		return err
	}
	if last := s.stderr.String(); last != "" {
		return fmt.Errorf("%w; its stderr ends with: %s", err, last)
	}
	return err
}

// explainIfDead says why err happened when it is the session's end.
func (s *session) explainIfDead(err error) error {
	select {
	case <-s.dead:
		return fmt.Errorf("%w (%v)", err, s.cause)
	default:
		return err
	}
}

// notified handles the server's notifications.
func (s *session) notified(n mcp.JSONRPCNotification) {
	switch n.Method {
	case string(mcp.MethodNotificationToolsListChanged), string(mcp.MethodNotificationPromptsListChanged),
		string(mcp.MethodNotificationResourcesListChanged):
		if s.onListChanged != nil {
			s.onListChanged()
		}
	case string(mcp.MethodNotificationMessage):
		s.logged(n)
	case mcp.MethodNotificationResourceUpdated:
		if updated := s.onUpdated.Load(); updated != nil {
			if uri, _ := n.Params.AdditionalFields["uri"].(string); uri != "" {
				(*updated)(uri)
			}
		}
	case string(mcp.MethodNotificationProgress):
		p := mcp.ProgressNotificationParams{}
		f := n.Params.AdditionalFields
		p.ProgressToken = f["progressToken"]
		p.Progress, _ = f["progress"].(float64)
		p.Total, _ = f["total"].(float64)
		p.Message, _ = f["message"].(string)
		s.progressMu.Lock()
		handle := s.progress[fmt.Sprint(p.ProgressToken)]
		s.progressMu.Unlock()
		if handle != nil {
			handle(p)
		}
	}
}

// watchProgress gives a call its progress token, sending the server's
// progress notifications for it to handle until done is called.
func (s *session) watchProgress(token string, handle func(mcp.ProgressNotificationParams)) (done func()) {
	s.progressMu.Lock()
	s.progress[token] = handle
	s.progressMu.Unlock()
	return func() {
		s.progressMu.Lock()
		delete(s.progress, token)
		s.progressMu.Unlock()
	}
}

// listTools lists the server's tools, every page, each with its schemas,
// annotations, icons and _meta kept as the server wrote them (listedTool).
// mcp-go's Client.ListTools decodes a schema into its ToolArgumentsSchema,
// which keeps type, properties, required, $defs and additionalProperties
// and drops every other keyword ($schema, a top-level oneOf or allOf, a
// description, ...), and annotations and icons into structs that drop
// every key they do not know: the catalogue, and every agent after it,
// would be given a tool other than the server's. So the request goes to
// the session's transport, under an id of toolbus's own, which mcp-go's
// numeric ids cannot collide with.
func (s *session) listTools(ctx context.Context) ([]listedTool, error) {
	var tools []listedTool
	seen := map[mcp.Cursor]bool{}
	var cursor mcp.Cursor
	for {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		id := mcp.NewRequestId(fmt.Sprintf("toolbus-tools-list-%d", s.nextListID.Add(1)))
		resp, err := s.client.GetTransport().SendRequest(ctx, mcptransport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION, ID: id, Method: string(mcp.MethodToolsList), Params: params})
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, resp.Error.AsError()
		}
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor mcp.Cursor        `json:"nextCursor"`
		}
		if err := json.Unmarshal(resp.Result, &page); err != nil {
			return nil, fmt.Errorf("the tools/list result does not decode: %w", err)
		}
		for _, raw := range page.Tools {
			def, err := decodeTool(raw)
			if err != nil {
				return nil, err
			}
			tools = append(tools, def)
		}
		if page.NextCursor == "" {
			return tools, nil
		}
		if seen[page.NextCursor] {
			return nil, fmt.Errorf("tools/list gave the cursor %q twice", page.NextCursor)
		}
		seen[page.NextCursor] = true
		cursor = page.NextCursor
	}
}

// listedTool is one tools/list entry: what mcp-go decodes of it, with
// its schemas as the server wrote them (RawInputSchema, RawOutputSchema),
// and its annotations, icons and _meta as the server wrote them (nil when
// it sent none).
type listedTool struct {
	mcp.Tool
	annotations, icons, meta json.RawMessage
}

// decodeTool is one tools/list entry with its schemas, annotations, icons
// and _meta as sent.
func decodeTool(raw json.RawMessage) (listedTool, error) {
	var def listedTool
	if err := json.Unmarshal(raw, &def.Tool); err != nil {
		return def, fmt.Errorf("a tool of the tools/list result does not decode: %w", err)
	}
	var sent struct {
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
		Annotations  json.RawMessage `json:"annotations"`
		Icons        json.RawMessage `json:"icons"`
		Meta         json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &sent); err != nil {
		return def, fmt.Errorf("tool %q: %w", def.Name, err)
	}
	if in := given(sent.InputSchema); in != nil {
		def.InputSchema, def.RawInputSchema = mcp.ToolInputSchema{}, in
	}
	if out := nonEmpty(sent.OutputSchema); out != nil {
		def.OutputSchema, def.RawOutputSchema = mcp.ToolOutputSchema{}, out
	}
	def.annotations, def.icons, def.meta = nonEmpty(sent.Annotations), nonEmpty(sent.Icons), nonEmpty(sent.Meta)
	return def, nil
}

// given is raw, or nil when the server gave nothing there (no key, or
// null).
func given(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	return raw
}

// nonEmpty is given, and nil for an empty object or array too, which
// says nothing and which the catalogue does not keep: a tool declared
// with one would differ from its catalogue entry at every listing.
func nonEmpty(raw json.RawMessage) json.RawMessage {
	raw = given(raw)
	if len(raw) > 0 && len(raw) < 16 {
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil && (b.String() == "{}" || b.String() == "[]") {
			return nil
		}
	}
	return raw
}

// cancellingHTTP is the streamable-HTTP transport, which tells the server
// when a call is cancelled: mcp-go sends notifications/cancelled over
// stdio only, and leaves it to the end of the request's stream over
// HTTP, which a server of protocol 2025-11-25 or earlier does not take
// for a cancel. Embedding the transport keeps every interface it
// implements.
type cancellingHTTP struct{ *mcptransport.StreamableHTTP }

func (c *cancellingHTTP) SendRequest(ctx context.Context, req mcptransport.JSONRPCRequest) (*mcptransport.JSONRPCResponse, error) {
	resp, err := c.StreamableHTTP.SendRequest(ctx, req)
	if err != nil && ctx.Err() != nil && req.Method == string(mcp.MethodToolsCall) {
		n := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION, Notification: mcp.Notification{
			Method: string(mcp.MethodNotificationCancelled),
			Params: mcp.NotificationParams{AdditionalFields: map[string]any{"requestId": req.ID, "reason": context.Cause(ctx).Error()}},
		}}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), cancelSendTimeout)
			defer cancel()
			_ = c.StreamableHTTP.SendNotification(ctx, n)
		}()
	}
	return resp, err
}

// cancelSendTimeout bounds sending a cancellation.
const cancelSendTimeout = 5 * time.Second

// debugOnly passes on what a library logs at debug level, whatever level
// it logged it at.
type debugOnly struct{ slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.Handler.Enabled(ctx, slog.LevelDebug)
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.Handler.Handle(ctx, r)
}

func (d debugOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return debugOnly{d.Handler.WithAttrs(attrs)}
}

func (d debugOnly) WithGroup(name string) slog.Handler { return debugOnly{d.Handler.WithGroup(name)} }

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(strings.ToValidUTF8(string(t.b), "?"))
}
