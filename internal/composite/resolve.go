package composite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/internal/events"
)

// absent is what a reference to an argument the call did not give
// resolves to: the key that holds it is left out.
type absentValue struct{}

var absent = absentValue{}

// resolve makes step i's arguments from its template: the composite's
// arguments args and the results of the steps before it. Only the
// template is read for references; what a reference brings in is taken
// as it is.
func (s *compiledStep) resolve(args map[string]any, results []events.Result) (json.RawMessage, error) {
	v, err := resolveValue(s.args, args, results)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func resolveValue(v any, args map[string]any, results []events.Result) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			r, err := resolveValue(x, args, results)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if r != absent {
				out[k] = r
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for k, x := range v {
			r, err := resolveValue(x, args, results)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", k, err)
			}
			if r == absent {
				r = nil
			}
			out[k] = r
		}
		return out, nil
	case string:
		r, ok, err := parseRef(v)
		if err != nil || !ok {
			return v, err // checked when the definition was read
		}
		return r.value(v, args, results)
	}
	return v, nil
}

// value is what r, written as s, refers to.
func (r ref) value(s string, args map[string]any, results []events.Result) (any, error) {
	if r.args {
		a, given := args[r.name]
		if !given {
			return absent, nil
		}
		if len(r.path) == 0 {
			return a, nil
		}
		return walk(s, a, r.path)
	}
	n := r.step
	if r.previous {
		n = len(results) - 1
	}
	if n < 0 || n >= len(results) {
		return nil, fmt.Errorf("%s refers to a step that has not run", s)
	}
	res := &results[n]
	if res.Error != nil {
		return nil, fmt.Errorf("%s refers to step %d, which failed (%s)", s, n, res.Error.Type)
	}
	if len(r.path) == 0 {
		return res.LLMContent, nil
	}
	doc := res.StructuredContent
	if len(doc) == 0 {
		doc = json.RawMessage(res.LLMContent)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%s: step %d gave no structured content, and its text is not JSON", s, n)
	}
	return walk(s, root, r.path)
}

// walk follows path into v: object keys, and array indexes.
func walk(s string, v any, path []string) (any, error) {
	for i, key := range path {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[key]
			if !ok {
				return nil, fmt.Errorf("%s: there is no %q at %s", s, key, strings.Join(path[:i], "."))
			}
			v = next
		case []any:
			k, err := strconv.Atoi(key)
			if err != nil || k < 0 || k >= len(x) {
				return nil, fmt.Errorf("%s: %q is not an index of the array at %s (%d elements)", s, key, strings.Join(path[:i], "."), len(x))
			}
			v = x[k]
		default:
			return nil, fmt.Errorf("%s: the value at %q is neither an object nor an array", s, strings.Join(path[:i], "."))
		}
	}
	return v, nil
}
