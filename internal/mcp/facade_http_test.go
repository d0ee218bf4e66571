package mcp_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

// The endpoint's own Host and Origin checks, tried with a client's valid
// token so that only they can refuse. mcp-go refuses on a loopback
// connection any Host that is not a loopback name; the endpoint, on
// loopback, takes only its own names and port, and an Origin only when it
// is the Host the request was sent to, as a browser reckons an origin. On
// another address it checks no Host (its clients name it as their network
// does), and an Origin must still be the Host.
func TestFacadeHTTPChecksHostAndOrigin(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	serve := func(addr func(port int) *net.TCPAddr) (url string, port string) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		srv := httptest.NewUnstartedServer(ff.facade.HTTPHandler(toolmcp.HTTPConfig{Addr: addr(p), Tokens: clientTokens(t, "tester", testToken)}))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return srv.URL + toolmcp.HTTPPath, strconv.Itoa(p)
	}
	// What opens a session: served whole when let by.
	const opening = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}`
	send := func(url, host, origin, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(opening))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", auth)
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("Host %q, Origin %q: %v", host, origin, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bearer := "Bearer " + testToken

	loopback, p := serve(func(port int) *net.TCPAddr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port} })
	for _, c := range []struct {
		what, host, origin, auth string
		want                     int
	}{
		{"its own address", "", "", bearer, http.StatusOK},
		{"its own name, in capitals", "LOCALHOST:" + p, "", bearer, http.StatusOK},
		{"another loopback address", "127.0.0.2:" + p, "", bearer, http.StatusForbidden},
		{"another port", "localhost:1", "", bearer, http.StatusForbidden},
		{"a rebound name", "rebound.example:" + p, "", bearer, http.StatusForbidden},
		{"its own origin", "", "http://127.0.0.1:" + p, bearer, http.StatusOK},
		{"another of its names as the origin", "", "http://localhost:" + p, bearer, http.StatusForbidden},
		{"another site", "", "http://evil.example", bearer, http.StatusForbidden},
		{"an origin that is no URL", "", "http://[::1", bearer, http.StatusForbidden},
		{"the token under another scheme", "", "", "Basic " + testToken, http.StatusUnauthorized},
		{"the token under no scheme", "", "", testToken, http.StatusUnauthorized},
		{"the scheme in capitals", "", "", "BEARER " + testToken, http.StatusOK},
	} {
		if got := send(loopback, c.host, c.origin, c.auth); got != c.want {
			t.Errorf("on loopback, %s: %d, want %d", c.what, got, c.want)
		}
	}

	// Served on loopback for the test, configured as another address's:
	// the Hosts that reach it are loopback names, which mcp-go lets by.
	other, p := serve(func(port int) *net.TCPAddr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: port} })
	for _, c := range []struct {
		what, host, origin string
		want               int
	}{
		{"any name", "127.0.0.2:" + p, "", http.StatusOK},
		{"its Host as the origin", "127.0.0.2:" + p, "http://127.0.0.2:" + p, http.StatusOK},
		{"another site", "127.0.0.2:" + p, "http://evil.example", http.StatusForbidden},
	} {
		if got := send(other, c.host, c.origin, bearer); got != c.want {
			t.Errorf("on another address, %s: %d, want %d", c.what, got, c.want)
		}
	}
}

// While the clients' tokens cannot be read, every request is refused
// 401, and the log says so once for each run of failures, however many
// requests a client sends meanwhile.
func TestFacadeHTTPTellsOnceThatTheTokensCannotBeRead(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	conn := bustest.Connect(t, f.Bus)
	var log testkit.Buffer
	fac, err := toolmcp.StartFacade(context.Background(), toolmcp.FacadeConfig{Conn: conn.Conn(), JS: conn.JetStream(), User: "ada",
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fac.Close()
	good := clientTokens(t, "tester", testToken)
	var broken atomic.Bool
	srv := httptest.NewServer(fac.HTTPHandler(toolmcp.HTTPConfig{Tokens: func() (*toolmcp.Tokens, error) {
		if broken.Load() {
			return nil, errors.New("the tokens file is unreadable")
		}
		return good()
	}}))
	defer srv.Close()
	send := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+toolmcp.HTTPPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	told := func() int { return strings.Count(log.String(), "the clients' tokens cannot be read") }
	broken.Store(true)
	for range 3 {
		if code := send(); code != http.StatusUnauthorized {
			t.Fatalf("a request while the tokens cannot be read: %d", code)
		}
	}
	if n := told(); n != 1 {
		t.Errorf("three refused requests are told %d times, want once:\n%s", n, log.String())
	}
	broken.Store(false)
	if code := send(); code != http.StatusOK {
		t.Fatalf("a request once the tokens are read again: %d", code)
	}
	broken.Store(true)
	send()
	if n := told(); n != 2 {
		t.Errorf("a second run of failures is told %d times in all, want twice:\n%s", n, log.String())
	}
}
