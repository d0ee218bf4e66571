package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestOwnNATSDeployment follows docs/security.md's "On a NATS deployment
// of your own": a nats-server of the operator's, its config including
// the auth.conf `toolbus init` wrote, with the registry and an executor
// connecting to it by URL. The agent calls as itself, proven, and the
// attacks of a confined member change nothing.
func TestOwnNATSDeployment(t *testing.T) {
	testkit.Heavy(t, "a nats-server of its own, built and run as a process")
	dir := t.TempDir()
	server := filepath.Join(dir, "nats-server")
	build := exec.Command("go", "build", "-o", server, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	ids := filepath.Join(dir, "identities")
	if out, errOut, code := toolbus(t, "init", ids); code != 0 {
		t.Fatalf("init: exit %d %s %s", code, out, errOut)
	}
	port := freeRun(t, 1)
	conf := filepath.Join(dir, "nats-server.conf")
	// As the page says: the operator's own settings, and one include.
	if err := os.WriteFile(conf, []byte(`listen: 127.0.0.1:`+strconv.Itoa(port)+`
jetstream {
  store_dir: "`+filepath.Join(dir, "js")+`"
}
include "identities/auth.conf"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(server, "-c", conf)
	var srvLog strings.Builder
	srv.Stderr = &srvLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
		if t.Failed() {
			t.Logf("nats-server:\n%s", srvLog.String())
		}
	})
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	if !testkit.Poll(30*time.Second, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatal("nats-server does not listen")
	}
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# readme\n"), 0o644)
	seed := func(name string) []string { return []string{"TOOLBUS_IDENTITY=" + filepath.Join(ids, name+".nk")} }
	part := func(name string, args ...string) {
		d := startDaemonWith(t, seed(name), name, append(args, "--nats", url)...)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s:\n%s", name, d.output.String())
			}
		})
	}
	// The audit stream, which a toolbus bus node would make: an admin
	// makes it, once.
	if out, errOut, code := toolbusWith(t, seed("admin"), "audit", "init", "--max-age", "720h", "--nats", url); code != 0 || !strings.Contains(out, "audit stream ready") {
		t.Fatalf("audit init: exit %d %s %s", code, out, errOut)
	}
	part("registry")
	part("executor", "--workspace", ws)
	var out, errOut string
	var code int
	if !testkit.Poll(time.Minute, func() bool {
		out, errOut, code = toolbusWith(t, seed("agent"), "call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", url)
		return code == 0
	}) {
		t.Fatalf("no call of the agent's worked in a minute: exit %d %s %s", code, out, errOut)
	}
	out, errOut, code = toolbusWith(t, seed("agent"), "call", "read_file", "--id", "on-own-nats", "--args", `{"file_path":"README.md"}`, "--nats", url)
	if out != "# readme\n" {
		t.Errorf("the agent's call: %q", out)
	}
	out, errOut, code = toolbusWith(t, seed("auditor"), "audit", "show", "on-own-nats", "--json", "--nats", url)
	if code != 0 || !strings.Contains(strings.ReplaceAll(out, " ", ""), `"proven":true`) {
		t.Errorf("the auditor's view of the agent's call: exit %d %s %s", code, out, errOut)
	}
	attackAsConfinedMembers(t, url, "", filepath.Join(ids, "agent.nk"), filepath.Join(ids, "auditor.nk"), filepath.Join(ids, "approver.nk"), "", seed("admin"))
}
