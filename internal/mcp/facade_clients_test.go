package mcp_test

import (
	"net/http"
	"strings"
	"testing"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// A session belongs to the client that opened it: another client that
// learnt its id, with a credential of its own, reaches nothing through
// it (no request, no stream, no end), and a DELETE without a credential
// ends only a session it names.
func TestFacadeSessionsBelongToTheirClient(t *testing.T) {
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
