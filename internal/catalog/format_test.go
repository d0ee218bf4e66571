package catalog

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzAppendString checks the hand-written JSON string encoder against
// encoding/json: always valid JSON, decoding to what encoding/json keeps of
// the input (invalid UTF-8 becomes U+FFFD).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "ctl\x00\x1f\n\r\t", "\u2028\u2029", "bad\xff\xfeutf8", "ü🚀", "<html>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("appendString(%q) = %s, not a JSON string: %v", s, got, err)
		}
		ref, _ := json.Marshal(s)
		var refBack string
		json.Unmarshal(ref, &refBack)
		if back != refBack {
			t.Fatalf("appendString(%q) decodes to %q, encoding/json's to %q", s, back, refBack)
		}
	})
}

func TestParseFormat(t *testing.T) {
	t.Parallel()
	for f := Gemini; f < numFormats; f++ {
		got, err := ParseFormat(f.String())
		if err != nil || got != f {
			t.Errorf("ParseFormat(%q) = %v, %v", f, got, err)
		}
	}
	if _, err := ParseFormat("cobol"); err == nil || !strings.Contains(err.Error(), "want gemini, openai, anthropic or mcp") {
		t.Errorf("ParseFormat(cobol): %v", err)
	}
}
