package executor

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolbus/toolbus/internal/events"
)

// schemas compiles each tool version's parameter schema once and keeps it:
// the validator is reused for every call of that version.
type schemas struct {
	mu    sync.Mutex
	cache map[schemaKey]*jsonschema.Schema
}

// schemaKey names one version of one tool: the registry stamps every
// change of an entry with a new UpdatedAt, so the key never needs the
// schema's bytes (which would be copied and hashed on every call).
type schemaKey struct {
	name    string
	version int64
}

func newSchemas() *schemas { return &schemas{cache: make(map[schemaKey]*jsonschema.Schema)} }

func keyOf(t *events.Tool) schemaKey { return schemaKey{t.Name, t.UpdatedAt.UnixNano()} }

// get returns the compiled schema of t, compiling it on first use.
func (s *schemas) get(t *events.Tool) (*jsonschema.Schema, error) {
	k := keyOf(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.cache[k]; ok {
		return sch, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Parameters))
	if err != nil {
		return nil, fmt.Errorf("the schema of %s does not parse: %w", t.Name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// A schema may only refer to itself: nothing is fetched.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "toolbus:///" + t.Name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("the schema of %s: %w", t.Name, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("the schema of %s does not compile: %w", t.Name, err)
	}
	// Drop older versions of the same tool.
	for old := range s.cache {
		if old.name == k.name {
			delete(s.cache, old)
		}
	}
	s.cache[k] = sch
	return sch, nil
}

// validate checks args, decoded by decodeArgs, against t's schema and
// says what is wrong in one line a model can act on.
func (s *schemas) validate(t *events.Tool, args map[string]any) error {
	sch, err := s.get(t)
	if err != nil {
		return err
	}
	if err := caseTwins(sch, args); err != nil {
		return err
	}
	err = sch.Validate(args)
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
