package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/toolbus/toolbus/internal/sandbox"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUpHasIdentities: `toolbus up` makes the identities its parts
// connect with on its first start and keeps them; the developer's
// commands on the host act as its admin, with nothing to set up, and a
// client with no identity that cannot read up's note is its agent; an agent given the agent's seed
// is held to an agent's permissions, and its calls name it, proven.
func TestUpHasIdentities(t *testing.T) {
	// A toolbus up of its own, on free ports and its own data.
	t.Parallel()
	ws, data := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# readme\n"), 0o644)
	start := func() (*daemon, string) {
		up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "off")
		url := busURL(t, up.waitLine(t, "bus:"))
		up.waitLine(t, "identities:")
		up.waitLine(t, "Press Ctrl-C to stop.")
		return up, url
	}
	up, url := start()
	ids := filepath.Join(data, "identities")
	seed := func(name string) []string { return []string{"TOOLBUS_IDENTITY=" + filepath.Join(ids, name+".nk")} }
	info, err := os.Stat(filepath.Join(ids, "agent.nk"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the agent's seed: %v %v", info, err)
	}
	agentSeed, _ := os.ReadFile(filepath.Join(ids, "agent.nk"))

	// The developer, with no identity.
	if out, errOut, code := toolbus(t, "call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", url); code != 0 || out != "# readme\n" {
		t.Errorf("the developer's call: exit %d %q %s", code, out, errOut)
	}
	// The agent: its call names it, and the bus vouches for the name.
	if out, errOut, code := toolbusWith(t, seed("agent"), "call", "read_file", "--id", "by-the-agent", "--args", `{"file_path":"README.md"}`, "--nats", url); code != 0 || out != "# readme\n" {
		t.Errorf("the agent's call: exit %d %q %s", code, out, errOut)
	}
	out, errOut, code := toolbusWith(t, seed("auditor"), "audit", "show", "by-the-agent", "--json", "--nats", url)
	if code != 0 || !strings.Contains(strings.ReplaceAll(out, " ", ""), `"proven":true`) || !strings.Contains(out, `"agent"`) {
		t.Errorf("the auditor's view of the agent's call: exit %d %s %s", code, out, errOut)
	}
	// A client with no identity that cannot read up's note (elsewhere on
	// the host, or confined) is the agent, and learns so from the bus.
	nowhere := []string{"XDG_STATE_HOME=" + t.TempDir()}
	if out, errOut, code := toolbusWith(t, nowhere, "call", "read_file", "--id", "by-nobody", "--args", `{"file_path":"README.md"}`, "--nats", url); code != 0 || out != "# readme\n" {
		t.Errorf("a call with no identity: exit %d %q %s", code, out, errOut)
	}
	out, errOut, code = toolbusWith(t, seed("auditor"), "audit", "show", "by-nobody", "--json", "--nats", url)
	if code != 0 || !strings.Contains(strings.ReplaceAll(out, " ", ""), `"proven":true`) || !strings.Contains(out, `"agent"`) {
		t.Errorf("the auditor's view of a call with no identity: exit %d %s %s", code, out, errOut)
	}
	// An agent pushes no policy, and is told why at once, not at the
	// deadline of an answer the bus will never give; the developer does.
	if _, errOut, code := toolbusWith(t, seed("agent"), "policy", "push", "../../policy", "--nats", url); code == 0 || !strings.Contains(errOut, "nothing pushed: the bus does not let agent push a policy") {
		t.Errorf("the agent pushed a policy: exit %d %s", code, errOut)
	}
	if out, errOut, code := toolbus(t, "policy", "push", "../../policy", "--nats", url); code != 0 || !strings.Contains(out, "pushed sha256:") {
		t.Errorf("the developer's push: exit %d %s %s", code, out, errOut)
	}
	// What a review found the agent, the auditor and the console's
	// approver could do: each is refused, and nothing changes.
	attackAsConfinedMembers(t, url, "", "", filepath.Join(ids, "auditor.nk"), filepath.Join(ids, "console.nk"), filepath.Join(data, "audit-signing.pub"), nil)
	up.stop(t)

	// Started again, it keeps its identities.
	up, url = start()
	if again, _ := os.ReadFile(filepath.Join(ids, "agent.nk")); string(again) != string(agentSeed) {
		t.Error("the agent's seed changed on a restart")
	}
	if out, errOut, code := toolbusWith(t, seed("agent"), "call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", url); code != 0 || out != "# readme\n" {
		t.Errorf("the agent's call after a restart: exit %d %q %s", code, out, errOut)
	}
	up.stop(t)
}

