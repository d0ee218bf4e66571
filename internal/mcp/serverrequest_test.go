package mcp_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/mcpsession"
)

// serveAskingEnv makes the test binary the asking server over stdio.
const serveAskingEnv = "TOOLBUS_MCP_TEST_STDIO_ASKING"

// newAskingServer is a server whose tools ask their client during the
// call, with mcp-go's own server: "ask_model" samples the client's model
// with its prompt (mcp-go's streamable-HTTP server sends that on the
// session's standalone stream, where it names no call), "ask_user" asks
// the client's user its message (on the call's own stream), and
// "ask_together" asks its marker, by sampling or elicitation (how), once
// two of its calls are in flight, so that two callers' requests overlap.
func newAskingServer() *server.MCPServer {
	s := server.NewMCPServer("asking", "1.0", server.WithToolCapabilities(true), server.WithElicitation())
	s.EnableSampling()
	sample := func(ctx context.Context, prompt string) (string, error) {
		res, err := s.RequestSampling(ctx, mcp.CreateMessageRequest{CreateMessageParams: mcp.CreateMessageParams{
			Messages:  []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent(prompt)}},
			MaxTokens: 50,
		}})
		if err != nil {
			return "", err
		}
		text, _ := res.Content.(mcp.TextContent)
		return "model said: " + text.Text, nil
	}
	elicit := func(ctx context.Context, message string) (string, error) {
		res, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{Message: message,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"answer": map[string]any{"type": "string"}}}}})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("user said: %s %v", res.Action, res.Content), nil
	}
	reply := func(text string, err error) (*mcp.CallToolResult, error) {
		if err != nil {
			return mcp.NewToolResultError("the request failed: " + err.Error()), nil
		}
		return mcp.NewToolResultText(text), nil
	}
	s.AddTool(mcp.NewTool("ask_model", mcp.WithString("prompt")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return reply(sample(ctx, req.GetString("prompt", "")))
	})
	s.AddTool(mcp.NewTool("ask_user", mcp.WithString("message")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return reply(elicit(ctx, req.GetString("message", "")))
	})
	var mu sync.Mutex
	entered, both := 0, make(chan struct{})
	s.AddTool(mcp.NewTool("ask_together", mcp.WithString("marker"), mcp.WithString("how")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		met := both
		if entered++; entered == 2 {
			close(both)
			entered, both = 0, make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-met:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if req.GetString("how", "") == "sample" {
			return reply(sample(ctx, req.GetString("marker", "")))
		}
		return reply(elicit(ctx, req.GetString("marker", "")))
	})
	return s
}

// askedClient is the person and the model behind an MCP client of the
// facade: each answers with its name and what it was asked, and keeps
// what it was asked.
type askedClient struct {
	name string
	mu   sync.Mutex
	seen []string
}

func (a *askedClient) saw(what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, what)
}

func (a *askedClient) asked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func (a *askedClient) CreateMessage(ctx context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	var prompt string
	if len(req.Messages) > 0 {
		// As the transport decoded it: a map until parsed.
		content, err := mcp.ParseSamplingContent(req.Messages[0].Content)
		if tc, ok := content.(mcp.TextContent); ok && err == nil {
			prompt = tc.Text
		}
	}
	a.saw(prompt)
	return &mcp.CreateMessageResult{Model: "test", SamplingMessage: mcp.SamplingMessage{Role: mcp.RoleAssistant,
		Content: mcp.NewTextContent(a.name + " answers " + prompt)}}, nil
}

func (a *askedClient) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	a.saw(req.Params.Message)
	if strings.Contains(req.Params.Message, "toolbus asks you to confirm") {
		// toolbus's own approval of an untrusted server's call.
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept}}, nil
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"answer": a.name + " answers " + req.Params.Message}}}, nil
}

// askingFleet is a fleet with the asking server as its one MCP server,
// named "asking", at the configuration's entry server ("httpUrl": …, or
// a command), and the facade over HTTP; it returns the facade's URL.
func askingFleet(t *testing.T, entry string, trusted bool) string {
	t.Helper()
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers": {"asking": {%s, "trust": %v}}}`, entry, trusted)))
	f.waitState(t, "asking", events.MCPConnected)
	url := serveFacade(t, f.bus)
	f.waitTool(t, "ask_together")
	return url
}

