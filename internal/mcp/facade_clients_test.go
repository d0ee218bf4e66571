package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	toolmcp "github.com/toolbus/toolbus/internal/mcp"
)

// A session belongs to the client that opened it: another client that
// learnt its id, with a credential of its own, reaches nothing through
// it (no request, no stream, no end), and a DELETE without a credential
// ends only a session it names.
func TestFacadeSessionsBelongToTheirClient(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	alice := ff.connect(t, "alice")
	sid := alice.GetSessionId()
	if sid == "" {
		t.Fatal("the client has no session")
	}
	send := func(method, token, session, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, ff.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if session != "" {
			req.Header.Set(mcpserver.HeaderKeySessionID, session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ping := `{"jsonrpc":"2.0","id":7,"method":"ping"}`
	for _, c := range []struct {
		what, method, token, session string
		want                         int
	}{
		{"another client's request on it", http.MethodPost, otherToken, sid, http.StatusNotFound},
		{"another client's stream on it", http.MethodGet, otherToken, sid, http.StatusNotFound},
		{"another client's end of it", http.MethodDelete, otherToken, sid, http.StatusNotFound},
		{"an end of no session without a credential", http.MethodDelete, "", "mcp-session-guessed", http.StatusUnauthorized},
		{"a request on it without a credential", http.MethodPost, "", sid, http.StatusUnauthorized},
	} {
		if got := send(c.method, c.token, c.session, ping); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	// Its own client still uses it.
	if got := send(http.MethodPost, testToken, sid, ping); got != http.StatusOK {
		t.Errorf("the session's own client: %d", got)
	}
	if names := toolNames(t, alice); len(names) == 0 {
		t.Error("the session's client lists no tools after the others' tries")
	}
}

// The question put to a session is answered on that session only: a
// second session of the same client, or another client's, sending an
// accept for every id the server may have used, decides nothing, and the
// asked session's own answer (a decline) is the one that counts.
func TestFacadeTakesAnAnswerFromTheAskedSessionOnly(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	asked, decide := make(chan struct{}, 1), make(chan struct{})
	user := elicitHandler(func(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		asked <- struct{}{}
		select {
		case <-decide:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
	})
	first := ff.connect(t, "editor", mcpclient.WithElicitationHandler(user))
	second := ff.connect(t, "editor", mcpclient.WithElicitationHandler(user))
	other := connectHTTP(t, ff.url, otherToken, "editor", mcpclient.WithElicitationHandler(user))
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "write_file", map[string]any{"file_path": "forged.md", "content": "x\n"}
		res, err := first.CallTool(context.Background(), req)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case <-asked:
	case <-time.After(time.Minute):
		t.Fatal("the first session's user was never asked")
	}
	// mcp-go numbers the server's requests across sessions from 1.
	for _, c := range []struct {
		token string
		sess  string
	}{{testToken, second.GetSessionId()}, {otherToken, other.GetSessionId()}} {
		for id := 1; id <= 20; id++ {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"action":"accept","content":{}}}`, id)
			req, _ := http.NewRequest(http.MethodPost, ff.url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+c.token)
			req.Header.Set(mcpserver.HeaderKeySessionID, c.sess)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	close(decide)
	res := <-done
	if res == nil || !res.IsError || !strings.Contains(text(res), "declined") {
		t.Fatalf("the edit after forged accepts and its own user's decline: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "forged.md")); err == nil {
		t.Fatal("a forged accept from another session made the edit")
	}
}

// elicitHandler is an elicitation handler of a function.
type elicitHandler func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error)

func (f elicitHandler) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	return f(ctx, req)
}

// TestOneClientCannotTakeEveryFacadeSession: a client that opens
// sessions without end gets toolmcp.MaxClientSessions of them, then none; another
// client still gets one, and the first gets one again once it ends one.
func TestOneClientCannotTakeEveryFacadeSession(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	initialize := func(token string) string {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, ff.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("initialize: %d", resp.StatusCode)
		}
		return resp.Header.Get(mcpserver.HeaderKeySessionID)
	}
	var first string
	for i := range toolmcp.MaxClientSessions {
		id := initialize(otherToken)
		if id == "" {
			t.Fatalf("session %d of a client got no id", i+1)
		}
		if first == "" {
			first = id
		}
	}
	if id := initialize(otherToken); id != "" {
		t.Fatalf("a client got session %d", toolmcp.MaxClientSessions+1)
	}
	if id := initialize(testToken); id == "" {
		t.Fatal("another client got no session while the first held its all")
	}
	req, _ := http.NewRequest(http.MethodDelete, ff.url, nil)
	req.Header.Set("Authorization", "Bearer "+otherToken)
	req.Header.Set(mcpserver.HeaderKeySessionID, first)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if id := initialize(otherToken); id == "" {
		t.Fatal("a client that ended a session got no new one")
	}
}
