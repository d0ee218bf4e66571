package mcp_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// linesOf are the lines of out that contain containing.
func linesOf(out *testkit.Buffer, containing string) []string {
	var lines []string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if strings.Contains(l, containing) {
			lines = append(lines, l)
		}
	}
	return lines
}

// Start-up says what went wrong once per server, not once per tool or
// per retry: two servers of the same twelve tools, of which the second's
// go under other names, log one summary each; a server that stays down
// warns once, however often it is tried again.
func TestStartUpWarnsOncePerServer(t *testing.T) {
	t.Parallel()
	same := func() *server.MCPServer {
		s := server.NewMCPServer("twin", "1.0", server.WithToolCapabilities(true))
		for i := range 12 {
			s.AddTool(mcp.NewTool(fmt.Sprintf("twin-tool-%d", i)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			})
		}
		return s
	}
	out := &testkit.Buffer{}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f := startFleetWith(t, parse(t, fmt.Sprintf(`{"mcpServers": {"one": {"httpUrl": %q}, "two": {"httpUrl": %q}, "down": {"httpUrl": "http://127.0.0.1:1/mcp"}}}`,
		httpServer(t, same(), nil), httpServer(t, same(), nil))), log, 50*time.Millisecond)
	f.waitState(t, "one", events.MCPConnected)
	f.waitState(t, "two", events.MCPConnected)
	f.waitState(t, "down", events.MCPDisconnected)
	if !testkit.Poll(30*time.Second, func() bool { return bucketStatus(t, f, "down").Restarts >= 4 }) {
		t.Fatal("the server that is down was not tried again four times")
	}
	if got := linesOf(out, `msg="MCP server disconnected" server=down`); len(got) != 1 {
		t.Errorf("a server down for five attempts warned %d times, want once:\n%s", len(got), strings.Join(got, "\n"))
	}
	summaries := linesOf(out, "MCP server: tools hosted with changes")
	if len(summaries) != 1 || !strings.Contains(summaries[0], "renamed=12") || !strings.Contains(summaries[0], "and 9 more") {
		t.Errorf("the hosting summaries:\n%s\nwant one, of twelve tools renamed", strings.Join(summaries, "\n"))
	}
	if got := linesOf(out, "twin-tool-11"); len(got) > 2 {
		t.Errorf("one tool is named in %d lines, want at most the two summaries:\n%s", len(got), strings.Join(got, "\n"))
	}
}