func httpAskingFleet(t *testing.T, trusted bool) string {
	t.Helper()
	return askingFleet(t, fmt.Sprintf(`"httpUrl": %q`, httpServer(t, newAskingServer(), nil)), trusted)
}

// answering is a client of the facade at url, named name, whose model
// and user answer.
func answering(t *testing.T, url, name string) (*mcpclient.Client, *askedClient) {
	t.Helper()
	a := &askedClient{name: name}
	return connectHTTP(t, url, "", name, mcpclient.WithSamplingHandler(a), mcpclient.WithElicitationHandler(a)), a
}

// A backend server's sampling and elicitation requests during a call
// reach the client that made the call, and its answers reach the server:
// the tool's result shows them. Over streamable HTTP, the elicitation
// comes on the call's own stream and the sampling (mcp-go's server) on
// the session's standalone stream; over stdio, on the one stream.
func TestBackendRequestsReachTheCaller(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for name, entry := range map[string]string{
		"http":  "",
		"stdio": fmt.Sprintf(`"command": %q, "env": {%q: "1"}`, exe, serveAskingEnv),
	} {
		t.Run(name, func(t *testing.T) {
			var url string
			if entry == "" {
				url = httpAskingFleet(t, true)
			} else {
				url = askingFleet(t, entry, true)
			}
			c, a := answering(t, url, "alice")
			if res := callTool(t, c, "ask_model", `{"prompt":"what is 6 x 7?"}`); res.IsError || text(res) != "model said: alice answers what is 6 x 7?" {
				t.Errorf("ask_model: %v %q", res.IsError, text(res))
			}
			if res := callTool(t, c, "ask_user", `{"message":"Which repository?"}`); res.IsError || text(res) != "user said: accept map[answer:alice answers Which repository?]" {
				t.Errorf("ask_user: %v %q", res.IsError, text(res))
			}
			if got, want := a.asked(), []string{"what is 6 x 7?", "Which repository?"}; strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("the client was asked %q, want %q", got, want)
			}
		})
	}
}

// Two clients whose calls of one server overlap are each asked their own
// call's requests, never the other's, by sampling and by elicitation.
func TestBackendRequestsOfOverlappingCallsReachTheirOwnCallers(t *testing.T) {
	t.Parallel()
	url := httpAskingFleet(t, true)
	clients := map[string]*askedClient{}
	var wg sync.WaitGroup
	for _, name := range []string{"alice", "bob"} {
		c, a := answering(t, url, name)
		clients[name] = a
		wg.Go(func() {
			for i := range 3 {
				for _, how := range []string{"sample", "elicit"} {
					marker := fmt.Sprintf("secret %d of %s", i, name)
					res := callTool(t, c, "ask_together", fmt.Sprintf(`{"marker":%q,"how":%q}`, marker, how))
					if res.IsError || !strings.Contains(text(res), name+" answers "+marker) {
						t.Errorf("%s, %s: %v %q", name, how, res.IsError, text(res))
					}
				}
			}
		})
	}
	wg.Wait()
	for name, a := range clients {
		asked := a.asked()
		if len(asked) != 6 {
			t.Errorf("%s was asked %d times, want 6: %q", name, len(asked), asked)
		}
		for _, q := range asked {
			if !strings.HasSuffix(q, " of "+name) {
				t.Errorf("%s was asked %q", name, q)
			}
		}
	}
}

// A client that declared neither sampling nor elicitation is never asked:
// the server's request fails at once, and the tool says so.
func TestBackendRequestFailsWhenTheClientCannotAnswer(t *testing.T) {
	t.Parallel()
	url := httpAskingFleet(t, true)
	c := connectHTTP(t, url, "", "mute")
	for tool, args := range map[string]string{"ask_model": `{"prompt":"hi"}`, "ask_user": `{"message":"hi"}`} {
		res := callTool(t, c, tool, args)
		if !res.IsError || !strings.Contains(text(res), "the request failed") || !strings.Contains(text(res), "toolbus:") {
			t.Errorf("%s: %v %q; want the server's request refused by toolbus", tool, res.IsError, text(res))
		}
	}
}

