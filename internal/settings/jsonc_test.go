package settings

import (
	"encoding/json"
	"testing"
)

func TestStripComments(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"none", `{"a": 1}`, `{"a": 1}`},
		{"line", "{\"a\": 1 // one\n}", "{\"a\": 1       \n}"},
		{"block", `{/* x */"a": 1}`, `{       "a": 1}`},
		{"block keeps newlines", "{/* x\ny */\"a\": 1}", "{    \n    \"a\": 1}"},
		{"slashes in a string", `{"u": "http://x/*y*/"}`, `{"u": "http://x/*y*/"}`},
		{"escaped quote in a string", `{"q": "a\"//b"}`, `{"q": "a\"//b"}`},
		{"star slash right after the opener", `/*/ x */1`, `        1`},
		{"unterminated block", `1 /* x`, `1     `},
		{"lone slash at the end", `1 /`, `1 /`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			if got := string(stripComments(in)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if string(in) != tc.in {
				t.Errorf("input changed to %q", in)
			}
		})
	}
}

// FuzzStripComments: the output is as long as the input, and JSON without
// comments comes back unchanged.
func FuzzStripComments(f *testing.F) {
	for _, s := range []string{`{"a":"//"}`, "//x\n1", `/* */`, `"\\"//`, `/*/`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out := stripComments(data)
		if len(out) != len(data) {
			t.Fatalf("length %d, want %d", len(out), len(data))
		}
		if json.Valid(data) && string(out) != string(data) {
			t.Fatalf("valid JSON changed: %q -> %q", data, out)
		}
	})
}
