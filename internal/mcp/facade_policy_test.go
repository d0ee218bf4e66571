package mcp_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// A new policy that hides a tool from a caller reaches a connected
// client as list_changed, and its next list leaves the tool out, though
// the catalogue did not change.
func TestFacadeRefreshesTheListOnANewPolicy(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t)
	conn := bustest.Connect(t, f.Bus)
	open := policytest.Default(t)
	files := defaultpolicy.Default()
	files["toolbus.rego"] = strings.Replace(files["toolbus.rego"], "caller_denied_tools := {}", `caller_denied_tools := {"watcher": {"run_shell_command"}}`, 1)
	locked, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[policy.Policy]
	current.Store(open)
	fac, err := toolmcp.StartFacade(context.Background(), toolmcp.FacadeConfig{Conn: conn.Conn(), JS: conn.JetStream(), Policy: current.Load, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer fac.Close()
	c, err := mcpclient.NewInProcessClient(fac.Server())
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan string, 10)
	c.OnNotification(func(n mcp.JSONRPCNotification) { changes <- n.Method })
	initialize(t, c, "watcher")
	if names := toolNames(t, c); !slices.Contains(names, "run_shell_command") {
		t.Fatalf("the open policy's list: %v", names)
	}
	for len(changes) > 0 {
		<-changes
	}

	current.Store(locked)
	fac.Refresh()
	select {
	case m := <-changes:
		if m != "notifications/tools/list_changed" {
			t.Errorf("got %s", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no list_changed for a new policy")
	}
	if names := toolNames(t, c); slices.Contains(names, "run_shell_command") || !slices.Contains(names, "read_file") {
		t.Errorf("the new policy's list: %v", names)
	}
}
