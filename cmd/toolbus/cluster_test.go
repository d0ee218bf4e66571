package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestBusNodesMakeACluster: three `bus` processes make one cluster; a
// registry on the first node, an executor on the second and the command
// line on the third make one fleet; the audit stream and the catalogue
// keep three copies; a node that is stopped leaves a fleet that still
// answers through the others.
func TestBusNodesMakeACluster(t *testing.T) {
	t.Parallel()
	testkit.Heavy(t, "a 3-node cluster of processes")
	clients := []string{testkit.UnusedAddr(t), testkit.UnusedAddr(t), testkit.UnusedAddr(t)}
	routesAt := []string{testkit.UnusedAddr(t), testkit.UnusedAddr(t), testkit.UnusedAddr(t)}
	var routes []string
	for _, r := range routesAt {
		routes = append(routes, "nats-route://"+r)
	}
	var nodes []*daemon
	for i := range 3 {
		nodes = append(nodes, startDaemon(t, "bus", "--listen", clients[i], "--data", t.TempDir(), "--cluster-name", "fleet",
			"--cluster-listen", routesAt[i], "--routes", strings.Join(routes, ","), "--server-name", "node"+string(rune('1'+i))))
	}
	// Each node says it listens once the cluster's JetStream answers,
	// which takes a quorum: all three are started first.
	for _, n := range nodes {
		n.waitLog(t, "bus listening")
	}
	url := func(i int) string { return "nats://" + clients[i] }
	all := url(0) + "," + url(1) + "," + url(2)
	regd := startDaemon(t, "registry", "--nats", url(0)+","+url(1)+","+url(2))
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# clustered\n"), 0o644)
	execd := startDaemon(t, "executor", "--nats", url(1)+","+url(2)+","+url(0), "--workspace", ws, "--id", "executor@cluster")

	call := func(node string) (string, string, int) {
		return toolbus(t, "call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", node)
	}
	var out, errOut string
	var code int
	if !testkit.Poll(time.Minute, func() bool {
		out, errOut, code = call(url(2))
		return code == 0 && strings.Contains(out, "# clustered")
	}) {
		t.Fatalf("no call through node 3: exit %d %q %q\n%s\nregistry:\n%s", code, out, errOut, execd.output.String(), regd.output.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := bus.Connect(ctx, bus.Config{URL: all, Name: t.Name(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	for _, name := range []string{events.AuditStream, "KV_" + events.CatalogBucket} {
		s, err := client.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := s.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s keeps %d copies, want 3", name, n)
		}
	}

	// The first node goes: the registry and the command line move on.
	nodes[0].stop(t)
	if !testkit.Poll(time.Minute, func() bool {
		out, errOut, code = call(url(1) + "," + url(2))
		return code == 0 && strings.Contains(out, "# clustered")
	}) {
		t.Fatalf("no call with node 1 gone: exit %d %q %q\n%s", code, out, errOut, execd.output.String())
	}
	if out, errOut, code := toolbus(t, "tools", "list", "--nats", url(2)); code != 0 || !strings.Contains(out, "read_file") {
		t.Errorf("tools list with node 1 gone: exit %d %s %s", code, out, errOut)
	}
}
