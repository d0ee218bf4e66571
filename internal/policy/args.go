package policy

import (
	"encoding/json"
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DecodeArgs decodes a call's arguments for validation and for the policy.
// It is strict where a lenient decoder would let the policy and the tool
// read different arguments: a key given twice is an error (which value
// would the tool use?), and so is invalid UTF-8. Numbers stay json.Number,
// so a large integer reaches the schema and the policy exactly.
func DecodeArgs(raw []byte) (map[string]any, error) {
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
