package executor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/tool"
)

// hosted is a tool this executor runs, with what the executor itself
// knows about it. Kind, source, server, trust, annotations and schema come
// from the tool's own declaration, never from the catalogue, which any
// client that can register could have changed: the catalogue only maps a
// name (or alias) to the tool and routes calls.
type hosted struct {
	impl tool.Tool
	spec events.ToolSpec
	// judged is the policy's view of the tool, all but the name.
	judged policy.ToolInput
	schema *lazySchema
	// hooks are the user's hooks that match the tool under the catalogue
	// name it was last called by, worked out on its first call (hooks.go).
	hooks atomic.Pointer[hookPlan]
}

// newHosted makes the hosted form of t. prev, when not nil, is the tool
// of the same name that the scope hosted before: when its schema is the
// same, its compiled form is taken over, so that re-hosting a set (an MCP
// server or a discovery command found the same tools again) does not
// compile any schema again.
func newHosted(t tool.Tool, prev *hosted) (*hosted, error) {
	spec := t.Spec()
	h := &hosted{impl: t, spec: spec}
	kind := spec.Kind
	if kind == "" {
		kind = events.KindOther
	}
	h.judged = policy.ToolInput{Kind: kind, Source: events.SourceBuiltin, ReadOnly: spec.ReadOnly}
	if o, ok := t.(tool.Origin); ok {
		h.judged.Source, h.judged.Server, h.judged.Trust = o.Origin()
	}
	if len(spec.Annotations) > 0 {
		if err := json.Unmarshal(spec.Annotations, &h.judged.Annotations); err != nil {
			return nil, fmt.Errorf("tool %s: annotations: %w", spec.Name, err)
		}
		if ro, _ := h.judged.Annotations["readOnlyHint"].(bool); ro {
			h.judged.ReadOnly = true
		}
	}
	if prev != nil && prev.spec.Name == spec.Name && bytes.Equal(prev.spec.Parameters, spec.Parameters) {
		h.schema = prev.schema
		return h, nil
	}
	if err := checkSchema(spec.Name, spec.Parameters); err != nil {
		return nil, err
	}
	h.schema = &lazySchema{name: spec.Name, params: spec.Parameters}
	return h, nil
}

// lazySchema is a tool's parameter schema, compiled on the tool's first
// call. Compiling one takes 50-100 µs here (the library validates it
// against its meta-schema): for a discovery command's 10,000 tools, a
// second or more before any of them could be listed, and most are never
// called. A schema that does not compile refuses every call of its tool,
// with the compiler's reason; it never lets arguments through unchecked.
type lazySchema struct {
	name   string
	params json.RawMessage
	once   sync.Once
	sch    *jsonschema.Schema
	err    error
}

// compiled is the compiled schema, or why it does not compile.
func (l *lazySchema) compiled() (*jsonschema.Schema, error) {
	l.once.Do(func() { l.sch, l.err = compileSchema(l.name, l.params) })
	return l.sch, l.err
}
