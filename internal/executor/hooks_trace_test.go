package executor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/internal/testkit/spantest"
)

// A hook runs in its call's trace: its input's toolbus.traceparent and
// its TRACEPARENT both name the call's execute_tool span, not the
// executor's own trace context, which the executor's environment may
// carry.
func TestAHookRunsInItsCallsTrace(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01") // the executor's own
	spans, tp := spantest.New(t)
	f := executortest.Start(t, withSettings(t, hooks.ClaudeCode, claudeHook("PreToolUse", "Read", "trace.sh", 0)),
		func(c *executor.Config) { c.Traces = tp })
	ctx, agent := tp.Tracer("agent").Start(context.Background(), "agent turn")
	res, err := f.Client.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
	agent.End()
	if err != nil || res.Error != nil {
		t.Fatalf("call: %v %+v", err, res)
	}
	var call sdktrace.ReadOnlySpan
	testkit.Eventually(t, "the call's span ends", func() bool {
		for _, s := range spans.GetSpans().Snapshots() {
			if s.Name() == "execute_tool read_file" {
				call = s
				return true
			}
		}
		return false
	})
	want := telemetry.TraceParent(call.SpanContext())
	env, err := os.ReadFile(filepath.Join(f.Workspace.Root(), "hook-traceparent"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(f.Workspace.Root(), "hook-input.json"))
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Toolbus struct {
			TraceParent string `json:"traceparent"`
		} `json:"toolbus"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatalf("the hook's input: %v\n%s", err, data)
	}
	if string(env) != want || in.Toolbus.TraceParent != want {
		t.Errorf("the hook was given TRACEPARENT %q and input traceparent %q; want both %q, the call's span", env, in.Toolbus.TraceParent, want)
	}
}
