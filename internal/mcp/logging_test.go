package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// loggingBackend is an MCP server over streamable HTTP that sends the log
// messages of a call on that call's own response stream, as the
// specification has a server do, written by hand (mcp-go's servers send a
// session's notifications on whichever of its streams reads first). Its
// tools: "chatty" logs at debug, info and error; "overlap" logs its
// marker once both of two calls are in flight, and neither returns
// before both have logged.
func loggingBackend(t *testing.T) string {
	t.Helper()
	var mu sync.Mutex
	entered, logged := 0, 0
	both, bothLogged := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name            string         `json:"name"`
				ProtocolVersion string         `json:"protocolVersion"`
				Arguments       map[string]any `json:"arguments"`
			} `json:"params"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(req.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		send := func(msg string) {
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
			w.(http.Flusher).Flush()
		}
		logMsg := func(level, logger string, data any) {
			d, _ := json.Marshal(data)
			send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":%q,"logger":%q,"data":%s}}`, level, logger, d))
		}
		result := func(res string) { send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, res)) }
		switch req.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "logs-1")
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"logs","version":"1"}}}`,
				req.ID, req.Params.ProtocolVersion)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch {
		case req.Method == "tools/list":
			result(`{"tools":[{"name":"chatty","inputSchema":{"type":"object"}},{"name":"overlap","inputSchema":{"type":"object","properties":{"marker":{"type":"string"}}}}]}`)
		case req.Method == "tools/call" && req.Params.Name == "chatty":
			for _, level := range []string{"debug", "info", "error"} {
				logMsg(level, "chatty", map[string]string{"said": level})
			}
			result(`{"content":[{"type":"text","text":"done"}]}`)
		case req.Method == "tools/call" && req.Params.Name == "overlap":
			mu.Lock()
			if entered++; entered == 2 {
				close(both)
			}
			met, done := both, bothLogged
			mu.Unlock()
			<-met
			logMsg("error", "overlap", req.Params.Arguments["marker"])
			mu.Lock()
			if logged++; logged == 2 {
				close(bothLogged)
				entered, logged = 0, 0 // the next round
				both, bothLogged = make(chan struct{}), make(chan struct{})
			}
			mu.Unlock()
			<-done
			result(`{"content":[{"type":"text","text":"done"}]}`)
		default:
			result(`{}`)
		}
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// logsOf collects the log messages a client of the facade is sent.
type logsOf struct {
	mu  sync.Mutex
	got []string
}

func (l *logsOf) notified(n mcp.JSONRPCNotification) {
	if n.Method != string(mcp.MethodNotificationMessage) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%v %v %v", n.Params.AdditionalFields["level"], n.Params.AdditionalFields["logger"], n.Params.AdditionalFields["data"]))
}

func (l *logsOf) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func loggingFleet(t *testing.T) string {
	t.Helper()
	url := loggingBackend(t)
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers": {"logs": {"httpUrl": %q, "trust": true}}}`, url)))
	f.waitState(t, "logs", events.MCPConnected)
	facadeURL := serveFacade(t, f.bus)
	f.waitTool(t, "chatty")
	return facadeURL
}

// A server's log messages during a call reach the client that made the
// call, at the level that client chose (logging/setLevel), with the
// server's logger and data.
func TestFacadeForwardsAServersLogsToItsCaller(t *testing.T) {
	t.Parallel()
	url := loggingFleet(t)
	logs := &logsOf{}
	// A client with no GET stream: mcp-go's server would send a
	// request's notifications on either stream, and two streams may
	// deliver them out of order.
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPLogger(bustest.Quiet()), transport.WithHTTPHeaders(testAuth))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	initialize(t, c, "listener")
	c.OnNotification(logs.notified)
	level := mcp.SetLevelRequest{}
	level.Params.Level = mcp.LoggingLevelInfo
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.SetLevel(ctx, level); err != nil {
		t.Fatal(err)
	}
	if res := callTool(t, c, "chatty", `{}`); res.IsError {
		t.Fatalf("chatty: %s", text(res))
	}
	want := []string{"info chatty map[said:info]", "error chatty map[said:error]"}
	// Notifications may come a moment after the result.
	deadline := time.Now().Add(10 * time.Second)
	for len(logs.all()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := logs.all(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the client was sent %q, want %q", got, want)
	}
}

