package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit/mcpsession"
)

// mcpSession initialises c as a named MCP client (version 2.0).
func mcpSession(t *testing.T, c *mcpclient.Client, name string) {
	t.Helper()
	mcpsession.Initialize(t, c, name, "2.0")
}

// mcpCall calls a tool and returns whether the result is an error, and
// its text.
func mcpCall(t *testing.T, c *mcpclient.Client, name, args string) (bool, string) {
	t.Helper()
	res := mcpsession.Call(t, c, name, args)
	return res.IsError, mcpsession.Text(res)
}

// An agent that starts `toolbus mcp serve` over stdio, and one that talks
// to the endpoint `toolbus up` serves, both call the fleet's tools under
// its policy.
func TestMCPServeOverStdioAndHTTP(t *testing.T) {
	// A toolbus up of its own, on free ports and its own data.
	t.Parallel()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# readme of the workspace\n"), 0o644)
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--console", "off", "--mcp-listen", "127.0.0.1:0")
	url := busURL(t, up.waitLine(t, "bus:"))
	endpoint := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(up.waitLine(t, "mcp serve:")), "mcp serve:"))
	up.waitLine(t, "Press Ctrl-C to stop.")

	stdio, err := mcpclient.NewStdioMCPClient(bin("toolbus"), append(os.Environ(), "TOOLBUS_NATS="), "mcp", "serve", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	mcpSession(t, stdio, "stdio-agent")
	httpc, err := mcpclient.NewStreamableHttpClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	mcpSession(t, httpc, "http-agent")

	for name, c := range map[string]*mcpclient.Client{"stdio": stdio, "http": httpc} {
		list, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
		if err != nil || len(list.Tools) < 10 {
			t.Fatalf("%s: tools/list: %v, %d tools", name, err, len(list.Tools))
		}
		if isErr, text := mcpCall(t, c, "read_file", `{"file_path":"README.md"}`); isErr || !strings.Contains(text, "# readme of the workspace") {
			t.Errorf("%s: read_file: %v %q", name, isErr, text)
		}
		if isErr, text := mcpCall(t, c, "run_shell_command", `{"command":"ls && rm -rf /"}`); !isErr || !strings.Contains(text, "POLICY_DENIED") || !strings.Contains(text, "rm -rf /") {
			t.Errorf("%s: chained rm: %v %q", name, isErr, text)
		}
	}

	// A client whose user confirms through elicitation: with no approver
	// running, the edit it accepts is made. Its progress token hears that
	// the call waits for approval.
	asked := make(chan string, 4)
	tr := transport.NewStdio(bin("toolbus"), append(os.Environ(), "TOOLBUS_NATS="), "mcp", "serve", "--nats", url)
	editor := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(acceptingUser(asked)))
	mcpSession(t, editor, "stdio-editor")
	progress := make(chan string, 16)
	editor.OnNotification(func(n mcp.JSONRPCNotification) {
		if msg, ok := n.Params.AdditionalFields["message"].(string); ok && n.Method == "notifications/progress" {
			progress <- msg
		}
	})
	edit := mcp.CallToolRequest{}
	edit.Params.Name = "write_file"
	edit.Params.Arguments = map[string]any{"file_path": "hello.txt", "content": "hello from the user\n"}
	edit.Params.Meta = &mcp.Meta{ProgressToken: "edit-1"}
	if res, err := editor.CallTool(context.Background(), edit); err != nil || res.IsError {
		t.Errorf("an edit the user accepted: %v %+v", err, res)
	}
	select {
	case msg := <-progress:
		if !strings.HasPrefix(msg, "waiting for approval of write_file") {
			t.Errorf("the progress while the edit waited: %q", msg)
		}
	case <-time.After(30 * time.Second):
		t.Error("no progress notification said the edit waited for approval")
	}
	select {
	case msg := <-asked:
		if !strings.Contains(msg, "+hello from the user") {
			t.Errorf("the user was not shown the diff:\n%s", msg)
		}
	default:
		t.Error("the user was not asked")
	}
	if data, err := os.ReadFile(filepath.Join(ws, "hello.txt")); err != nil || string(data) != "hello from the user\n" {
		t.Errorf("hello.txt: %q %v", data, err)
	}
	up.stop(t)
}

// acceptingUser accepts every elicitation, sending its message to asked.
type acceptingUser chan string

func (u acceptingUser) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	u <- req.Params.Message
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept}}, nil
}
