package executor

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/tool"
)

// TestCallsNoHookMatchesAllocateNothing: with hooks configured but none on
// the tool called, the hook steps of the invoke path cost a pointer load
// and a comparison, and allocate nothing; without hooks, a nil check.
func TestCallsNoHookMatchesAllocateNothing(t *testing.T) {
	set, err := hooks.Parse([]byte(`{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "false"}]}],
		"PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "false"}]}]}}`), hooks.ClaudeCode, "s.json")
	if err != nil {
		t.Fatal(err)
	}
	noop := tool.Func(events.ToolSpec{Name: "read_file", Kind: events.KindRead}, nil)
	h, err := newHosted(noop, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*hooks.Set{nil, set} {
		e := &Executor{judging: judging{hooks: s}}
		c := &call{e: e, host: h, tool: &events.Tool{Name: "read_file"}, inv: &events.Invocation{}, ctx: context.Background()}
		d := policy.Decision{Verdict: events.Allow}
		res := &events.Result{}
		c.preHooks(d) // works out the plan once
		if n := testing.AllocsPerRun(1000, func() {
			if got, st := c.preHooks(d); got.Verdict != events.Allow || st != nil {
				t.Fatalf("no hook changed the call: %v %v", got.Verdict, st)
			}
			c.postHooks(res)
		}); n != 0 {
			t.Errorf("hooks %v: %v allocations a call", s != nil, n)
		}
	}
}
