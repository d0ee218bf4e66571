package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/natsserver"
)

// TestAFleetOnTheOldestServer: the fleet's parts run against an existing
// nats-server 2.10, the oldest toolbus supports: an admin makes the audit
// stream, the registry and an executor start, the catalogue lists the
// tools (read by direct get, one message a request below 2.11), a call
// runs, and the audit trail shows it.
func TestAFleetOnTheOldestServer(t *testing.T) {
	t.Parallel()
	srv := natsserver.Start(t, natsserver.V210)
	url := srv.URL
	if out, errOut, code := toolbus(t, "audit", "init", "--nats", url); code != 0 {
		t.Fatalf("audit init: exit %d %s %s", code, out, errOut)
	}
	regd := startDaemon(t, "registry", "--nats", url)
	regd.waitLog(t, "registry running")
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello from 2.10\n"), 0o644)
	execd := startDaemon(t, "executor", "--nats", url, "--workspace", ws, "--id", "executor@old-server")
	execd.waitLog(t, "executor running")
	if tools := listJSON(t, url); len(tools) == 0 {
		t.Fatal("the catalogue lists no tool")
	}
	var out, errOut string
	var code int
	if !testkit.Poll(30*time.Second, func() bool {
		out, errOut, code = toolbus(t, "call", "read_file", "--id", "on-2.10", "--args", `{"file_path":"hello.txt"}`, "--nats", url)
		return code == 0
	}) || out != "hello from 2.10\n" {
		t.Fatalf("a call: exit %d %q %s\n%s", code, out, errOut, execd.output.String())
	}
	if out, errOut, code := toolbus(t, "audit", "show", "on-2.10", "--nats", url); code != 0 || !strings.Contains(out, "read_file") || !strings.Contains(out, "OK") {
		t.Errorf("audit show: exit %d %s %s", code, out, errOut)
	}
	execd.stop(t)
	regd.stop(t)
}

// TestAServerOlderThanTheOldestIsRefusedByEveryPart: against Debian's
// nats-server 2.9, the command line and the daemons stop at connect,
// naming the server's version and the oldest they take.
func TestAServerOlderThanTheOldestIsRefusedByEveryPart(t *testing.T) {
	t.Parallel()
	srv := natsserver.Start(t, natsserver.Debian)
	want := []string{"runs nats-server " + srv.Version, "needs nats-server " + bus.MinServerVersion + " or later"}
	check := func(who, out string, code int) {
		t.Helper()
		for _, w := range want {
			if code == 0 || !strings.Contains(out, w) {
				t.Errorf("%s: exit %d, said %q; want a refusal saying %q", who, code, out, w)
			}
		}
	}
	_, errOut, code := toolbus(t, "tools", "list", "--nats", srv.URL)
	check("tools list", errOut, code)
	_, errOut, code = toolbus(t, "call", "read_file", "--args", `{"file_path":"x"}`, "--nats", srv.URL)
	check("call", errOut, code)
	for part, args := range map[string][]string{"registry": {"--nats", srv.URL}, "executor": {"--nats", srv.URL, "--workspace", t.TempDir()}} {
		_, errOut, code := runBin(t, part, nil, args...)
		check("the "+part, errOut, code)
	}
}