// An untrusted server may not ask the agent's user anything (it could ask
// for a secret): its elicitation fails at once, while its sampling
// reaches the client. (toolbus's own approval of its calls, which the
// default policy asks for, is the user's too.)
func TestUntrustedBackendMayNotAskTheUser(t *testing.T) {
	t.Parallel()
	url := httpAskingFleet(t, false)
	c, a := answering(t, url, "alice")
	res := callTool(t, c, "ask_user", `{"message":"Your GitHub token?"}`)
	if !res.IsError || !strings.Contains(text(res), `MCP server "asking" is not trusted`) {
		t.Errorf("ask_user: %v %q; want the policy's refusal", res.IsError, text(res))
	}
	if res := callTool(t, c, "ask_model", `{"prompt":"hi"}`); res.IsError || text(res) != "model said: alice answers hi" {
		t.Errorf("ask_model: %v %q", res.IsError, text(res))
	}
	for _, q := range a.asked() {
		if strings.Contains(q, "token") && !strings.Contains(q, "toolbus asks you to confirm") {
			t.Errorf("the user was asked %q", q)
		}
	}
}

// A client of protocol 2026-07-28 cannot be sent a request of the
// facade's own: a backend's request during its call comes to it as an
// input-required result of the call, and its retry carries the answer to
// the server.
func TestBackendRequestsReachAModernCaller(t *testing.T) {
	t.Parallel()
	url := httpAskingFleet(t, true)
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPLogger(bustest.Quiet()), transport.WithHTTPHeaders(testAuth))
	if err != nil {
		t.Fatal(err)
	}
	a := &askedClient{name: "modern"}
	c := mcpclient.NewClient(tr, mcpclient.WithSamplingHandler(a), mcpclient.WithElicitationHandler(a))
	mcpsession.InitializeModern(t, c, "modern-client", "1.0")
	if res := callTool(t, c, "ask_user", `{"message":"Which repository?"}`); res.IsError || text(res) != "user said: accept map[answer:modern answers Which repository?]" {
		t.Errorf("ask_user: %v %q", res.IsError, text(res))
	}
	if res := callTool(t, c, "ask_model", `{"prompt":"what is 6 x 7?"}`); res.IsError || text(res) != "model said: modern answers what is 6 x 7?" {
		t.Errorf("ask_model: %v %q", res.IsError, text(res))
	}
	if got, want := a.asked(), []string{"Which repository?", "what is 6 x 7?"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the client was asked %q, want %q", got, want)
	}
}

// Over stdio a request names no call: while two callers' calls are in
// flight on the server, a request fails at once; neither caller is ever
// asked the other's. (Once one call has ended, the other's request may
// reach its own caller: then it is the only call in flight.)
func TestBackendRequestsOverStdioNeedOneCallInFlight(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	url := askingFleet(t, fmt.Sprintf(`"command": %q, "env": {%q: "1"}`, exe, serveAskingEnv), true)
	clients := map[string]*askedClient{}
	var wg sync.WaitGroup
	for _, name := range []string{"alice", "bob"} {
		c, a := answering(t, url, name)
		clients[name] = a
		wg.Go(func() {
			res := callTool(t, c, "ask_together", fmt.Sprintf(`{"marker":"secret of %s","how":"elicit"}`, name))
			refused := res.IsError && strings.Contains(text(res), "not one call in flight")
			own := !res.IsError && strings.Contains(text(res), name+" answers secret of "+name)
			if !refused && !own {
				t.Errorf("%s: %v %q; want the request refused, or answered by its own caller", name, res.IsError, text(res))
			}
		})
	}
	wg.Wait()
	refusals := 0
	for name, a := range clients {
		asked := a.asked()
		for _, q := range asked {
			if q != "secret of "+name {
				t.Errorf("%s was asked %q", name, q)
			}
		}
		if len(asked) == 0 {
			refusals++
		}
	}
	// Both calls were in flight when the first request came: that one at
	// least was refused.
	if refusals == 0 {
		t.Error("both callers were asked while both calls were in flight")
	}
}
