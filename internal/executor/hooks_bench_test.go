package executor_test

// The hook benchmark: go test ./internal/executor -run '^$' -bench PreHook -benchtime 1x
// It times, in turn in one run, a call with a pre hook, the same call of
// a tool no hook matches, and a direct spawn of the hook's command (bash
// -c, the call's JSON on stdin, wait), and prints their p50 and p99 and
// the goal: with the hook ≤ without + 1.1 × the direct spawn.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	"github.com/toolbus/toolbus/internal/tool"
)

const hookSamples = 300

func BenchmarkPreHook(b *testing.B) {
	// Two tools alike, the policy allows both (think kind); the hook is
	// on one of them: the no-curl script of the tests, which reads the
	// call with grep.
	noop := func(name string) tool.Tool {
		return tool.Func(events.ToolSpec{Name: name, Kind: events.KindThink, Description: "does nothing",
			Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)},
			func(context.Context, *tool.Call) (*tool.Output, error) { return tool.Text("ok"), nil })
	}
	script, err := filepath.Abs("testdata/hooks/no-curl.sh")
	if err != nil {
		b.Fatal(err)
	}
	// Two hooks: the script, and a command that is bash alone (the
	// runner's own cost shows against the smallest spawn).
	commands := map[string]string{"script": `"` + script + `"`, "light": `exit 0`}
	var workspace string
	f := executortest.Start(b, func(c *executor.Config) {
		c.Tools = append(c.Tools, noop("script"), noop("light"), noop("plain"))
		c.Hooks = &hooks.Set{}
		for name, command := range commands {
			c.Hooks.Pre = append(c.Hooks.Pre, hooks.Group{Matcher: mustMatcher(b, name), Hooks: []*hooks.Hook{{Command: command, Dialect: hooks.ClaudeCode}}})
		}
		workspace = c.Workspace
	})
	ctx := context.Background()
	args := json.RawMessage(`{"command":"ls -la"}`)
	call := func(name string) func() {
		return func() {
			res, err := f.Client.Invoke(ctx, &events.Invocation{Tool: name, Args: args}, nil)
			if err != nil || res.Error != nil {
				b.Fatalf("%s: %v %+v", name, err, res)
			}
		}
	}
	for _, name := range []string{"script", "light", "plain"} {
		waitFor(b, f, name)
	}
	// The direct spawn: what the hook's own start, input and end cost.
	stdin, _ := json.Marshal(map[string]any{"session_id": "s1", "cwd": workspace, "hook_event_name": "PreToolUse",
		"tool_name": "script", "tool_input": args, "tool_use_id": "x"})
	env := append(os.Environ(), "CLAUDE_PROJECT_DIR="+workspace)
	direct := func(command string) func() {
		return func() {
			cmd := exec.Command("bash", "-c", command)
			cmd.Dir, cmd.Env, cmd.Stdin = workspace, env, bytes.NewReader(stdin)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				b.Fatalf("direct spawn: %v %s", err, errOut.String())
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		l := measure.Interleaved(hookSamples, call("plain"), call("script"), direct(commands["script"]), call("light"), direct(commands["light"]))
		without := l[0]
		fmt.Printf("\n%-40s %10s %10s\n", "pre hook benchmark (loopback)", "p50", "p99")
		fmt.Printf("%-40s %10s %10s\n", "call, no hook matching", without.P50, without.P99)
		for i, name := range []string{"script", "light"} {
			with, spawn := l[1+2*i], l[2+2*i]
			budget := without.P50 + time.Duration(1.1*float64(spawn.P50))
			cost := float64(with.P50-without.P50) / float64(spawn.P50)
			b.ReportMetric(cost, "hook-cost-x-spawn-"+name)
			fmt.Printf("%-40s %10s %10s\n", "call with a pre hook: "+name, with.P50, with.P99)
			fmt.Printf("%-40s %10s %10s\n", "  direct spawn of it (bash -c)", spawn.P50, spawn.P99)
			verdict := "met"
			if with.P50 > budget {
				verdict = "missed"
			}
			fmt.Printf("  the hook adds %s = %.2f × its direct spawn; goal with ≤ without + 1.1 × spawn = %s: %s\n", with.P50-without.P50, cost, budget, verdict)
		}
	}
}

func mustMatcher(tb testing.TB, pattern string) *hooks.Matcher {
	m, err := hooks.NewMatcher(hooks.ClaudeCode, pattern)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func waitFor(tb testing.TB, f *executortest.Fleet, name string) {
	tb.Helper()
	testkit.EventuallyWithin(tb, 10*time.Second, name+" reached the catalogue", func() bool {
		_, ok := f.Executor.Catalog().GetTool(name)
		return ok
	})
}
