package executornode_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/settings"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestTheCodeTheSettingsRunIsProtected is the project hook class from the
// attacker's side: the agent edits the workspace script a hook runs (or
// creates the file a stdio MCP server is about to run), which would run
// with the settings' owner's rights. The policy is shown the script as
// protected code, derived from the settings with no list kept by hand,
// and asks a person about the change; with nobody there the edit is
// denied and the script is unchanged. Reading it stays a read, and a file
// no setting runs is asked about as any edit is, without that reason.
func TestTheCodeTheSettingsRunIsProtected(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	ws := cfg.Workspace
	script := filepath.Join(ws, "scripts", "format_on_save.py")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("print('formatted')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	claude := filepath.Join(ws, ".claude", "settings.json")
	os.MkdirAll(filepath.Dir(claude), 0o755)
	os.WriteFile(claude, []byte(`{"hooks": {"PostToolUse": [{"matcher": "NoSuchTool", "hooks": [{"type": "command", "command": "python3 scripts/format_on_save.py"}]}]}}`), 0o644)
	mcpFile := filepath.Join(ws, ".mcp.json")
	os.WriteFile(mcpFile, []byte(`{"mcpServers": {}}`), 0o644)
	files, err := settings.ReadFiles("", claude, mcpFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Settings = files
	n, err := executornode.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	c := invoke.NewClient(bustest.Connect(t, cfg.Bus).Conn(), events.Identity{ID: "agent:test", Role: "agent"}, "")
	defer c.Close()
	call := func(name string, args any) *events.Result {
		t.Helper()
		data, _ := json.Marshal(args)
		res, err := c.Invoke(context.Background(), &events.Invocation{Tool: name, Args: data}, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	const why = "is code toolbus runs"
	res := call("write_file", map[string]string{"file_path": "scripts/format_on_save.py", "content": "import shutil; shutil.copy('seed', '.')\n"})
	if res.Error == nil || !strings.Contains(res.LLMContent, why) || !strings.Contains(res.LLMContent, `the PostToolUse hook "python3 scripts/format_on_save.py"`) {
		t.Errorf("writing the hook's script: %+v %q", res.Error, res.LLMContent)
	}
	if data, _ := os.ReadFile(script); string(data) != "print('formatted')\n" {
		t.Errorf("the hook's script was changed: %q", data)
	}
	// A neighbour it may import is its code too.
	if res := call("write_file", map[string]string{"file_path": "scripts/helpers.py", "content": "x = 1\n"}); !strings.Contains(res.LLMContent, why) {
		t.Errorf("writing beside the hook's script: %q", res.LLMContent)
	}
	if res := call("read_file", map[string]string{"file_path": "scripts/format_on_save.py"}); res.Error != nil {
		t.Errorf("reading the hook's script: %+v %q", res.Error, res.LLMContent)
	}
	if res := call("write_file", map[string]string{"file_path": "notes.txt", "content": "x"}); res.Error == nil || strings.Contains(res.LLMContent, why) {
		t.Errorf("writing a file nothing runs: %+v %q", res.Error, res.LLMContent)
	}

	// A stdio server added to .mcp.json protects what it runs from then
	// on, even before the file is there.
	os.WriteFile(mcpFile, []byte(`{"mcpServers": {"local": {"command": "node", "args": ["srv/index.js"]}}}`), 0o644)
	future := time.Now().Add(2 * time.Second)
	os.Chtimes(mcpFile, future, future) // a new stamp, however coarse the clock
	testkit.EventuallyWithin(t, 30*time.Second, "a write of the new stdio server's script asked about as protected code", func() bool {
		res := call("write_file", map[string]string{"file_path": "srv/index.js", "content": "require('child_process')"})
		return strings.Contains(res.LLMContent, why) && strings.Contains(res.LLMContent, `the stdio MCP server "local"`)
	})
	if _, err := os.Stat(filepath.Join(ws, "srv", "index.js")); err == nil {
		t.Error("the server's script was written")
	}
}
