package settings

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/toolbus/toolbus/internal/composite"
)

// Toolbus is the toolbus key of a settings.json (Gemini CLI's or Claude
// Code's): what toolbus reads there beside the agent's own keys.
//
//	{"toolbus": {"composites": {"read_both": {
//	  "description": "…",
//	  "parameters": {"type": "object", "properties": {"first": {"type": "string"}}},
//	  "steps": [{"tool": "read_file", "args": {"file_path": "$args.first"}},
//	            {"tool": "grep_search", "args": {"pattern": "$previous"}}],
//	  "continueOnError": false, "timeout": "5m"}}}}
type Toolbus struct {
	// Composites are the composite tools toolbus.composites defines,
	// sorted by name, each checked (composite.Definition.Validate): a
	// definition that is not sound makes the file an *Error naming it.
	Composites []composite.Definition
}

// toolbusJSON is the toolbus key.
type toolbusJSON struct {
	Composites composites `json:"composites"`
}

func (t *toolbusJSON) toolbus() Toolbus {
	if t == nil {
		return Toolbus{}
	}
	return Toolbus{Composites: t.Composites}
}

// composites are toolbus.composites, sorted by name.
type composites []composite.Definition

// compositeJSON is one entry of toolbus.composites.
type compositeJSON struct {
	Description     string         `json:"description"`
	Parameters      jsontext.Value `json:"parameters"`
	Steps           []stepJSON     `json:"steps"`
	ContinueOnError bool           `json:"continueOnError"`
	Timeout         duration       `json:"timeout"`
}

type stepJSON struct {
	Tool string         `json:"tool"`
	Args jsontext.Value `json:"args"`
}

func (cs *composites) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '{' {
		var m map[string]compositeJSON // says what the value is not
		return jsonv2.UnmarshalDecode(dec, &m, decodeOptions)
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	at := map[string]int64{}
	byName := map[string]composite.Definition{}
	for dec.PeekKind() != '}' {
		// An error names the composite where its name is written.
		start := dec.InputOffset()
		var name string
		if err := jsonv2.UnmarshalDecode(dec, &name, decodeOptions); err != nil {
			return err
		}
		var c compositeJSON
		if err := jsonv2.UnmarshalDecode(dec, &c, decodeOptions); err != nil {
			return err
		}
		d := composite.Definition{Name: name, Description: c.Description, Parameters: json.RawMessage(c.Parameters),
			ContinueOnError: c.ContinueOnError, Timeout: time.Duration(c.Timeout)}
		for _, s := range c.Steps {
			d.Steps = append(d.Steps, composite.Step{Tool: s.Tool, Args: json.RawMessage(s.Args)})
		}
		if err := d.Validate(); err != nil {
			return compositeError(start, dec.StackPointer(), err.Error())
		}
		byName[name], at[name] = d, start // a repeated name takes the last
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	out := make(composites, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		out = append(out, byName[name])
	}
	for _, d := range out {
		for i, s := range d.Steps {
			if _, ok := byName[s.Tool]; ok {
				return compositeError(at[d.Name], dec.StackPointer().AppendToken(d.Name), fmt.Sprintf("steps[%d].tool %q is a composite; a composite's steps call other tools", i, s.Tool))
			}
		}
	}
	*cs = out
	return nil
}

// compositeError is the error of the composite at ptr, whose name is
// written at offset start.
func compositeError(start int64, ptr jsontext.Pointer, msg string) error {
	return &jsonv2.SemanticError{ByteOffset: start, JSONPointer: ptr, Err: &valueError{": " + strings.Join(strings.Fields(msg), " ")}}
}
