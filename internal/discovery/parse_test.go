package discovery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/toolbus/toolbus/internal/events"
)

// shape is what a test expects of a parsed declaration.
type shape struct{ name, description, params string }

func shapes(specs []events.ToolSpec) []shape {
	var out []shape
	for _, s := range specs {
		out = append(out, shape{s.Name, s.Description, string(s.Parameters)})
	}
	return out
}

func TestParseDeclarationsShapes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, out string
		want      []shape
		warnings  []string
	}{
		{"gemini tool wrappers", `[{"function_declarations": [{"name": "calc", "description": "Evaluate.", "parameters": {"type": "object"}}]},
			{"functionDeclarations": [{"name": "wc", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}]}]`,
			[]shape{{"calc", "Evaluate.", `{"type": "object"}`}, {"wc", "", `{"type": "object", "properties": {"text": {"type": "string"}}}`}}, nil},
		{"bare declarations", `[{"name": "a", "description": "A."}, {"name": "b", "parameters": {}}]`,
			[]shape{{"a", "A.", "{}"}, {"b", "", "{}"}}, nil},
		{"mixed, in order", `[{"name": "first"}, {"function_declarations": [{"name": "second"}, {"name": "third"}]}, {"name": "fourth"}]`,
			[]shape{{"first", "", "{}"}, {"second", "", "{}"}, {"third", "", "{}"}, {"fourth", "", "{}"}}, nil},
		{"function_declarations wins over functionDeclarations and name", `[{"name": "self", "functionDeclarations": [{"name": "camel"}], "function_declarations": [{"name": "snake"}]}]`,
			[]shape{{"snake", "", "{}"}}, nil},
		{"functionDeclarations read first is taken back, warnings and names included", `[{"functionDeclarations": [{"name": "x", "description": "camel"}, {}], "function_declarations": [{"name": "x", "description": "snake"}]}, {"functionDeclarations": [{"name": "y"}]}]`,
			[]shape{{"x", "snake", "{}"}, {"y", "", "{}"}}, nil},
		{"functionDeclarations wins over name", `[{"name": "self", "functionDeclarations": [{"name": "camel"}]}]`,
			[]shape{{"camel", "", "{}"}}, nil},
		{"a list that is not an array does not count", `[{"name": "self", "function_declarations": {"name": "x"}}]`,
			[]shape{{"self", "", "{}"}}, nil},
		{"parametersJsonSchema, as Gemini CLI reads it now", `[{"name": "a", "parametersJsonSchema": {"type": "object", "required": ["x"]}, "parameters": {"type": "object"}}]`,
			[]shape{{"a", "", `{"type": "object", "required": ["x"]}`}}, nil},
		{"parameters when parametersJsonSchema is no object", `[{"name": "a", "parametersJsonSchema": [1], "parameters": {"type": "object"}}]`,
			[]shape{{"a", "", `{"type": "object"}`}}, nil},
		{"parameters that are no object are {}", `[{"name": "a", "parameters": []}, {"name": "b", "parameters": "object"}, {"name": "c", "parameters": null}]`,
			[]shape{{"a", "", "{}"}, {"b", "", "{}"}, {"c", "", "{}"}},
			[]string{`item 0: the parameters of tool "a" are a JSON array, not an object; the tool takes any arguments`,
				`item 1: the parameters of tool "b" are a JSON string, not an object; the tool takes any arguments`}},
		{"nameless declarations are skipped", `[{"function_declarations": [{"description": "no name"}, {"name": ""}, {"name": null}, "text", {"name": "kept"}]}]`,
			[]shape{{"kept", "", "{}"}},
			[]string{"item 0 function_declarations[0]: a tool with no name; skipped", "item 0 function_declarations[1]: a tool with no name; skipped",
				"item 0 function_declarations[2]: a tool with no name; skipped", "item 0 function_declarations[3]: a tool with no name; skipped"}},
		{"items that are no declaration", `[1, "x", null, [], {"description": "no name, no list"}, {"name": "ok"}]`,
			[]shape{{"ok", "", "{}"}},
			[]string{"item 0 is a JSON number, not an object; skipped", "item 1 is a JSON string, not an object; skipped",
				"item 2 is a JSON null, not an object; skipped", "item 3 is a JSON array, not an object; skipped",
				"item 4 has no function_declarations or functionDeclarations array and no name; skipped"}},
		{"names that are no string or no word", `[{"name": 5}, {"name": {"x": 1}}, {"name": "two words"}, {"name": "-rf"}, {"name": "tab\there"}, {"name": "` + strings.Repeat("n", 257) + `"}, {"name": "ok.name-2:x"}]`,
			[]shape{{"ok.name-2:x", "", "{}"}},
			[]string{"item 0: the name is a JSON number, not a string; skipped", "item 1: the name is a JSON object, not a string; skipped",
				`item 2: tool "two words": the name holds a space, a control character or an invalid character; skipped`,
				`item 3: tool "-rf": the name starts with '-', and its call command would read it as an option; skipped`,
				`item 4: tool "tab\there": the name holds a space, a control character or an invalid character; skipped`,
				fmt.Sprintf("item 5: tool %q: the name is longer than 256 bytes; skipped", strings.Repeat("n", 257))}},
		{"a name given twice keeps the first", `[{"name": "a", "description": "first"}, {"function_declarations": [{"name": "a", "description": "second"}]}]`,
			[]shape{{"a", "first", "{}"}},
			[]string{`item 1 function_declarations[0]: tool "a" is declared again; the first declaration is kept`}},
		{"a description that is no string is empty", `[{"name": "a", "description": 42}]`,
			[]shape{{"a", "", "{}"}}, []string{`item 0: the description of tool "a" is a JSON number, not a string; left empty`}},
		{"what a declaration says of itself is not taken", `[{"name": "sneaky", "kind": "read", "readOnly": true, "annotations": {"readOnlyHint": true}, "source": "builtin"}]`,
			[]shape{{"sneaky", "", "{}"}}, nil},
		{"unicode names and surrounding whitespace", "\n  [{\"name\": \"résumé_工具\"}]  \n", []shape{{"résumé_工具", "", "{}"}}, nil},
		{"empty array", `[]`, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			specs, warnings, err := ParseDeclarations([]byte(c.out))
			if err != nil {
				t.Fatal(err)
			}
			if got := shapes(specs); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %q,\nwant %q", got, c.want)
			}
			for _, s := range specs {
				if s.Kind != events.KindOther || s.ReadOnly || s.Annotations != nil {
					t.Errorf("%s: kind %q, readOnly %v, annotations %s: want kind other and nothing else", s.Name, s.Kind, s.ReadOnly, s.Annotations)
				}
			}
			if !reflect.DeepEqual(warnings, c.warnings) {
				t.Errorf("warnings %q,\nwant %q", warnings, c.warnings)
			}
		})
	}
}

func TestParseDeclarationsErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, out, want string }{
		{"nothing", "  \n", "the discovery command printed nothing"},
		{"not JSON", "Usage: discover [--json]", "the discovery output is not JSON"},
		{"an object", `{"function_declarations": []}`, "is a JSON object, not an array"},
		{"a string", `"tools"`, "is a JSON string, not an array"},
		{"truncated", `[{"name": "a"}, {"name": `, "the discovery output is not valid JSON"},
		{"two arrays", `[] []`, "not one JSON array: more follows it"},
		{"trailing text", `[{"name": "a"}] done`, "not one JSON array"},
		{"a key twice", `[{"name": "a", "name": "b"}]`, `duplicate object member name "name"`},
		{"a key twice in a schema", `[{"name": "a", "parameters": {"type": "object", "type": "string"}}]`, "duplicate object member name"},
		{"invalid UTF-8", "[{\"name\": \"a\xff\"}]", "invalid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			specs, _, err := ParseDeclarations([]byte(c.out))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
			if specs != nil {
				t.Errorf("an error came with specs %v", specs)
			}
		})
	}
}

func TestParseDeclarationsBoundsWarnings(t *testing.T) {
	t.Parallel()
	out := "[" + strings.Repeat(`{"description": "x"},`, 1000) + `{"name": "ok"}]`
	specs, warnings, err := ParseDeclarations([]byte(out))
	if err != nil || len(specs) != 1 {
		t.Fatalf("%v, %v", specs, err)
	}
	if len(warnings) != maxWarnings+1 || warnings[maxWarnings] != "... and 980 more warnings" {
		t.Errorf("got %d warnings, the last %q", len(warnings), warnings[len(warnings)-1])
	}
}

