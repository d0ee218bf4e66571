package registry

import (
	"bytes"
	"encoding/json"
	"flag"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestGoldenDeclarations pins the declarations each provider format gets,
// for a built-in tool and for an MCP tool whose name and schema need the
// registry's rules (a dotted server, a taken name, anyOf with a default, a
// numeric enum with null) and that declares what MCP has beyond (a title,
// an outputSchema, icons, _meta), which only the MCP format lists.
func TestGoldenDeclarations(t *testing.T) {
	t.Parallel()
	const path = "testdata/declarations.txtar"
	r := newRegistry(t, Settings{})
	mustRegister(t, r, builtinReq("exec", events.ToolSpec{Name: "read_file", DisplayName: "ReadFile", Description: "Reads a file.", Kind: events.KindRead,
		Parameters: json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}`)}))
	mustRegister(t, r, mcpReq("docs.internal", events.ToolSpec{Name: "read_file", Description: "Reads a page.",
		Parameters: json.RawMessage(`{
			"type": "object",
			"properties": {
				"page": {"anyOf": [{"type": "string"}, {"type": "integer"}], "default": "index"},
				"level": {"type": "integer", "enum": [1, 2, null]}
			}
		}`),
		Annotations: json.RawMessage(`{"readOnlyHint":true}`),
		MCPDeclaration: events.MCPDeclaration{Title: "Read a page", OutputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			Icons: json.RawMessage(`[{"src":"https://docs.test/icon.png","mimeType":"image/png"}]`), Meta: json.RawMessage(`{"docs/version":2}`)}}))
	c := r.Catalog()
	var files []txtar.File
	for f := catalog.Gemini; f <= catalog.MCP; f++ {
		var b bytes.Buffer
		if err := json.Indent(&b, c.Declarations(f), "", "  "); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b.WriteByte('\n')
		files = append(files, txtar.File{Name: f.String() + ".json", Data: b.Bytes()})
	}
	testkit.Golden(t, path, "Declarations per provider format.\nRegenerate with: go test ./internal/registry -run TestGoldenDeclarations -update\n", *update, files)
}
