package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
)

// Two clients of `toolbus up`'s MCP endpoint, each with a token of its
// own, are two principals: one holding every place for calls waiting for
// its user leaves the other's edit unaffected, and the trail names each
// call's client by its credential, not by the name it gives itself.
func TestUpMCPClientsAreTheirOwnPrincipals(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "127.0.0.1:0")
	url := busURL(t, up.waitLine(t, "bus:"))
	endpoint, token := upEndpointOf(t, up.waitLine(t, "mcp serve:"), data)
	up.waitLine(t, "Press Ctrl-C to stop.")
	bobToken, errOut, code := toolbus(t, "mcp", "token", "add", "bob", "--tokens", filepath.Join(data, mcpTokensFile))
	if code != 0 {
		t.Fatalf("mcp token add: exit %d %s", code, errOut)
	}
	bobToken = strings.TrimSpace(bobToken)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The default client's user never answers; bob's accepts. Both
	// call themselves "claude-code".
	holding, held := make(chan struct{}), atomic.Int32{}
	defer close(holding)
	silent := elicitFunc(func(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
		held.Add(1)
		select {
		case <-holding:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	})
	asked := make(chan string, 4)
	hog := connectWithToken(t, endpoint, token, silent)
	bob := connectWithToken(t, endpoint, bobToken, acceptingUser(asked))

	calls, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	write := func(c *mcpclient.Client, ctx context.Context, file string) (*mcp.CallToolResult, error) {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "write_file", map[string]any{"file_path": file, "content": "x\n"}
		return c.CallTool(ctx, req)
	}
	for i := range 16 {
		wg.Go(func() { write(hog, calls, fmt.Sprintf("hold-%d.txt", i)) })
	}
	testkit.Eventually(t, "the default client's 16 edits wait for its user", func() bool { return held.Load() == 16 })
	res, err := write(hog, ctx, "one-more.txt")
	if err != nil || !res.IsError || !strings.Contains(mcpText(res), "TOO_MANY_PENDING_CONFIRMATIONS") {
		t.Fatalf("the default client's 17th edit: %v %+v", err, res)
	}
	res, err = write(bob, ctx, "bobs.txt")
	if err != nil || res.IsError {
		t.Fatalf("bob's edit beside the other client's 16: %v %+v", err, res)
	}
	if _, err := os.Stat(filepath.Join(ws, "bobs.txt")); err != nil {
		t.Fatalf("bob's edit was not made: %v", err)
	}

	var recs []struct {
		Principal string `json:"principal"`
		Outcome   string `json:"outcome"`
		Args      json.RawMessage
	}
	testkit.Poll(30*time.Second, func() bool {
		out, errOut, code := toolbus(t, "audit", "list", "--json", "--since", "1h", "--tool", "write_file", "--outcome", "OK", "--nats", url)
		if code != 0 {
			t.Fatalf("audit list: exit %d %s", code, errOut)
		}
		return json.Unmarshal([]byte(out), &recs) == nil && len(recs) == 1
	})
	if len(recs) != 1 || recs[0].Principal != "facade/bob" {
		t.Errorf("the trail's edits that ran: %+v; want bob's alone, as facade/bob", recs)
	}
	stop()
	wg.Wait()
	up.stop(t)
}

// elicitFunc is an elicitation handler of a function.
type elicitFunc func(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error)

func (f elicitFunc) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	return f(ctx, req)
}

// connectWithToken is an MCP client of endpoint with token, whose user
// is asked through handler, calling itself claude-code.
func connectWithToken(t *testing.T, endpoint, token string, handler mcpclient.ElicitationHandler) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(handler))
	mcpSession(t, c, "claude-code")
	return c
}

func mcpText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