// reference is Gemini CLI's reading of a discovery output, written plainly
// over encoding/json, with this package's rules for names: the names and
// the parameters (decoded) of the declarations it takes.
func reference(out []byte) (names []string, params []any, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimSpace(out)))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, false
	}
	items, isArray := v.([]any)
	if !isArray {
		return nil, nil, false
	}
	seen := map[string]bool{}
	for _, it := range items {
		m, isObject := it.(map[string]any)
		if !isObject {
			continue
		}
		var fns []any
		if a, isList := m["function_declarations"].([]any); isList {
			fns = a
		} else if a, isList := m["functionDeclarations"].([]any); isList {
			fns = a
		} else if n, _ := m["name"].(string); n != "" {
			fns = []any{m}
		}
		for _, fn := range fns {
			f, isObject := fn.(map[string]any)
			if !isObject {
				continue
			}
			name, _ := f["name"].(string)
			if name == "" || badName(name) != "" || seen[name] {
				continue
			}
			seen[name] = true
			var p any = map[string]any{}
			if s, isObject := f["parametersJsonSchema"].(map[string]any); isObject {
				p = s
			} else if s, isObject := f["parameters"].(map[string]any); isObject {
				p = s
			}
			names, params = append(names, name), append(params, p)
		}
	}
	return names, params, true
}

// FuzzParseDeclarations feeds the parser whatever a discovery command
// could print. It must never panic; what it takes must be what Gemini
// CLI's reading takes (reference); every name it takes is one word, once;
// every schema is a JSON object; and it fails only on output that is not
// strictly one JSON array.
func FuzzParseDeclarations(f *testing.F) {
	for _, s := range []string{
		`[]`, `[{"name": "a"}]`, `{"name": "a"}`, `[{"function_declarations": [{"name": "a", "parameters": {"type": "object"}}]}]`,
		`[{"functionDeclarations": [{"name": "b", "parametersJsonSchema": {"type": "object"}}, 1, null]}]`,
		`[{"name": "a", "name": "b"}]`, `[{"name": 0}, {"name": false}, {"name": "-x"}]`, "[\"\xff\"]", `[] x`, `[[[[[]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		specs, warnings, err := ParseDeclarations(out)
		refNames, refParams, refOK := reference(out)
		if err != nil {
			if specs != nil || warnings != nil {
				t.Fatalf("an error came with specs or warnings: %v", err)
			}
			if refOK && jsontext.Value(bytes.TrimSpace(out)).IsValid() {
				t.Fatalf("strictly valid JSON the reference reads was refused: %v", err)
			}
			return
		}
		if !refOK {
			t.Fatalf("took %d specs from output the reference refuses", len(specs))
		}
		if len(warnings) > maxWarnings+1 {
			t.Fatalf("%d warnings", len(warnings))
		}
		var names []string
		var params []any
		for _, s := range specs {
			if s.Kind != events.KindOther || badName(s.Name) != "" {
				t.Fatalf("spec %q of kind %q", s.Name, s.Kind)
			}
			dec := json.NewDecoder(bytes.NewReader(s.Parameters))
			dec.UseNumber()
			var p any
			if err := dec.Decode(&p); err != nil {
				t.Fatalf("%s: parameters %s: %v", s.Name, s.Parameters, err)
			}
			if _, isObject := p.(map[string]any); !isObject {
				t.Fatalf("%s: parameters %s are not an object", s.Name, s.Parameters)
			}
			names, params = append(names, s.Name), append(params, p)
		}
		if !reflect.DeepEqual(names, refNames) || !reflect.DeepEqual(params, refParams) {
			t.Fatalf("took %q %v, the reference %q %v", names, params, refNames, refParams)
		}
	})
}