// TestAnApprovedShellLineOnUpIsOnlyTheAgent: on `toolbus up`, a shell
// line the agent asked for and the developer approved runs on the developer's host, where the
// developer's commands act as an admin. It cannot read the developer's
// seed (Landlock hides the data dir), and cannot connect to the bus's
// port at all (Landlock's TCP rules): it cannot push a policy nor call.
// On a kernel without TCP rules a command it runs with no identity is
// the agent: it still cannot push a policy, and its calls name the
// agent, proven. The developer's own commands still act as admin.
func TestAnApprovedShellLineOnUpIsOnlyTheAgent(t *testing.T) {
	t.Parallel()
	ws, data := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# readme\n"), 0o644)
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	t.Cleanup(func() { up.stop(t) })
	policyDir, err := filepath.Abs("../../policy")
	if err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf(`cat %[1]s >/dev/null 2>&1; echo "cat=$?"; timeout 60 %[2]s policy push %[3]s --nats %[4]s >/dev/null 2>&1; echo "push=$?"; timeout 60 %[2]s call read_file --id from-the-shell --args '{"file_path":"README.md"}' --nats %[4]s >/dev/null 2>&1; echo "call=$?"`,
		filepath.Join(data, "identities", "developer.nk"), bin("toolbus"), policyDir, url)
	args, _ := json.Marshal(map[string]string{"command": line})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	approver := exec.CommandContext(ctx, bin("toolbus"), "confirm", "--json", "--as", "approver:dev", "--nats", url)
	stdin, _ := approver.StdinPipe()
	stdout, _ := approver.StdoutPipe()
	if err := approver.Start(); err != nil {
		t.Fatal(err)
	}
	defer approver.Wait()
	defer stdin.Close()
	dec := json.NewDecoder(stdout)
	var ready map[string]any
	if err := dec.Decode(&ready); err != nil || ready["event"] != "ready" {
		t.Fatalf("confirm --json's first line: %v %v", ready, err)
	}
	// The agent asks; the developer approves.
	call := startCallWith(t, []string{"TOOLBUS_IDENTITY=" + filepath.Join(data, "identities", "agent.nk")}, url, "run_shell_command", string(args))
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("confirm --json: %v; the call: %s %s", err, call.stdout.String(), call.stderr.String())
		}
		if m["event"] == "request" {
			io.WriteString(stdin, fmt.Sprintf(`{"answerTo":%q,"outcome":"proceed_once"}`+"\n", m["answerTo"]))
			break
		}
	}
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("confirm --json: %v", err)
		}
		if m["event"] == "ack" {
			if m["accepted"] != true {
				t.Fatalf("the answer was refused: %v", m)
			}
			break
		}
	}
	var code int
	select {
	case code = <-call.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the approved shell line did not return: %s %s", call.stdout.String(), call.stderr.String())
	}
	if code != 0 {
		t.Fatalf("the approved shell line: exit %d %s %s", code, call.stdout.String(), call.stderr.String())
	}
	out := call.stdout.String()
	if !strings.Contains(out, "cat=1") {
		t.Errorf("the shell line read the developer's seed: %s", out)
	}
	if strings.Contains(out, "push=0") {
		t.Errorf("the shell line pushed a policy: %s", out)
	}
	if got, errOut, code := toolbus(t, "policy", "show", "--nats", url); code != 0 || !strings.Contains(got, "no policy pushed") {
		t.Errorf("after the shell line, policy show: exit %d %s %s", code, got, errOut)
	}
	got, errOut, code := toolbus(t, "audit", "show", "from-the-shell", "--json", "--nats", url)
	if sandbox.Covered().Network {
		if strings.Contains(out, "call=0") || code == 0 {
			t.Errorf("the shell line reached the bus: %s; the audit: exit %d %s %s", out, code, got, errOut)
		}
		return
	}
	if os.Getenv("CI") == "true" {
		t.Errorf("this kernel has no Landlock TCP rules (%s), and CI=true: the shell line's network is not confined", sandbox.Describe())
	}
	if !strings.Contains(out, "call=0") {
		t.Errorf("the shell line could not call as the agent: %s", out)
	}
	if code != 0 || !strings.Contains(strings.ReplaceAll(got, " ", ""), `"proven":true`) || !strings.Contains(got, `"agent"`) {
		t.Errorf("the shell line's call, as the developer's audit shows it: exit %d %s %s", code, got, errOut)
	}
}
