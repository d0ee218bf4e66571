package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpHasIdentities: `toolbus up` makes the identities its parts
// connect with on its first start and keeps them; a client with none is
// the developer, with nothing to set up; an agent given the agent's seed
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
	// An agent pushes no policy; the developer does.
	if _, errOut, code := toolbusWith(t, seed("agent"), "policy", "push", "../../policy", "--nats", url); code == 0 || !strings.Contains(errOut, "nothing pushed") {
		t.Errorf("the agent pushed a policy: exit %d %s", code, errOut)
	}
	if out, errOut, code := toolbus(t, "policy", "push", "../../policy", "--nats", url); code != 0 || !strings.Contains(out, "pushed sha256:") {
		t.Errorf("the developer's push: exit %d %s %s", code, out, errOut)
	}
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
