package settings

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The toolbus key's composites read from either agent's settings.json,
// sorted by name, with what each defines.
func TestCompositesRead(t *testing.T) {
	data := `{
  // a comment, as Gemini CLI allows
  "toolbus": {"composites": {
    "z_last": {"description": "last", "steps": [{"tool": "read_file", "args": {"file_path": "README.md"}}]},
    "read_then_grep": {
      "description": "Read a file, then search for its first line.",
      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
      "steps": [
        {"tool": "read_file", "args": {"file_path": "$args.path"}},
        {"tool": "grep_search", "args": {"pattern": "$previous", "path": "$args.path", "n": [1, "$step0"]}}
      ],
      "continueOnError": true,
      "timeout": "90s"
    }}}}`
	for _, f := range []Format{GeminiSettings, ClaudeSettings} {
		file := mustParse(t, data, f)
		got := file.Toolbus.Composites
		if len(got) != 2 || got[0].Name != "read_then_grep" || got[1].Name != "z_last" {
			t.Fatalf("%v: got %+v", f, got)
		}
		d := got[0]
		if !d.ContinueOnError || d.Timeout != 90*time.Second || len(d.Steps) != 2 || d.Steps[1].Tool != "grep_search" ||
			!strings.Contains(string(d.Parameters), `"required"`) || !strings.Contains(string(d.Steps[1].Args), `"$step0"`) {
			t.Errorf("%v: got %+v", f, d)
		}
	}
	if f := mustParse(t, data, MCPConfig); len(f.Toolbus.Composites) != 0 {
		t.Errorf(".mcp.json has no toolbus key, got %+v", f.Toolbus)
	}
}

// A definition that is not sound makes the file an error that says
// where (FILE:LINE:COLUMN), which composite and which of its fields, and
// why; nothing of the file is taken.
func TestCompositesRefused(t *testing.T) {
	step := `{"tool": "read_file", "args": {"file_path": "README.md"}}`
	for _, tc := range []struct {
		name, def, want string
	}{
		{"bad name", `"bad name": {"description": "d", "steps": [` + step + `]}`, `toolbus.composites.bad name: name "bad name" is not a tool name`},
		{"no description", `"c": {"steps": [` + step + `]}`, "toolbus.composites.c: description is empty"},
		{"no steps", `"c": {"description": "d", "steps": []}`, "toolbus.composites.c: steps is empty"},
		{"steps not a list", `"c": {"description": "d", "steps": {}}`, "toolbus.composites.c.steps is not a list"},
		{"a step without a tool", `"c": {"description": "d", "steps": [{"args": {}}]}`, "toolbus.composites.c: steps[0].tool is empty"},
		{"a tool by reference", `"c": {"description": "d", "steps": [{"tool": "$args.t"}]}`, "steps[0].tool \"$args.t\": a step's tool is named in the definition"},
		{"args not an object", `"c": {"description": "d", "steps": [{"tool": "read_file", "args": [1]}]}`, "toolbus.composites.c: steps[0].args: not a JSON object"},
		{"schema not an object", `"c": {"description": "d", "parameters": 5, "steps": [` + step + `]}`, "toolbus.composites.c: parameters: not a JSON object"},
		{"schema not of an object", `"c": {"description": "d", "parameters": {"type": "string"}, "steps": [` + step + `]}`, "parameters: type is string; a tool's arguments are an object"},
		{"schema that does not compile", `"c": {"description": "d", "parameters": {"type": "object", "properties": {"x": {"type": 7}}}, "steps": [` + step + `]}`, "toolbus.composites.c: parameters: does not compile"},
		{"undeclared argument", `"c": {"description": "d", "parameters": {"type": "object", "properties": {"path": {}}}, "steps": [{"tool": "read_file", "args": {"file_path": "$args.pth"}}]}`,
			`toolbus.composites.c: steps[0].args.file_path: "$args.pth" names an argument the parameter schema does not declare`},
		{"$args without a name", `"c": {"description": "d", "steps": [{"tool": "read_file", "args": {"file_path": "$args"}}]}`, `steps[0].args.file_path: "$args": name the argument`},
		{"$previous in the first step", `"c": {"description": "d", "steps": [{"tool": "read_file", "args": {"file_path": "$previous"}}]}`, `steps[0].args.file_path: "$previous": the first step has no previous step`},
		{"a later step", `"c": {"description": "d", "steps": [` + step + `, {"tool": "read_file", "args": {"x": ["$step1"]}}]}`, `steps[1].args.x[0]: "$step1" is not an earlier step`},
		{"a bad step reference", `"c": {"description": "d", "steps": [` + step + `, {"tool": "read_file", "args": {"x": "$stepOne"}}]}`, `steps[1].args.x: "$stepOne": a step is $stepN`},
		{"an empty path", `"c": {"description": "d", "steps": [` + step + `, {"tool": "read_file", "args": {"x": "$step0..a"}}]}`, `"$step0..a": an empty key in the path`},
		{"calls itself", `"c": {"description": "d", "steps": [{"tool": "c"}]}`, "toolbus.composites.c: steps[0].tool calls the composite itself"},
		{"calls another composite", `"a": {"description": "d", "steps": [{"tool": "b"}]}, "b": {"description": "d", "steps": [` + step + `]}`,
			`toolbus.composites.a: steps[0].tool "b" is a composite`},
		{"negative timeout", `"c": {"description": "d", "timeout": "-1s", "steps": [` + step + `]}`, "toolbus.composites.c: timeout is negative"},
		{"bad timeout", `"c": {"description": "d", "timeout": "soon", "steps": [` + step + `]}`, `toolbus.composites.c.timeout: "soon" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := "{\"tools\": {},\n  \"toolbus\": {\"composites\": {" + tc.def + "}}}"
			_, err := Parse([]byte(data), "settings.json", GeminiSettings)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if !strings.HasPrefix(err.Error(), "settings.json:2:") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want settings.json:2:… %q", err, tc.want)
			}
		})
	}
}