// A log message names no call: while two calls of two clients are in
// flight on one server, neither is sent the other's (toolbus sends it to
// neither: it cannot tell whose it is).
func TestFacadeSendsNoClientAnotherCallersLogs(t *testing.T) {
	t.Parallel()
	url := loggingFleet(t)
	var wg sync.WaitGroup
	clients := map[string]*logsOf{"alice": {}, "bob": {}}
	for name, logs := range clients {
		c := connectHTTP(t, url, "", name)
		c.OnNotification(logs.notified)
		level := mcp.SetLevelRequest{}
		level.Params.Level = mcp.LoggingLevelDebug
		if err := c.SetLevel(context.Background(), level); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range 5 {
				if res := callTool(t, c, "overlap", fmt.Sprintf(`{"marker":"secret of %s"}`, name)); res.IsError {
					t.Errorf("overlap for %s: %s", name, text(res))
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // a late notification would come by now
	for name, logs := range clients {
		for _, l := range logs.all() {
			if !strings.Contains(l, "secret of "+name) {
				t.Errorf("%s was sent %q", name, l)
			}
		}
	}
}

// asideBackend is an MCP server over streamable HTTP that sends a call's
// log message on the session's standalone stream (its GET), where it
// names no call, as mcp-go's servers now and then do. Its one tool,
// "aside", logs its marker there (once both of two calls are in flight,
// when its argument "together" is true), and returns after a moment has
// passed for the message to be read.
func asideBackend(t *testing.T) string {
	t.Helper()
	var mu sync.Mutex
	streams := map[string]chan string{} // a session's standalone stream
	sessions := 0
	entered := 0
	both := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		if r.Method == http.MethodGet {
			mu.Lock()
			ch := streams[id]
			mu.Unlock()
			if ch == nil {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case msg := <-ch:
					fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		}
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string         `json:"protocolVersion"`
				Arguments       map[string]any `json:"arguments"`
			} `json:"params"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(req.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := func(res string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, res)
		}
		switch req.Method {
		case "initialize":
			mu.Lock()
			sessions++
			id = fmt.Sprintf("aside-%d", sessions)
			streams[id] = make(chan string, 16)
			mu.Unlock()
			w.Header().Set("Mcp-Session-Id", id)
			result(fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"aside","version":"1"}}`, req.Params.ProtocolVersion))
		case "tools/list":
			result(`{"tools":[{"name":"aside","inputSchema":{"type":"object","properties":{"marker":{"type":"string"}}}}]}`)
		case "tools/call":
			mu.Lock()
			ch := streams[id]
			met := both
			if req.Params.Arguments["together"] == true {
				if entered++; entered == 2 {
					close(both)
				}
			}
			mu.Unlock()
			if req.Params.Arguments["together"] == true {
				<-met
			}
			marker, _ := json.Marshal(req.Params.Arguments["marker"])
			ch <- fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","logger":"aside","data":%s}}`, marker)
			time.Sleep(300 * time.Millisecond) // for the stream to be read
			result(`{"content":[{"type":"text","text":"done"}]}`)
		default:
			result(`{}`)
		}
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// A log message a server sends on a session's standalone stream names no
// call. On a session of one caller's own (a caller that can answer the
// server's requests has one) it is that caller's, and reaches it; on the
// session several callers share it reaches no one. No client is ever
// sent another's, though two callers' calls are in flight at once.
func TestFacadeSendsACallersSessionLogsToItAlone(t *testing.T) {
	t.Parallel()
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers": {"aside": {"httpUrl": %q, "trust": true}}}`, asideBackend(t))))
	f.waitState(t, "aside", events.MCPConnected)
	url := serveFacade(t, f.bus)
	f.waitTool(t, "aside")

	type client struct {
		c    *mcpclient.Client
		logs *logsOf
	}
	connect := func(name string, asks bool) client {
		var opts []mcpclient.ClientOption
		if asks {
			a := &askedClient{name: name}
			opts = append(opts, mcpclient.WithSamplingHandler(a), mcpclient.WithElicitationHandler(a))
		}
		cl := client{connectHTTP(t, url, "", name, opts...), &logsOf{}}
		cl.c.OnNotification(cl.logs.notified)
		level := mcp.SetLevelRequest{}
		level.Params.Level = mcp.LoggingLevelDebug
		if err := cl.c.SetLevel(context.Background(), level); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	aside := func(name string, cl client, together bool) {
		if res := callTool(t, cl.c, "aside", fmt.Sprintf(`{"marker":"secret of %s","together":%t}`, name, together)); res.IsError {
			t.Errorf("aside for %s: %s", name, text(res))
		}
	}

	asking := map[string]client{"alice": connect("alice", true), "bob": connect("bob", true)}
	var wg sync.WaitGroup
	for name, cl := range asking {
		wg.Go(func() { aside(name, cl, true) })
	}
	wg.Wait()
	for name, cl := range asking {
		if got := cl.logs.all(); strings.Join(got, "|") != "error aside secret of "+name {
			t.Errorf("%s, on a session of its own, was sent %q, want its own message alone", name, got)
		}
	}

	// A caller that cannot answer requests shares the server's one
	// session with every other such caller: a message on its standalone
	// stream may be anyone's (a late one of another's call), so even a
	// call alone in flight there is sent none.
	carol := connect("carol", false)
	aside("carol", carol, false)
	time.Sleep(time.Second) // a late notification would come by now
	if got := carol.logs.all(); len(got) != 0 {
		t.Errorf("carol, on the shared session, was sent %q", got)
	}
}
