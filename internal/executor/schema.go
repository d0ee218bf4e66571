package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// checkSchema is what hosting a tool checks of its schema at once, cheaply:
// none, or a JSON object. The rest is compileSchema's, on the first call.
func checkSchema(name string, params json.RawMessage) error {
	trimmed := bytes.TrimSpace(params)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return fmt.Errorf("the schema of %s is not a JSON object", name)
	}
	return nil
}

// compileSchema compiles a tool's parameter schema, once, on the tool's
// first call (lazySchema); no schema means an object with any properties.
func compileSchema(name string, params json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
		params = json.RawMessage(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("the schema of %s does not parse: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// A schema may only refer to itself: nothing is fetched.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "toolbus:///" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("the schema of %s: %w", name, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("the schema of %s does not compile: %w", name, err)
	}
	return sch, nil
}

// validateArgs checks args, decoded by policy.DecodeArgs, against sch and says
// what is wrong in one line a model can act on.
func validateArgs(sch *jsonschema.Schema, args map[string]any) error {
	if err := caseTwins(sch, args); err != nil {
		return err
	}
	err := sch.Validate(args)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return errors.New(flatten(ve))
	}
	return err
}

var printer = message.NewPrinter(language.English)

// flatten turns a validation error tree into "at /path: message" lines.
func flatten(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			parts = append(parts, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(parts, "; ")
}
