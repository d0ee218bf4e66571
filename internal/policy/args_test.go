package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeArgs(t *testing.T) {
	tests := []struct {
		raw  string
		err  string
		want map[string]any
	}{
		{`{"a":"x","n":12345678901234567890}`, "", map[string]any{"a": "x", "n": json.Number("12345678901234567890")}},
		{`{"nested":{"n":1.5,"l":[1,"two"]}}`, "", map[string]any{"nested": map[string]any{"n": json.Number("1.5"), "l": []any{json.Number("1"), "two"}}}},
		{`{"a":1,"a":2}`, "duplicate", nil},
		{`{"o":{"b":1,"b":1}}`, "duplicate", nil},
		{"{\"a\":\"\xff\"}", "UTF-8", nil},
		{`[1]`, "must be a JSON object", nil},
		{`"s"`, "must be a JSON object", nil},
		{`null`, "must be a JSON object", nil},
		{`{"a":`, "do not decode", nil},
	}
	for _, tt := range tests {
		got, err := DecodeArgs([]byte(tt.raw))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one saying %q", tt.raw, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.raw, err)
			continue
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(tt.want)
		if string(g) != string(w) {
			t.Errorf("%s: got %s, want %s", tt.raw, g, w)
		}
	}
}

// FuzzDecodeArgs: arguments come from any caller on the bus. Decoding
// never panics, and what decodes is an object that encodes again.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":[1,{"b":null}]}`, `{"a":1,"a":2}`, `[1]`, `{"a":1e999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := DecodeArgs(raw)
		if err != nil {
			return
		}
		if args == nil {
			t.Fatal("nil map without an error")
		}
		if _, err := json.Marshal(args); err != nil {
			t.Fatalf("decoded %q does not encode: %v", raw, err)
		}
	})
}
