// Package composite is toolbus's composite tools: a name, a description
// and a parameter schema for a list of steps, each a call of another
// tool, defined in settings (the toolbus key of settings.json) and run
// as one tool of kind composite (seed 004's composite tools).
//
// A composite widens nothing. Its executor sends each step over the bus
// as a call of the composite's own caller (tool.Call.Invoke), so that the
// executor taking the step binds it to that caller's principal and the
// policy judges it as if the caller had made it: routing, validation,
// policy, confirmation and audit apply to every step as to any call.
//
// A step's arguments are a JSON object whose string values may be
// references, each a whole value (never a part of a string):
//
//	$args.NAME      the composite's argument NAME (absent: the key is left out)
//	$previous       the previous step's llmContent
//	$stepN          step N's llmContent (steps count from 0)
//	$args.NAME.PATH, $previous.PATH, $stepN.PATH
//	                a value inside: PATH is keys and array indexes joined
//	                by dots, into the argument, or into the step's
//	                structuredContent (else its llmContent read as JSON)
//
// $previous and $stepN are the references batches take
// (events.BatchInvocation). References are resolved once, from the
// definition: a value an argument or a step brings in is never read for
// references again.
package composite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxSteps bounds a composite's steps.
const MaxSteps = 32

// DefaultTimeout is a composite call's deadline when its definition sets
// none: room for its steps, each under its own deadline, and for a person
// to answer a step that asks.
const DefaultTimeout = 10 * time.Minute

// Definition is a composite as its settings define it.
type Definition struct {
	// Name is the tool's name: letters, digits, '_', '.' and '-', at most
	// 64, starting with a letter or '_'.
	Name        string
	Description string
	// Parameters is the JSON Schema of the composite's arguments, a JSON
	// object; none means an object with any properties.
	Parameters json.RawMessage
	// Steps are run in order.
	Steps []Step
	// ContinueOnError runs the remaining steps after one fails or is
	// denied; without it the composite stops there.
	ContinueOnError bool
	// Timeout is the composite call's deadline; zero for DefaultTimeout.
	Timeout time.Duration
}

// Step is one call of a composite.
type Step struct {
	// Tool is the catalogue name (or alias) of the tool the step calls.
	Tool string
	// Args are the step's arguments, a JSON object, with references.
	Args json.RawMessage
}

var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// Validate checks d: its name, its description, its schema (which must
// compile, for an object), and every step's tool and arguments, whose
// references must name an argument the schema declares (when it declares
// properties) and an earlier step. The error names the field at fault
// ("steps[1].args.file_path: ...").
func (d *Definition) Validate() error {
	_, err := d.compile()
	return err
}

// compiled is a definition checked, its arguments' templates decoded.
type compiled struct {
	def   Definition
	steps []compiledStep
}

type compiledStep struct {
	tool string
	args map[string]any // the template, with json.Number numbers
}

func (d *Definition) compile() (*compiled, error) {
	switch {
	case !validName.MatchString(d.Name):
		return nil, fmt.Errorf("name %q is not a tool name: letters, digits, '_', '.' and '-', at most 64, starting with a letter or '_'", d.Name)
	case strings.TrimSpace(d.Description) == "":
		return nil, errors.New("description is empty: a model chooses a tool by its description")
	case len(d.Steps) == 0:
		return nil, errors.New("steps is empty: a composite calls at least one tool")
	case len(d.Steps) > MaxSteps:
		return nil, fmt.Errorf("steps has %d steps; a composite may have at most %d", len(d.Steps), MaxSteps)
	case d.Timeout < 0:
		return nil, errors.New("timeout is negative")
	}
	declared, err := checkSchema(d.Name, d.Parameters)
	if err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	c := &compiled{def: *d}
	for i, s := range d.Steps {
		where := fmt.Sprintf("steps[%d]", i)
		switch {
		case strings.TrimSpace(s.Tool) == "":
			return nil, fmt.Errorf("%s.tool is empty", where)
		case strings.HasPrefix(s.Tool, "$"):
			return nil, fmt.Errorf("%s.tool %q: a step's tool is named in the definition, never by a reference", where, s.Tool)
		case s.Tool == d.Name:
			return nil, fmt.Errorf("%s.tool calls the composite itself", where)
		}
		args, err := decodeObject(s.Args)
		if err != nil {
			return nil, fmt.Errorf("%s.args: %w", where, err)
		}
		if err := checkRefs(args, where+".args", i, declared); err != nil {
			return nil, err
		}
		c.steps = append(c.steps, compiledStep{tool: s.Tool, args: args})
	}
	return c, nil
}

