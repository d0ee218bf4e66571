package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
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
	data := t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "127.0.0.1:0")
	url := busURL(t, up.waitLine(t, "bus:"))
	endpoint, token := upEndpointOf(t, up.waitLine(t, "mcp serve:"), data)
	up.waitLine(t, "Press Ctrl-C to stop.")

	// On loopback too, a client without the credential, or with a wrong
	// one, is turned away.
	for _, auth := range []string{"", "Bearer wrong-" + token, "Basic " + token} {
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %s, WWW-Authenticate %q; want 401 and a Bearer challenge", auth, resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
	}

	stdio, err := mcpclient.NewStdioMCPClient(bin("toolbus"), append(os.Environ(), "TOOLBUS_NATS="), "mcp", "serve", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	mcpSession(t, stdio, "stdio-agent")
	httpc, err := mcpclient.NewStreamableHttpClient(endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
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
	// The stdio facade, which could read the facade's seed, spoke as
	// the facade, for a client of its own that its process names, not
	// its MCP client: the trail says whose edit it was and whose user
	// answered it.
	var recs []struct {
		Principal string          `json:"principal"`
		Tool      string          `json:"tool"`
		Caller    events.Identity `json:"caller"`
		Approver  *events.Identity
	}
	testkit.Poll(30*time.Second, func() bool {
		out, errOut, code := toolbus(t, "audit", "list", "--json", "--since", "1h", "--tool", "write_file", "--nats", url)
		if code != 0 {
			t.Fatalf("audit list: exit %d %s", code, errOut)
		}
		return json.Unmarshal([]byte(out), &recs) == nil && len(recs) == 1 && recs[0].Approver != nil
	})
	if len(recs) != 1 {
		t.Fatalf("the trail holds %d edits, want 1: %+v", len(recs), recs)
	}
	rec := recs[0]
	client, ok := strings.CutPrefix(rec.Principal, "facade/stdio-")
	if !ok || client == "" || rec.Caller.ID != rec.Principal+"/agent:stdio-editor" {
		t.Errorf("the edit's principal %q, caller %+v: want facade/stdio-<its process's>", rec.Principal, rec.Caller)
	}
	if rec.Approver == nil || rec.Approver.ID != "user-of:"+rec.Caller.ID {
		t.Errorf("the edit was approved by %+v, want the user of %s", rec.Approver, rec.Caller.ID)
	}
	up.stop(t)
}

// upEndpointOf is the URL of the MCP endpoint a `toolbus up` with data
// dir data printed on line, and the default client's token, which it
// keeps in data (readable by its owner only).
func upEndpointOf(t *testing.T, line, data string) (url, token string) {
	t.Helper()
	fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "mcp serve:"))
	if len(fields) == 0 {
		t.Fatalf("no endpoint in %q", line)
	}
	path := filepath.Join(data, mcpTokenFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s is %v, want 0600", path, fi.Mode().Perm())
	}
	if !strings.Contains(line, path) {
		t.Errorf("the endpoint's line %q does not say where its token is", line)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fields[0], strings.TrimSpace(string(raw))
}

// acceptingUser accepts every elicitation, sending its message to asked.
type acceptingUser chan string

func (u acceptingUser) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	u <- req.Params.Message
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept}}, nil
}
