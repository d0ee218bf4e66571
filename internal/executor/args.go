package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// decodeArgs decodes a call's arguments for validation and for the policy.
// It is strict where a lenient decoder would let the policy and the tool
// read different arguments: a key given twice is an error (which value
// would the tool use?), and so is invalid UTF-8. Numbers stay json.Number,
// so a large integer reaches the schema and the policy exactly.
func decodeArgs(raw []byte) (map[string]any, error) {
	var args map[string]any
	if err := jsonv2.Unmarshal(raw, &args, argsOptions); err != nil {
		var se *jsonv2.SemanticError
		if errors.As(err, &se) && se.JSONKind != '{' && se.JSONKind != 0 {
			return nil, errors.New("args must be a JSON object")
		}
		return nil, fmt.Errorf("args do not decode: %v", err)
	}
	if args == nil {
		return nil, errors.New("args must be a JSON object")
	}
	return args, nil
}

var argsOptions = jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *any) error {
	if dec.PeekKind() != '0' {
		return errors.ErrUnsupported // everything but numbers: the default
	}
	tok, err := dec.ReadValue()
	if err != nil {
		return err
	}
	*v = json.Number(tok)
	return nil
}))

// caseTwins refuses an argument whose name differs from a declared
// parameter only in case. The policy reads the parameter by its exact
// name, while a tool (an MCP server written with a case-insensitive JSON
// decoder, say) might take the twin: {"file_path":"README.md",
// "FILE_PATH":".env"} must not read .env after the policy judged README.md.
func caseTwins(sch *jsonschema.Schema, args map[string]any) error {
	for sch != nil && len(sch.Properties) == 0 && sch.Ref != nil {
		sch = sch.Ref
	}
	if sch == nil {
		return nil
	}
	for k := range args {
		if _, declared := sch.Properties[k]; declared {
			continue
		}
		for p := range sch.Properties {
			if strings.EqualFold(k, p) {
				return fmt.Errorf("argument %q differs from the parameter %q only in case", k, p)
			}
		}
	}
	return nil
}
