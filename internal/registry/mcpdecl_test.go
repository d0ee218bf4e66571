package registry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
)

// An MCP tool's title, outputSchema, annotations (every key), icons and
// _meta reach the catalogue entry as the server sent them, whitespace
// aside; a change to any of them is an update; the entry decodes from the
// bucket's form with them; and the MCP declaration format lists them.
func TestMCPDeclarationIsKept(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Settings{})
	s := spec("weather")
	s.Annotations = json.RawMessage(`{"readOnlyHint":true,"x-vendor":{"tier":2},"title":"Weather"}`)
	s.Title = "Weather now"
	s.OutputSchema = json.RawMessage(`{ "type": "object", "properties": {"temp": {"type": "number", "maximum": 1e3}} }`)
	s.Icons = json.RawMessage(`[{"src":"https://x.test/w.png","sizes":["48x48"],"x-extra":true}]`)
	s.Meta = json.RawMessage(`{"vendor/id":9007199254740993}`)
	req := mcpReq("wx", s)
	if out := mustRegister(t, r, req).Outcomes[0]; out.Error != "" || out.Warning != "" {
		t.Fatalf("outcome %+v", out)
	}
	got, _ := r.Catalog().Lookup("weather")
	want := events.MCPDeclaration{Title: "Weather now",
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"temp":{"type":"number","maximum":1e3}}}`),
		Icons:        s.Icons, Meta: s.Meta}
	if !sameMCPDeclaration(got.MCPDeclaration, want) || !bytes.Equal(got.Annotations, s.Annotations) || !got.ReadOnly {
		t.Errorf("entry: %+v\nannotations %s; want %+v, the annotations as sent, read-only", got.MCPDeclaration, got.Annotations, want)
	}
	line, err := events.EncodeTool(got)
	if err != nil {
		t.Fatal(err)
	}
	back, err := events.DecodeTool(line)
	if err != nil || !sameMCPDeclaration(back.MCPDeclaration, want) {
		t.Errorf("from the bucket: %+v, %v", back, err)
	}
	var decl map[string]json.RawMessage
	if err := json.Unmarshal(catalog.NewEntry(got).Declaration(catalog.MCP), &decl); err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string]string{"title": `"Weather now"`, "outputSchema": string(want.OutputSchema),
		"annotations": string(s.Annotations), "icons": string(s.Icons), "_meta": string(s.Meta)} {
		if string(decl[key]) != v {
			t.Errorf("MCP declaration's %s: %s, want %s", key, decl[key], v)
		}
	}

	// The same again changes nothing; another outputSchema is an update.
	if res := mustRegister(t, r, req); len(res.Changes) != 0 {
		t.Errorf("the same declaration again: changes %+v", res.Changes)
	}
	req.Tools[0].OutputSchema = json.RawMessage(`{"type":"object"}`)
	if res := mustRegister(t, r, req); len(res.Changes) != 1 || res.Changes[0].Op != events.OpUpdated {
		t.Errorf("another outputSchema: changes %+v, want an update", res.Changes)
	}
	if got, _ := r.Catalog().Lookup("weather"); string(got.OutputSchema) != `{"type":"object"}` {
		t.Errorf("outputSchema %s after the update", got.OutputSchema)
	}
}

// A huge outputSchema, or values of the wrong kind, are left out of the
// entry with a warning; the tool is registered all the same, and its
// shard stays small.
func TestMCPDeclarationIsBounded(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Settings{})
	huge := spec("huge")
	huge.OutputSchema = json.RawMessage(`{"type":"object","description":"` + strings.Repeat("x", 4<<20) + `"}`)
	huge.Icons = json.RawMessage(`[{"src":"data:image/png;base64,AAAA"}]`)
	odd := spec("odd")
	odd.OutputSchema = json.RawMessage(`"a string"`)
	odd.Icons = json.RawMessage(`{"src":"x"}`)
	odd.Meta = json.RawMessage(`null`)
	res := mustRegister(t, r, mcpReq("big", huge, odd))
	if out := res.Outcomes[0]; out.Error != "" || !strings.Contains(out.Warning, "outputSchema") || !strings.Contains(out.Warning, "left out") {
		t.Errorf("huge: outcome %+v, want it registered with a warning about its outputSchema", out)
	}
	if out := res.Outcomes[1]; out.Error != "" || !strings.Contains(out.Warning, "outputSchema is left out: it is not a JSON object") ||
		!strings.Contains(out.Warning, "icons is left out: it is not a JSON array") {
		t.Errorf("odd: outcome %+v, want it registered with warnings about its outputSchema and icons", out)
	}
	got, _ := r.Catalog().Lookup("huge")
	if got.OutputSchema != nil || string(got.Icons) != string(huge.Icons) {
		t.Errorf("huge: outputSchema of %d bytes, icons %s; want none and the icons", len(got.OutputSchema), got.Icons)
	}
	if got, _ := r.Catalog().Lookup("odd"); got.OutputSchema != nil || got.Icons != nil || got.Meta != nil {
		t.Errorf("odd: %+v, want none of the three", got.MCPDeclaration)
	}
	shards, err := r.dirtyShards()
	if err != nil {
		t.Fatal(err)
	}
	for key, data := range shards {
		if len(data) > 16<<10 {
			t.Errorf("shard %s is %d bytes", key, len(data))
		}
	}
}

func sameMCPDeclaration(a, b events.MCPDeclaration) bool {
	return a.Title == b.Title && bytes.Equal(a.OutputSchema, b.OutputSchema) && bytes.Equal(a.Icons, b.Icons) && bytes.Equal(a.Meta, b.Meta)
}
