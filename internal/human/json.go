package human

import (
	"encoding/json"

	"github.com/go-json-experiment/json/jsontext"
)

// JSON is a JSON value as a person would write it, on one line: strings
// with their characters rather than the escapes the wire form uses for
// '&', '<' and '>' ("ls && rm -rf /", not "ls \u0026\u0026 rm -rf /"),
// numbers and key order as recorded. Control characters stay escaped, so
// that a value cannot move a terminal's cursor. Data that is not JSON is
// shown as it is.
func JSON(raw json.RawMessage) string {
	v := jsontext.Value(append([]byte(nil), raw...))
	if err := v.Format(jsontext.PreserveRawStrings(false), jsontext.EscapeForHTML(false), jsontext.EscapeForJS(false)); err != nil {
		return string(raw)
	}
	return string(v)
}
