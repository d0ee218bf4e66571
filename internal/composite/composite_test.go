package composite

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// sent is a step as Run sent it through Invoke.
type sent struct {
	step int
	tool string
	args string
}

// runWith runs d with args; each step's result is answer's for it.
func runWith(t *testing.T, d Definition, args string, answer func(step int, tool string, args json.RawMessage) *events.Result) (*tool.Output, []sent) {
	t.Helper()
	c, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	var got []sent
	out, err := c.Run(context.Background(), &tool.Call{ID: "c1", Args: json.RawMessage(args),
		Invoke: func(_ context.Context, step int, name string, a json.RawMessage) (*events.Result, error) {
			got = append(got, sent{step, name, string(a)})
			return answer(step, name, a), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return out, got
}

func echo(step int, name string, args json.RawMessage) *events.Result {
	return &events.Result{InvocationID: "c1." + string(rune('0'+step)), Tool: name, LLMContent: string(args)}
}

// References are resolved from the definition only: an argument whose
// value looks like a reference is passed on as it is, never resolved.
func TestArgumentsAreNotReadForReferences(t *testing.T) {
	d := Definition{Name: "comp", Description: "d", Steps: []Step{
		{Tool: "emit", Args: json.RawMessage(`{"text": "first"}`)},
		{Tool: "read_file", Args: json.RawMessage(`{"file_path": "$args.path", "more": ["$args.n", "$args.missing"], "gone": "$args.missing"}`)},
	}}
	_, got := runWith(t, d, `{"path": "$step0", "n": {"x": "$args.path"}}`, echo)
	if len(got) != 2 {
		t.Fatalf("sent %v", got)
	}
	if want := `{"file_path":"$step0","more":[{"x":"$args.path"},null]}`; got[1].args != want {
		t.Errorf("step 1's args: got %s, want %s", got[1].args, want)
	}
}

// $previous, $stepN and paths into a step's structured content or JSON
// text, and into an argument.
func TestReferences(t *testing.T) {
	d := Definition{Name: "comp", Description: "d", Steps: []Step{
		{Tool: "a", Args: json.RawMessage(`{}`)},
		{Tool: "b", Args: json.RawMessage(`{}`)},
		{Tool: "c", Args: json.RawMessage(`{"p": "$previous", "s": "$step0", "deep": "$step0.items.1.name", "text": "$previous.k", "arg": "$args.o.list.0", "n": 7.50}`)},
	}}
	answer := func(step int, name string, _ json.RawMessage) *events.Result {
		switch step {
		case 0:
			return &events.Result{Tool: name, LLMContent: "zero", StructuredContent: json.RawMessage(`{"items": [{"name": "x"}, {"name": "y"}]}`)}
		case 1:
			return &events.Result{Tool: name, LLMContent: `{"k": 12345678901234567890}`}
		}
		return &events.Result{Tool: name, LLMContent: "done"}
	}
	out, got := runWith(t, d, `{"o": {"list": [true]}}`, answer)
	want := `{"arg":true,"deep":"y","n":7.50,"p":"{\"k\": 12345678901234567890}","s":"zero","text":12345678901234567890}`
	if len(got) != 3 || got[2].args != want {
		t.Fatalf("step 2's args: got %v, want %s", got, want)
	}
	if out.Err != nil || !strings.Contains(out.LLMContent, "[step 2: c] ok\ndone") {
		t.Errorf("output: %+v", out)
	}
	if !strings.Contains(string(out.Structured), `"items"`) {
		t.Errorf("structured: %s", out.Structured)
	}
}

// A failed step stops the composite, with its error and the steps after
// it not run; with continueOnError the others run, and a reference to
// the failed step fails the step that makes it.
func TestAFailedStep(t *testing.T) {
	steps := []Step{
		{Tool: "a", Args: json.RawMessage(`{}`)},
		{Tool: "b", Args: json.RawMessage(`{}`)},
		{Tool: "c", Args: json.RawMessage(`{"x": "$step1"}`)},
		{Tool: "d", Args: json.RawMessage(`{}`)},
	}
	answer := func(step int, name string, args json.RawMessage) *events.Result {
		if step == 1 {
			return &events.Result{Tool: name, LLMContent: "no", Error: &events.ToolError{Type: events.ErrPolicyDenied, Message: "sensitive path"}}
		}
		return echo(step, name, args)
	}
	out, got := runWith(t, Definition{Name: "comp", Description: "d", Steps: steps}, `{}`, answer)
	if len(got) != 2 || out.Err == nil || out.Err.Type != events.ErrPolicyDenied || !strings.Contains(out.Err.Message, "step 1 (b): sensitive path") ||
		!strings.Contains(out.LLMContent, "[step 3: d] not run") {
		t.Errorf("stopping: sent %v, output %+v", got, out)
	}
	out, got = runWith(t, Definition{Name: "comp", Description: "d", Steps: steps, ContinueOnError: true}, `{}`, answer)
	if len(got) != 3 || got[2].tool != "d" || out.Err != nil ||
		!strings.Contains(out.LLMContent, "[step 1: b] POLICY_DENIED") || !strings.Contains(out.LLMContent, "[step 2: c] INVALID_TOOL_PARAMS\nNot run: its arguments could not be made: x: $step1 refers to step 1, which failed") {
		t.Errorf("continuing: sent %v, output %+v", got, out)
	}
}

// Strings that are not references stay as written, dots and dollars
// included.
func TestNotReferences(t *testing.T) {
	for _, s := range []string{".", "a.b", "$HOME/x..y", "$", "$argsx", "$previousx.", "price: $5.00"} {
		if _, ok, err := parseRef(s); ok || err != nil {
			t.Errorf("%q: a reference %v, error %v", s, ok, err)
		}
	}
}

// A step that timed out, was cancelled or lost its executor fails the
// composite with EXECUTION_FAILED: those types on the composite's result
// would speak of the composite's own call.
func TestAStepsLossIsNotTheComposites(t *testing.T) {
	d := Definition{Name: "comp", Description: "d", Steps: []Step{{Tool: "a"}}}
	for _, typ := range []events.ErrorType{events.ErrTimeout, events.ErrCancelled, events.ErrExecutorLost} {
		out, _ := runWith(t, d, `{}`, func(_ int, name string, _ json.RawMessage) *events.Result {
			return &events.Result{Tool: name, Error: &events.ToolError{Type: typ, Message: "gone"}}
		})
		if out.Err == nil || out.Err.Type != events.ErrExecutionFailed || out.Err.Message != "step 0 (a): "+string(typ)+": gone" {
			t.Errorf("%s: got %+v", typ, out.Err)
		}
	}
}
