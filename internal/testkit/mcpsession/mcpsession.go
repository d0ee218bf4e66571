// Package mcpsession drives mcp-go clients in tests: a session started
// and initialised, a tool called, a result's text. (mcp-go's own mcptest
// starts servers; this package is the client's side.)
//
// Only tests import this package.
package mcpsession

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// Initialize starts c and initialises its session as name/version, with
// the protocol the MCP clients of today speak (sessions, initialize). c is
// closed when the test ends. What the transport starts (a stdio
// subprocess, an HTTP GET stream) lives as long as the context Start is
// given: the client's, not the handshake's.
func Initialize(t testing.TB, c *mcpclient.Client, name, version string) {
	t.Helper()
	connect(t, c, name, version, mcp.LATEST_LEGACY_PROTOCOL_VERSION)
}

// InitializeModern starts c and connects it as name/version with protocol
// 2026-07-28 (stateless: server/discover, the protocol in every request's
// _meta), failing the test when the server does not speak it. c is closed
// when the test ends.
func InitializeModern(t testing.TB, c *mcpclient.Client, name, version string) {
	t.Helper()
	connect(t, c, name, version, mcp.ProtocolVersion20260728)
	if v := c.ProtocolVersion(); v != mcp.ProtocolVersion20260728 {
		t.Fatalf("the client speaks %q with the server, not %s", v, mcp.ProtocolVersion20260728)
	}
}

// connect starts c and connects it as name/version asking for protocol.
func connect(t testing.TB, c *mcpclient.Client, name, version, protocol string) {
	t.Helper()
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	if err := c.Start(life); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = protocol
	init.Params.ClientInfo = mcp.Implementation{Name: name, Version: version}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
}

// Call calls tool name with args, a JSON object, and fails the test when
// the call gets no result at all (an error result is a result).
func Call(t testing.TB, c *mcpclient.Client, name, args string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = json.RawMessage(args)
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// Text is the text parts of r, a line each.
func Text(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
