package human

import "testing"

func TestJSON(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"command":"ls \u0026\u0026 rm -rf /"}`, `{"command":"ls && rm -rf /"}`},
		{`{ "b": 1, "a": "\u003cx\u003e \u00e9" }`, `{"b":1,"a":"<x> é"}`},
		{`{"n":12345678901234567890,"f":1e400}`, `{"n":12345678901234567890,"f":1e400}`},
		{`{"esc":"\u001b[2J\n"}`, `{"esc":"\u001b[2J\n"}`},
		{`not json`, `not json`},
	} {
		if got := JSON([]byte(tt.in)); got != tt.want {
			t.Errorf("JSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
