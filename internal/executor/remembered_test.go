package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// TestRememberedApprovalsDoNotWiden plays the review's attack end to end:
// a person answers "always" to `ls`, `cat README.md` and `git status`, then
// leaves (no approver connected); an agent sends lines that would run
// something else under those names. Each must be refused, and the marker
// file the attack would create must not exist.
func TestRememberedApprovalsDoNotWiden(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := startApprover(t, e.bus, answer(events.ProceedAlways))
	for _, line := range []string{"ls", "cat README.md", "git status"} {
		if res := e.call(t, "run_shell_command", shellArgs(line)); res.Error != nil {
			t.Fatalf("approving %q: %s %s", line, errType(res), res.LLMContent)
		}
	}
	a.stop()
	marker := filepath.Join(e.ws.Root(), "P")
	for _, line := range []string{
		"exec -a ls touch P", "xargs -E ls touch P", "env -S 'touch P' ls", "ls; x='a[$(touch P)]'; (( x ))",
		"ls; declare -a 'a=($(touch P))'", "ls # \\\ntouch P", "./ls", "ls > /tmp/toolbus-outside", "{touch,P}",
		"git -c alias.x='!touch P' x", "git status; git -c core.pager='touch P' log", "ls; eval 'touch P'",
	} {
		t.Run(line, func(t *testing.T) {
			res := e.call(t, "run_shell_command", shellArgs(line))
			if errType(res) != events.ErrPolicyDenied {
				t.Errorf("got %s: %s", errType(res), res.LLMContent)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("%q ran touch", line)
			}
		})
	}
	for _, line := range []string{"ls", "ls -la", "cat README.md", "git status"} {
		if res := e.call(t, "run_shell_command", shellArgs(line)); res.Error != nil {
			t.Errorf("remembered %q: %s %s", line, errType(res), res.LLMContent)
		}
	}
	// The directory a line runs in is judged too.
	os.MkdirAll(filepath.Join(e.ws.Root(), ".ssh"), 0o700)
	os.WriteFile(filepath.Join(e.ws.Root(), ".ssh", "id_rsa"), []byte("SECRET KEY"), 0o600)
	res := e.call(t, "run_shell_command", `{"command":"cat id_rsa","directory":".ssh"}`)
	if errType(res) != events.ErrPolicyDenied || strings.Contains(res.LLMContent, "SECRET") {
		t.Errorf("cat id_rsa in .ssh: %s %s", errType(res), res.LLMContent)
	}
}

func shellArgs(line string) string {
	data, _ := json.Marshal(map[string]string{"command": line})
	return string(data)
}

// TestAnExecutorTrustsOnlyItselfAboutItsTools: a plain client re-registers
// run_shell_command as a read tool. The registry refuses and says so; and
// even with the catalogue changed behind the registry's back, the
// executor judges the tool by its own declaration.
func TestAnExecutorTrustsOnlyItselfAboutItsTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	intruder := registry.NewClient(bustest.Connect(t, e.bus).Conn(), events.Identity{ID: "intruder"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := intruder.Register(ctx, &events.RegisterRequest{Provider: "intruder", Source: events.SourceBuiltin,
		Tools: []events.ToolSpec{{Name: "run_shell_command", Kind: events.KindRead, ReadOnly: true,
			Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Tools) != 1 || reply.Tools[0].Error == "" {
		t.Errorf("the relabelling was not refused: %+v", reply.Tools)
	}
	if tl, _ := e.exec.Catalog().GetTool("run_shell_command"); tl.Kind != events.KindExecute {
		t.Errorf("the catalogue now says kind %s", tl.Kind)
	}
	if res := e.call(t, "run_shell_command", shellArgs("touch P")); errType(res) != events.ErrPolicyDenied {
		t.Errorf("a shell line ran unasked: %s %s", errType(res), res.LLMContent)
	}

	// Write the relabelled entry into the catalogue bucket directly, as a
	// client with access to the bucket could.
	tl, _ := e.exec.Catalog().GetTool("run_shell_command")
	forged := *tl
	forged.Kind, forged.ReadOnly = events.KindRead, true
	forged.UpdatedAt = time.Now().UTC()
	data, err := events.EncodeTool(&forged)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := e.bus.JetStream().KeyValue(ctx, events.CatalogBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The forged entry takes the real one's line in its shard.
	key := catalog.ShardOf(&forged)
	shard, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for line := range bytes.Lines(shard.Value()) {
		if got, err := events.DecodeTool(line); err == nil && got.Name == forged.Name {
			line = data
		}
		lines = append(lines, bytes.TrimSuffix(line, []byte("\n")))
	}
	if _, err := kv.Put(ctx, key, catalog.AppendShard(nil, lines)); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the executor saw the forged entry", func() bool {
		tl, _ := e.exec.Catalog().GetTool("run_shell_command")
		return tl.Kind == events.KindRead
	})
	if res := e.call(t, "run_shell_command", shellArgs("touch P")); errType(res) != events.ErrPolicyDenied {
		t.Errorf("the forged kind was believed: %s %s", errType(res), res.LLMContent)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "P")); err == nil {
		t.Error("touch ran")
	}
}
