package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/testkit"
)

// mcpSource is an MCP server over streamable HTTP at a fixed address,
// which a test stops and starts again, and whose tools it changes: a
// tool source of `toolbus up`. It always has echo; extra tools come and
// go with SetExtra.
type mcpSource struct {
	addr string
	mcp  *server.MCPServer

	mu    sync.Mutex
	http  *httptest.Server // nil while stopped
	extra []string
}

func newMCPSource(t *testing.T) *mcpSource {
	t.Helper()
	s := &mcpSource{addr: testkit.UnusedAddr(t), mcp: server.NewMCPServer("health-source", "1.0.0", server.WithToolCapabilities(true))}
	s.mcp.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echoes its message"), mcp.WithString("message", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("Echo: " + req.GetString("message", "")), nil
		})
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

// URL is the server's endpoint.
func (s *mcpSource) URL() string { return "http://" + s.addr + "/mcp" }

// start serves it at its address.
func (s *mcpSource) start(t *testing.T) {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	// The address was the server's a moment ago: a listener the kernel
	// has not let go of yet is waited for.
	if !testkit.Poll(testkit.DefaultWait, func() bool {
		ln, err = net.Listen("tcp", s.addr)
		return err == nil
	}) {
		t.Fatalf("listen on %s again: %v", s.addr, err)
	}
	srv := httptest.NewUnstartedServer(server.NewStreamableHTTPServer(s.mcp))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	s.mu.Lock()
	s.http = srv
	s.mu.Unlock()
}

// stop stops serving and drops every session.
func (s *mcpSource) stop() {
	s.mu.Lock()
	srv := s.http
	s.http = nil
	s.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

// SetExtra makes names the server's extra tools, in place of the ones
// before, and tells its clients their tools changed.
func (s *mcpSource) SetExtra(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.extra) > 0 {
		s.mcp.DeleteTools(s.extra...)
	}
	for _, name := range names {
		s.mcp.AddTool(mcp.NewTool(name, mcp.WithDescription("An extra tool that comes and goes")),
			func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText(name), nil
			})
	}
	s.extra = names
}

// readyz is /readyz of the metrics endpoint at addr: its status code and
// body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// waitReadyz polls /readyz until ok holds for its answer, and returns
// the body.
func waitReadyz(t *testing.T, addr, what string, ok func(code int, body string) bool) string {
	t.Helper()
	var (
		code int
		body string
	)
	if !testkit.Poll(time.Minute, func() bool {
		code, body = readyz(t, addr)
		return ok(code, body)
	}) {
		t.Fatalf("never: %s; /readyz answers %d %q", what, code, body)
	}
	return body
}

func isReady(code int, body string) bool { return code == http.StatusOK && body == "ready\n" }

// upHealth is a `toolbus up` of healthUp's.
type upHealth struct {
	*daemon
	url, metrics, policyDir, data string
}

// healthUp starts `toolbus up` with src as its MCP server "web", a
// policy directory of its own (a copy of the default policy) and
// metrics on a port of their own.
func healthUp(t *testing.T, src *mcpSource, extra ...string) *upHealth {
	t.Helper()
	settings := writeFile(t, "settings.json", fmt.Sprintf(`{"mcpServers": {"web": {"httpUrl": %q, "trust": true}}}`, src.URL()))
	policyDir := t.TempDir()
	files, err := filepath.Glob("../../policy/*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("the default policy: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(policyDir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	metrics, data := testkit.UnusedAddr(t), t.TempDir()
	args := append([]string{"--data", data, "--settings", settings, "--policy", policyDir, "--metrics", metrics, "--console", "off", "--mcp-listen", "off"}, extra...)
	up, url := upWith(t, args...)
	return &upHealth{daemon: up, url: url, metrics: metrics, policyDir: policyDir, data: data}
}

var madeExecutorID = regexp.MustCompile(`^executor@[^ ]+-[0-9a-f]{6}$`)

// TestReadyzTellsTheTruth: `toolbus up`'s /readyz fails, saying why, while
// the MCP server it hosts is down past its retries and while the policy
// it follows does not load, and is ready again once each mends; its log
// says so once each time it turns. Its executor has an id of its own,
// which `mcp status` shows.
func TestReadyzTellsTheTruth(t *testing.T) {
	t.Parallel()
	src := newMCPSource(t)
	up := healthUp(t, src)
	url, metrics, policyDir := up.url, up.metrics, up.policyDir
	waitReadyz(t, metrics, "ready with web connected", isReady)

	// The executor's id is its own, and mcp status shows it.
	var states []map[string]any
	testkit.Eventually(t, "mcp status shows web connected", func() bool {
		out, _, code := toolbus(t, "mcp", "status", "--json", "--nats", url)
		states = nil
		return code == 0 && json.Unmarshal([]byte(out), &states) == nil && len(states) == 1 && states[0]["state"] == "connected"
	})
	id, _ := states[0]["executor"].(string)
	if !madeExecutorID.MatchString(id) {
		t.Errorf("mcp status says web is hosted by %q; want executor@HOST-XXXXXX", id)
	}

	// The MCP server goes, past its retries, and comes back; a discovery
	// connects to it again at once.
	src.stop()
	body := waitReadyz(t, metrics, "unready with web down", func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, `mcp: MCP server "web" is down since`)
	})
	if strings.Contains(body, "catalogue") || strings.Contains(body, "policy") {
		t.Errorf("/readyz blames more than web: %q", body)
	}
	src.start(t)
	// It answers that it is connecting again, which it does at once.
	toolbus(t, "tools", "discover", "--server", "web", "--nats", url)
	waitReadyz(t, metrics, "ready with web back", isReady)
	if out, errOut, code := toolbus(t, "call", "echo", "--args", `{"message":"back"}`, "--nats", url); code != 0 || !strings.Contains(out, "Echo: back") {
		t.Errorf("echo after web came back: exit %d %q %s", code, out, errOut)
	}

	// A policy edit that does not load leaves the old policy in force,
	// and the executor unready until the file is mended.
	broken := filepath.Join(policyDir, "zz_broken.rego")
	if err := os.WriteFile(broken, []byte("package toolbus\ndecision := {"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, metrics, "unready with a policy that does not load", func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, "policy: ") && strings.Contains(body, "did not load")
	})
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, metrics, "ready with the policy mended", isReady)

	up.stop(t)
	log := up.output.String()
	if !strings.Contains(log, "executor="+id) {
		t.Errorf("the log does not name executor %s:\n%s", id, log)
	}
	for _, want := range []string{`msg="not ready" why="mcp: MCP server \"web\" is down since`, `msg="not ready" why="policy: `} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("the log says %s %d times, want once:\n%s", want, n, log)
		}
	}
	if n := strings.Count(log, "msg=ready"); n < 3 {
		t.Errorf("the log says ready %d times, want at start and after each mend:\n%s", n, log)
	}
}
