package npmpeer

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/testkit"
)

// callTimeout bounds each exchange with a server; it is not measured.
const callTimeout = 30 * time.Second

func TestEverythingStdio(t *testing.T) {
	command, args := EverythingStdio(t)
	c, err := client.NewStdioMCPClient(command, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// NewStdioMCPClient starts the transport but not the client: without
	// Start, no notification reaches OnNotification's handlers.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	exercise(t, c)
}

func TestEverythingHTTP(t *testing.T) {
	url := EverythingHTTP(t)
	c, err := client.NewStreamableHttpClient(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	exercise(t, c)
}

// exercise initializes c, lists the tools (logging their names and
// annotations), and calls echo.
func exercise(t *testing.T, c *client.Client) {
	t.Helper()
	var mu sync.Mutex
	var notes []string
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, n.Method)
	})

	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: "toolbus-npmpeer-test", Version: "0"}
	res, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	t.Logf("server %s %s, protocol %s", res.ServerInfo.Name, res.ServerInfo.Version, res.ProtocolVersion)

	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		a := tool.Annotations
		t.Logf("tool %s (%q): annotations title %q readOnly=%s destructive=%s idempotent=%s openWorld=%s",
			tool.Name, tool.Title, a.Title, hint(a.ReadOnlyHint), hint(a.DestructiveHint), hint(a.IdempotentHint), hint(a.OpenWorldHint))
	}
	if !slices.Contains(names, "echo") {
		t.Fatalf("tools/list has no echo: %v", names)
	}

	var call mcp.CallToolRequest
	call.Params.Name = "echo"
	call.Params.Arguments = map[string]any{"message": "hello from toolbus"}
	out, err := c.CallTool(ctx, call)
	if err != nil {
		t.Fatalf("call echo: %v", err)
	}
	if out.IsError || len(out.Content) != 1 {
		t.Fatalf("echo gave %+v, want one text part", out)
	}
	text, ok := mcp.AsTextContent(out.Content[0])
	if !ok || text.Text != "Echo: hello from toolbus" {
		t.Fatalf("echo gave %+v, want text %q", out.Content[0], "Echo: hello from toolbus")
	}

	mu.Lock()
	t.Logf("notifications seen by the end: %v", notes)
	mu.Unlock()
}

// hint shows an optional annotation.
func hint(b *bool) string {
	if b == nil {
		return "unset"
	}
	return strconv.FormatBool(*b)
}

// TestEverythingHTTPStops checks that the HTTP server is gone and reaped
// after the test that started it: no orphan, no zombie.
func TestEverythingHTTPStops(t *testing.T) {
	var pid int
	t.Run("serve", func(t *testing.T) {
		_, pid = everythingHTTP(t)
	})
	if pid == 0 {
		t.Skip("the server did not start")
	}
	checkReaped(t, pid)
}

// TestStopKillsGroup checks that stopping a peer stops what it started: a
// shell's background sleep dies with the shell.
func TestStopKillsGroup(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	var leader, child int
	t.Run("serve", func(t *testing.T) {
		cmd := exec.Command(sh, "-c", `sleep 600 & echo $! > "$1"; wait`, "sh", pidFile)
		leader = startGroup(t, cmd).cmd.Process.Pid
		child = testkit.WaitPID(t, pidFile)
	})
	if child == 0 {
		t.Fatal("the shell wrote no child pid")
	}
	checkReaped(t, leader)
	// The sleep is no child of the test: init reaps it, so it may be a
	// zombie for a moment, which WaitGone accepts.
	testkit.WaitGone(t, child)
}

// checkReaped fails unless pid's process is reaped and its process group
// has no live member. stop waits for the leader, so its /proc entry is
// gone already; the others of the group may take a moment to die of their
// SIGKILL, and may stay zombies until init reaps them, which is no orphan.
func checkReaped(t *testing.T, pid int) {
	t.Helper()
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("process %d is still in /proc after stop (stat: %v)", pid, err)
	}
	var live []testkit.Process
	if !testkit.Poll(10*time.Second, func() bool {
		live = testkit.Group(pid)
		return len(live) == 0
	}) {
		t.Fatalf("process group %d still has live members after stop: %v", pid, live)
	}
}

// TestConformanceRuns checks that the conformance CLI starts under the
// Node 22 binary (it imports fs.globSync, which Node 20 lacks) and knows
// the client scenarios the toolbus tests mean to run.
func TestConformanceRuns(t *testing.T) {
	node22, cli := Require(t, Node22), Require(t, Conformance)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, node22, cli, "list").CombinedOutput()
	if err != nil {
		t.Fatalf("conformance list: %v\n%s", err, out)
	}
	for _, scenario := range []string{"  - initialize ", "  - tools_call "} {
		if !strings.Contains(string(out), scenario) {
			t.Errorf("conformance list has no %q:\n%s", strings.TrimSpace(scenario), out)
		}
	}
}