// decodeObject decodes a JSON object, numbers kept as written; none is
// an empty object.
func decodeObject(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

// checkSchema compiles the composite's parameter schema, as the executor
// will for its calls, and returns the properties it declares (nil when
// it declares none, and any name may be given).
func checkSchema(name string, params json.RawMessage) (map[string]bool, error) {
	trimmed := bytes.TrimSpace(params)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	obj, err := decodeObject(trimmed)
	if err != nil {
		return nil, err
	}
	if t, ok := obj["type"]; ok && t != "object" {
		return nil, fmt.Errorf("type is %v; a tool's arguments are an object", t)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(trimmed))
	if err != nil {
		return nil, err
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.UseLoader(jsonschema.SchemeURLLoader{}) // nothing is fetched
	url := "toolbus:///composite/" + name + ".json"
	if err := comp.AddResource(url, doc); err != nil {
		return nil, err
	}
	if _, err := comp.Compile(url); err != nil {
		return nil, fmt.Errorf("does not compile: %w", err)
	}
	props, ok := obj["properties"].(map[string]any)
	if !ok {
		return nil, nil
	}
	declared := make(map[string]bool, len(props))
	for k := range props {
		declared[k] = true
	}
	return declared, nil
}

// checkRefs checks every reference in v, at where, of step i.
func checkRefs(v any, where string, i int, declared map[string]bool) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if err := checkRefs(x, where+"."+k, i, declared); err != nil {
				return err
			}
		}
	case []any:
		for k, x := range v {
			if err := checkRefs(x, fmt.Sprintf("%s[%d]", where, k), i, declared); err != nil {
				return err
			}
		}
	case string:
		r, ok, err := parseRef(v)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", where, err)
		case !ok:
		case r.args && declared != nil && !declared[r.name]:
			return fmt.Errorf("%s: %q names an argument the parameter schema does not declare", where, v)
		case !r.args && r.previous && i == 0:
			return fmt.Errorf("%s: %q: the first step has no previous step", where, v)
		case !r.args && !r.previous && r.step >= i:
			return fmt.Errorf("%s: %q is not an earlier step (this is step %d; steps count from 0)", where, v, i)
		}
	}
	return nil
}

// ref is a parsed reference.
type ref struct {
	args     bool   // $args.name
	name     string // the argument's name
	previous bool   // $previous
	step     int    // $stepN
	path     []string
}

// parseRef reads s as a reference: ok is false for a string that is
// none, and err says what is wrong with one that starts like one but is
// not well formed.
func parseRef(s string) (r ref, ok bool, err error) {
	head, rest, dotted := strings.Cut(s, ".")
	if head != "$args" && head != "$previous" && !strings.HasPrefix(head, "$step") {
		return ref{}, false, nil
	}
	var path []string
	if dotted {
		path = strings.Split(rest, ".")
		for _, p := range path {
			if p == "" {
				return ref{}, false, fmt.Errorf("%q: an empty key in the path", s)
			}
		}
	}
	switch {
	case head == "$args":
		if len(path) == 0 {
			return ref{}, false, fmt.Errorf("%q: name the argument, $args.NAME", s)
		}
		return ref{args: true, name: path[0], path: path[1:]}, true, nil
	case head == "$previous":
		return ref{previous: true, path: path}, true, nil
	case strings.HasPrefix(head, "$step"):
		n, err := strconv.Atoi(head[len("$step"):])
		if err != nil || n < 0 || strconv.Itoa(n) != head[len("$step"):] {
			return ref{}, false, fmt.Errorf("%q: a step is $stepN, N counting from 0", s)
		}
		return ref{step: n, path: path}, true, nil
	}
	return ref{}, false, nil
}
