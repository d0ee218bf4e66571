package composite

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// Tool is a composite, hosted by an executor like any tool.
type Tool struct {
	c *compiled
}

// New is the tool d defines, or why d does not define one
// (Definition.Validate).
func New(d Definition) (*Tool, error) {
	c, err := d.compile()
	if err != nil {
		return nil, err
	}
	return &Tool{c: c}, nil
}

var (
	_ tool.Tool      = (*Tool)(nil)
	_ tool.Origin    = (*Tool)(nil)
	_ tool.Timeouter = (*Tool)(nil)
)

// Spec declares the composite, kind composite, with its schema.
func (t *Tool) Spec() events.ToolSpec {
	d := &t.c.def
	return events.ToolSpec{Name: d.Name, Description: d.Description, Kind: events.KindComposite, Parameters: d.Parameters}
}

// Origin: composites are a source of their own.
func (t *Tool) Origin() (events.Source, string, bool) { return events.SourceComposite, "", false }

// Timeout is the definition's, or DefaultTimeout.
func (t *Tool) Timeout() time.Duration {
	if t.c.def.Timeout > 0 {
		return t.c.def.Timeout
	}
	return DefaultTimeout
}

// Run runs the steps in order, each through call.Invoke, and returns
// every step's outcome. A step that fails (denied, invalid, failed) stops
// the composite, whose result is then that step's error, unless the
// definition continues on errors. When ctx ends, the step running is
// given up with it and Run returns ctx's cause: the executor ends the
// composite cancelled or timed out.
func (t *Tool) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	if call.Invoke == nil {
		return tool.Failed(events.ErrExecutionFailed, "a composite runs only in an executor that sends its steps as calls of its caller"), nil
	}
	args, err := decodeObject(call.Args)
	if err != nil {
		return tool.Failed(events.ErrInvalidParams, err.Error()), nil
	}
	results := make([]events.Result, 0, len(t.c.steps))
	failed := -1
	for i := range t.c.steps {
		s := &t.c.steps[i]
		var res *events.Result
		stepArgs, err := s.resolve(args, results)
		if err != nil {
			msg := fmt.Sprintf("Not run: its arguments could not be made: %v", err)
			res = &events.Result{Tool: s.tool, LLMContent: msg, Error: &events.ToolError{Type: events.ErrInvalidParams, Message: msg}}
		} else if res, err = call.Invoke(ctx, i, s.tool, stepArgs); err != nil {
			res = &events.Result{Tool: s.tool, LLMContent: err.Error(), Error: &events.ToolError{Type: events.ErrExecutionFailed, Message: err.Error()}}
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if res.Tool == "" {
			res.Tool = s.tool
		}
		results = append(results, *res)
		if res.Error != nil && failed < 0 {
			failed = i
			if !t.c.def.ContinueOnError {
				break
			}
		}
	}
	return t.output(results, failed), nil
}

// output is the composite's result: a text listing every step's outcome,
// the steps' structured content when any has some, and, when a step
// failed and the composite stopped there, that step's error.
func (t *Tool) output(results []events.Result, failed int) *tool.Output {
	d := &t.c.def
	var llm, display strings.Builder
	stopped := failed >= 0 && !d.ContinueOnError
	switch {
	case stopped:
		f := &results[failed]
		fmt.Fprintf(&llm, "Composite %s stopped at step %d (%s): %s: %s\n", d.Name, failed, f.Tool, f.Error.Type, f.Error.Message)
	case failed >= 0:
		fmt.Fprintf(&llm, "Composite %s ran its %d steps; some failed (continueOnError).\n", d.Name, len(t.c.steps))
	default:
		fmt.Fprintf(&llm, "Composite %s ran its %d steps.\n", d.Name, len(t.c.steps))
	}
	display.WriteString(llm.String())
	type stepJSON struct {
		Step              int               `json:"step"`
		Tool              string            `json:"tool"`
		InvocationID      string            `json:"invocationId,omitempty"`
		Error             *events.ToolError `json:"error,omitempty"`
		StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
		NotRun            bool              `json:"notRun,omitempty"`
	}
	var steps []stepJSON
	structured := false
	for i := range t.c.steps {
		if i >= len(results) {
			fmt.Fprintf(&llm, "\n[step %d: %s] not run\n", i, t.c.steps[i].tool)
			fmt.Fprintf(&display, "\n[step %d: %s] not run\n", i, t.c.steps[i].tool)
			steps = append(steps, stepJSON{Step: i, Tool: t.c.steps[i].tool, NotRun: true})
			continue
		}
		r := &results[i]
		outcome := "ok"
		if r.Error != nil {
			outcome = string(r.Error.Type)
		}
		fmt.Fprintf(&llm, "\n[step %d: %s] %s\n%s\n", i, r.Tool, outcome, strings.TrimRight(r.LLMContent, "\n"))
		fmt.Fprintf(&display, "\n[step %d: %s] %s\n%s\n", i, r.Tool, outcome, strings.TrimRight(r.ReturnDisplay, "\n"))
		steps = append(steps, stepJSON{Step: i, Tool: r.Tool, InvocationID: r.InvocationID, Error: r.Error, StructuredContent: r.StructuredContent})
		structured = structured || len(r.StructuredContent) > 0
	}
	out := &tool.Output{LLMContent: llm.String(), ReturnDisplay: display.String()}
	if structured {
		out.Structured, _ = json.Marshal(map[string]any{"composite": d.Name, "steps": steps})
	}
	if stopped {
		f := &results[failed]
		out.Err = &events.ToolError{Type: f.Error.Type, Message: fmt.Sprintf("step %d (%s): %s", failed, f.Tool, f.Error.Message)}
		switch f.Error.Type {
		case events.ErrExecutorLost, events.ErrTimeout, events.ErrCancelled:
			// On the composite's result these would say that its own
			// executor was lost, its own deadline passed, or it was
			// cancelled; a caller may act on that (retry, give up).
			out.Err.Type = events.ErrExecutionFailed
			out.Err.Message = fmt.Sprintf("step %d (%s): %s: %s", failed, f.Tool, f.Error.Type, f.Error.Message)
		}
	}
	return out
}

// StepID is the invocation id of step n of the composite call id.
func StepID(id string, n int) string { return id + "." + strconv.Itoa(n) }

// IsStepOf reports whether id is the invocation id of a step of the
// composite call composite (StepID).
func IsStepOf(id, composite string) bool {
	n, ok := strings.CutPrefix(id, composite+".")
	if !ok || n == "" {
		return false
	}
	for _, r := range n {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
