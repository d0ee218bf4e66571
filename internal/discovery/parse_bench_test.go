package discovery

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// declarations is a discovery output of n declarations, each with a
// description and a small schema, about 250 bytes apiece.
func declarations(n int) []byte {
	var b strings.Builder
	b.WriteString(`[{"function_declarations": [`)
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"name": "tool_%05d", "description": "Tool number %d of the project: it does one thing well.", `+
			`"parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "what to work on"}, `+
			`"count": {"type": "integer"}}, "required": ["text"]}}`, i, i)
	}
	b.WriteString("]}]\n")
	return []byte(b.String())
}

func BenchmarkParseDeclarations(b *testing.B) {
	out := declarations(10_000)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		specs, _, err := ParseDeclarations(out)
		if err != nil || len(specs) != 10_000 {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanOnly(b *testing.B) {
	out := declarations(10_000)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		if !jsontext.Value(out).IsValid() {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkStdlibUnmarshal(b *testing.B) {
	out := declarations(10_000)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		var v []struct {
			FD []struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function_declarations"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			b.Fatal(err)
		}
	}
}
