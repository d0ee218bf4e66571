package mcp

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// png is a 1x1 PNG, base64, as a server would send it.
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

func TestOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		res  *mcp.CallToolResult
		want tool.Output
	}{
		{
			name: "one text",
			res:  mcp.NewToolResultText("hello"),
			want: tool.Output{LLMContent: "hello", ReturnDisplay: "hello"},
		},
		{
			name: "texts joined with a newline",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				mcp.NewTextContent("line one"), mcp.NewTextContent(""), mcp.NewTextContent("line two"),
			}},
			want: tool.Output{LLMContent: "line one\nline two", ReturnDisplay: "line one\nline two"},
		},
		{
			name: "empty text",
			res:  mcp.NewToolResultText(""),
			want: tool.Output{},
		},
		{
			name: "empty result",
			res:  &mcp.CallToolResult{},
			want: tool.Output{ReturnDisplay: "```json\n[]\n```"},
		},
		{
			name: "nil result",
			want: tool.Output{ReturnDisplay: "```json\n[]\n```"},
		},
		{
			name: "image alone is described for the model",
			res:  &mcp.CallToolResult{Content: []mcp.Content{mcp.NewImageContent(png, "image/png")}},
			want: tool.Output{
				LLMContent:    "[Tool 'shot' of MCP server 'web' returned an image (image/png)]",
				ReturnDisplay: fence(`[{"type":"image","data":"<base64 96 bytes>","mimeType":"image/png"}]`),
				Parts:         []events.Part{{Type: events.PartImage, MIMEType: "image/png", Data: png, Size: len(png)}},
			},
		},
		{
			name: "image with text is not described",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				mcp.NewTextContent("the page:"), mcp.NewImageContent(png, "image/png"),
			}},
			want: tool.Output{
				LLMContent:    "the page:",
				ReturnDisplay: fence(`[{"type":"text","text":"the page:"},{"type":"image","data":"<base64 96 bytes>","mimeType":"image/png"}]`),
				Parts:         []events.Part{{Type: events.PartImage, MIMEType: "image/png", Data: png, Size: len(png)}},
			},
		},
		{
			name: "audio",
			res:  &mcp.CallToolResult{Content: []mcp.Content{mcp.NewAudioContent("AAAA", "audio/wav")}},
			want: tool.Output{
				LLMContent:    "[Tool 'shot' of MCP server 'web' returned audio (audio/wav)]",
				ReturnDisplay: fence(`[{"type":"audio","data":"<base64 4 bytes>","mimeType":"audio/wav"}]`),
				Parts:         []events.Part{{Type: events.PartAudio, MIMEType: "audio/wav", Data: "AAAA", Size: 4}},
			},
		},
		{
			name: "image that is not base64 becomes a note",
			res:  &mcp.CallToolResult{Content: []mcp.Content{mcp.NewImageContent("not base64!", "image/png")}},
			want: tool.Output{
				LLMContent:    "[Tool 'shot' of MCP server 'web' returned an image (image/png) whose data is not valid base64; it was left out]",
				ReturnDisplay: fence(`[{"type":"image","data":"<not base64, 11 bytes>","mimeType":"image/png"}]`),
			},
		},
		{
			name: "image without a MIME type becomes a note",
			res:  &mcp.CallToolResult{Content: []mcp.Content{mcp.ImageContent{Type: "image", Data: png}}},
			want: tool.Output{
				LLMContent:    "[Tool 'shot' of MCP server 'web' returned an image without a MIME type; it was left out]",
				ReturnDisplay: fence(`[{"type":"image","data":"<base64 96 bytes>","mimeType":""}]`),
			},
		},
		{
			name: "resource links as text",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				mcp.ResourceLink{Type: "resource_link", URI: "file:///a.txt", Name: "a.txt", Title: "File A"},
				mcp.NewResourceLink("file:///b.txt", "b.txt", "", "text/plain"),
			}},
			want: tool.Output{
				LLMContent: "Resource Link: File A at file:///a.txt\nResource Link: b.txt at file:///b.txt",
				ReturnDisplay: fence(`[{"type":"resource_link","uri":"file:///a.txt","name":"a.txt","title":"File A","description":"","mimeType":""},` +
					`{"type":"resource_link","uri":"file:///b.txt","name":"b.txt","description":"","mimeType":"text/plain"}]`),
			},
		},
		{
			name: "embedded text resource",
			res: &mcp.CallToolResult{Content: []mcp.Content{mcp.NewEmbeddedResource(mcp.TextResourceContents{
				URI: "file:///notes.md", MIMEType: "text/markdown", Text: "# Notes",
			})}},
			want: tool.Output{
				LLMContent:    "[Tool 'shot' of MCP server 'web' returned a resource file:///notes.md (text/markdown)]",
				ReturnDisplay: fence(`[{"type":"resource","resource":{"uri":"file:///notes.md","mimeType":"text/markdown","text":"# Notes"}}]`),
				Parts:         []events.Part{{Type: events.PartResource, MIMEType: "text/markdown", URI: "file:///notes.md", Text: "# Notes"}},
			},
		},
		{
			name: "embedded blob resource without a MIME type",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				mcp.NewTextContent("the file:"),
				mcp.NewEmbeddedResource(mcp.BlobResourceContents{URI: "file:///a.bin", Blob: "AAECAw=="}),
			}},
			want: tool.Output{
				LLMContent:    "the file:",
				ReturnDisplay: fence(`[{"type":"text","text":"the file:"},{"type":"resource","resource":{"uri":"file:///a.bin","blob":"<base64 8 bytes>"}}]`),
				Parts:         []events.Part{{Type: events.PartResource, MIMEType: "application/octet-stream", URI: "file:///a.bin", Data: "AAECAw==", Size: 8}},
			},
		},
		{
			name: "embedded blob that is not base64 becomes a note",
			res: &mcp.CallToolResult{Content: []mcp.Content{mcp.NewEmbeddedResource(mcp.BlobResourceContents{
				URI: "file:///a.pdf", MIMEType: "application/pdf", Blob: "%%%",
			})}},
			want: tool.Output{
				LLMContent:    "[Tool 'shot' of MCP server 'web' returned an embedded resource file:///a.pdf (application/pdf) whose data is not valid base64; it was left out]",
				ReturnDisplay: fence(`[{"type":"resource","resource":{"uri":"file:///a.pdf","mimeType":"application/pdf","blob":"<not base64, 3 bytes>"}}]`),
			},
		},
		{
			name: "embedded resource without contents becomes a note",
			res:  &mcp.CallToolResult{Content: []mcp.Content{mcp.EmbeddedResource{Type: "resource"}}},
			want: tool.Output{
				LLMContent:    "[Tool 'shot' of MCP server 'web' returned an embedded resource without contents; it was left out]",
				ReturnDisplay: fence(`[{"type":"resource","resource":null}]`),
			},
		},
		{
			name: "several parts and no text are all described",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				mcp.NewImageContent(png, "image/png"),
				mcp.NewEmbeddedResource(mcp.BlobResourceContents{URI: "file:///a.bin", Blob: "AAAA"}),
			}},
			want: tool.Output{
				LLMContent: "[Tool 'shot' of MCP server 'web' returned an image (image/png)]\n" +
					"[Tool 'shot' of MCP server 'web' returned a resource file:///a.bin (application/octet-stream)]",
				ReturnDisplay: fence(`[{"type":"image","data":"<base64 96 bytes>","mimeType":"image/png"},` +
					`{"type":"resource","resource":{"uri":"file:///a.bin","blob":"<base64 4 bytes>"}}]`),
				Parts: []events.Part{
					{Type: events.PartImage, MIMEType: "image/png", Data: png, Size: len(png)},
					{Type: events.PartResource, MIMEType: "application/octet-stream", URI: "file:///a.bin", Data: "AAAA", Size: 4},
				},
			},
		},
		{
			name: "pointers to blocks read as the blocks",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"},
			}},
			want: tool.Output{LLMContent: "a\nb", ReturnDisplay: "a\nb"},
		},
		{
			name: "unsupported block type is kept as a note and shown raw",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				mcp.NewTextContent("before"),
				mcp.NewToolUseContent("u1", "calc", map[string]any{"x": 1}),
			}},
			want: tool.Output{
				LLMContent:    "before\n[unsupported content type tool_use]",
				ReturnDisplay: fence(`[{"type":"text","text":"before"},{"type":"tool_use","id":"u1","name":"calc","input":{"x":1}}]`),
			},
		},
		{
			name: "nil block is kept as a note",
			res:  &mcp.CallToolResult{Content: []mcp.Content{nil}},
			want: tool.Output{LLMContent: "[unsupported content type null]", ReturnDisplay: fence(`[null]`)},
		},
		{
			name: "structured content only",
			res:  &mcp.CallToolResult{StructuredContent: map[string]any{"temp": 21.5, "city": "<Paris>"}},
			want: tool.Output{
				LLMContent:    `{"city":"<Paris>","temp":21.5}`,
				ReturnDisplay: fence(`{"city":"<Paris>","temp":21.5}`),
			},
		},
		{
			name: "structured content beside blocks is left to the blocks",
			res:  mcp.NewToolResultStructured(map[string]any{"n": 1}, "one"),
			want: tool.Output{LLMContent: "one", ReturnDisplay: "one"},
		},
		{
			name: "error with text",
			res:  mcp.NewToolResultError("no such city"),
			want: tool.Output{
				LLMContent: "no such city", ReturnDisplay: "no such city",
				Err: &events.ToolError{Type: events.ErrMCPToolError, Message: "no such city"},
			},
		},
		{
			name: "error without content",
			res:  &mcp.CallToolResult{IsError: true},
			want: tool.Output{
				LLMContent: ErrorWithoutText, ReturnDisplay: ErrorWithoutText,
				Err: &events.ToolError{Type: events.ErrMCPToolError, Message: ErrorWithoutText},
			},
		},
		{
			name: "error with an image only keeps the image",
			res:  &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.NewImageContent(png, "image/png")}},
			want: tool.Output{
				LLMContent:    ErrorWithoutText,
				ReturnDisplay: fence(`[{"type":"image","data":"<base64 96 bytes>","mimeType":"image/png"}]`),
				Parts:         []events.Part{{Type: events.PartImage, MIMEType: "image/png", Data: png, Size: len(png)}},
				Err:           &events.ToolError{Type: events.ErrMCPToolError, Message: ErrorWithoutText},
			},
		},
		{
			name: "error with structured content only",
			res:  &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{"code": 404}},
			want: tool.Output{
				LLMContent: `{"code":404}`, ReturnDisplay: fence(`{"code":404}`),
				Err: &events.ToolError{Type: events.ErrMCPToolError, Message: `{"code":404}`},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Output("web", "shot", tc.res)
			checkOutput(t, got, tc.res)
			if got.LLMContent != tc.want.LLMContent {
				t.Errorf("LLMContent: got %q, want %q", got.LLMContent, tc.want.LLMContent)
			}
			if got.ReturnDisplay != tc.want.ReturnDisplay {
				t.Errorf("ReturnDisplay: got\n%s\nwant\n%s", got.ReturnDisplay, tc.want.ReturnDisplay)
			}
			// The cases' Parts are those that are not text: with
			// PartsWhole the text parts and links are there too, and
			// checkOutput holds them to the text.
			if media := mediaParts(got.Parts); !reflect.DeepEqual(media, tc.want.Parts) {
				t.Errorf("Parts that are not text: got %+v, want %+v", media, tc.want.Parts)
			}
			if fmt.Sprint(got.Err) != fmt.Sprint(tc.want.Err) {
				t.Errorf("Err: got %+v, want %+v", got.Err, tc.want.Err)
			}
		})
	}
}

// TestOutputFromWire decodes results as mcp-go's client does, so that the
// cases above, built in Go, are known to match what arrives over the wire.
func TestOutputFromWire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, wire   string
		llm, display string
		parts        int // that are not text nor links
	}{
		{
			name:    "text and link",
			wire:    `{"content":[{"type":"text","text":"see"},{"type":"resource_link","uri":"https://x.test/a","name":"a"}]}`,
			llm:     "see\nResource Link: a at https://x.test/a",
			display: fence(`[{"type":"text","text":"see"},{"type":"resource_link","uri":"https://x.test/a","name":"a","description":"","mimeType":""}]`),
		},
		{
			name:    "large integer in structured content keeps its digits",
			wire:    `{"content":[],"structuredContent":{"id":9007199254740993}}`,
			llm:     `{"id":9007199254740993}`,
			display: fence(`{"id":9007199254740993}`),
		},
		{
			name:    "null structured content is no content",
			wire:    `{"content":[],"structuredContent":null}`,
			display: fence(`[]`),
		},
		{
			name:    "image data with line breaks",
			wire:    `{"content":[{"type":"image","mimeType":"image/png","data":"AAAA\nAAAA"}]}`,
			llm:     "[Tool 'shot' of MCP server 'web' returned an image (image/png)]",
			display: fence(`[{"type":"image","data":"<base64 9 bytes>","mimeType":"image/png"}]`),
			parts:   1,
		},
		{
			name:    "tool_result block, which a tool result should not hold",
			wire:    `{"content":[{"type":"tool_result","toolUseId":"u1","content":[{"type":"text","text":"42"}]}]}`,
			llm:     "[unsupported content type tool_result]",
			display: fence(`[{"type":"tool_result","toolUseId":"u1","content":[{"type":"text","text":"42"}]}]`),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := json.RawMessage(tc.wire)
			res, err := mcp.ParseCallToolResult(&raw)
			if err != nil {
				t.Fatalf("ParseCallToolResult: %v", err)
			}
			got := Output("web", "shot", res)
			checkOutput(t, got, res)
			if got.LLMContent != tc.llm {
				t.Errorf("LLMContent: got %q, want %q", got.LLMContent, tc.llm)
			}
			if got.ReturnDisplay != tc.display {
				t.Errorf("ReturnDisplay: got\n%s\nwant\n%s", got.ReturnDisplay, tc.display)
			}
			if n := len(mediaParts(got.Parts)); n != tc.parts {
				t.Errorf("got %d parts that are not text, want %d", n, tc.parts)
			}
		})
	}
}

// TestUnknownContentTypeFailsDecoding records why Output's unsupported-type
// path is reached only by results built in process: mcp-go's decoder
// refuses a whole result with a block type it does not know. Should that
// change, this test says the wire path is open too.
func TestUnknownContentTypeFailsDecoding(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"content":[{"type":"video","data":"AAAA","mimeType":"video/mp4"}]}`)
	if _, err := mcp.ParseCallToolResult(&raw); err == nil {
		t.Fatal("ParseCallToolResult accepted an unknown content type; Output would now see it from the wire")
	}
}

// FuzzOutput decodes arbitrary JSON as mcp-go's client decodes a tools/call
// result and holds Output to its guarantees.
func FuzzOutput(f *testing.F) {
	for _, seed := range []string{
		`{"content":[{"type":"text","text":"hi"}]}`,
		`{"content":[{"type":"image","data":"` + png + `","mimeType":"image/png"}]}`,
		`{"content":[{"type":"audio","data":"!!","mimeType":"audio/wav"}],"isError":true}`,
		`{"content":[{"type":"image","data":"AAAA","mimeType":""}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"file:///a","blob":"AA=="}}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"file:///a","text":"x","mimeType":"text/plain"}}]}`,
		`{"content":[{"type":"resource_link","uri":"u","name":"n","title":"t"}]}`,
		`{"content":[{"type":"tool_use","id":"1","name":"n","input":{}}]}`,
		`{"content":[],"structuredContent":{"a":[1,2,{"b":null}]}}`,
		`{"content":[],"isError":true}`,
		`{"content":[{"type":"text","text":""}],"isError":true}`,
		`{"_meta":{"a":1},"content":[{"type":"text","text":"x","annotations":{"priority":0.5},"_meta":{"k":[1]}}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"","text":""},"annotations":{"audience":["user"]}}]}`,
		`{"content":[{"type":"resource_link","uri":"","name":"n","size":3}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := json.RawMessage(data)
		res, err := mcp.ParseCallToolResult(&raw)
		if err != nil {
			return
		}
		checkOutput(t, Output("srv", "tool", res), res)
	})
}

// checkOutput holds an Output to what Output guarantees whatever the result.
func checkOutput(t *testing.T, got *tool.Output, res *mcp.CallToolResult) {
	t.Helper()
	if got == nil {
		t.Fatal("Output returned nil")
	}
	for i := range got.Parts {
		if err := got.Parts[i].Validate(); err != nil {
			t.Errorf("part %d: %v", i, err)
		}
	}
	if len(mediaParts(got.Parts)) > 0 && got.LLMContent == "" {
		t.Error("a result with parts has empty LLMContent")
	}
	var content []mcp.Content
	if res != nil {
		content = res.Content
	}
	plain := len(content) == 1 && !got.PartsWhole
	if plain {
		if tc, ok := deref(content[0]).(mcp.TextContent); !ok || tc.Annotations != nil || tc.Meta != nil {
			t.Errorf("PartsWhole is not set for a result of %#v", content[0])
		}
	}
	switch {
	case !got.PartsWhole && !plain:
		t.Errorf("PartsWhole is not set for a result of %d blocks", len(content))
	case got.PartsWhole && len(got.Parts) != len(content)+countNotes(got.Parts, len(content)):
		t.Errorf("PartsWhole with %d parts for %d blocks", len(got.Parts), len(content))
	case got.PartsWhole:
		// The text parts and links, in their order, are the text.
		var lines []string
		for _, p := range got.Parts {
			switch {
			case p.Type == events.PartText && p.Text != "":
				lines = append(lines, p.Text)
			case p.Type == events.PartLink:
				label := cmp.Or(p.Title, p.Name, p.URI)
				lines = append(lines, fmt.Sprintf("Resource Link: %s at %s", label, p.URI))
			}
		}
		if text := strings.Join(lines, textSep); text != "" && text != got.LLMContent {
			t.Errorf("the text parts and links read %q, LLMContent %q", text, got.LLMContent)
		}
	}
	isError := res != nil && res.IsError
	switch {
	case isError && got.Err == nil:
		t.Error("an isError result has no Err")
	case isError && (got.Err.Type != events.ErrMCPToolError || got.Err.Message == "" || got.Err.Message != got.LLMContent):
		t.Errorf("Err: got %+v with LLMContent %q, want an %s with the LLMContent as message", got.Err, got.LLMContent, events.ErrMCPToolError)
	case !isError && got.Err != nil:
		t.Errorf("a result without isError has Err %+v", got.Err)
	}
	if isError && got.ReturnDisplay == "" {
		t.Error("an isError result has nothing to display")
	}
}

// mediaParts are the parts that are not text nor links; nil for none.
func mediaParts(parts []events.Part) []events.Part {
	var out []events.Part
	for _, p := range parts {
		if p.Type != events.PartText && p.Type != events.PartLink {
			out = append(out, p)
		}
	}
	return out
}

// countNotes is how many parts of a whole result of n blocks are not one
// of its blocks: a note after them all (annotations and _meta left out).
func countNotes(parts []events.Part, n int) int {
	if len(parts) > n && parts[len(parts)-1].Type == events.PartText && strings.Contains(parts[len(parts)-1].Text, "annotations or _meta beyond") {
		return 1
	}
	return 0
}

// fence is compact JSON as Output displays it: indented by two spaces in a
// ```json fence.
func fence(compact string) string {
	s, err := marshal(json.RawMessage(compact), "  ")
	if err != nil {
		panic(err)
	}
	return "```json\n" + strings.TrimSpace(s) + "\n```"
}

// TestOutputKeepsTheResultAsSent: a result of more than one plain text
// block is kept block by block, each with its annotations and _meta, a
// link as a link, embedded resources with their own _meta; its
// structuredContent and _meta as the server sent them.
func TestOutputKeepsTheResultAsSent(t *testing.T) {
	t.Parallel()
	wire := `{"_meta":{"srv/trace":"t-1","n":9007199254740993},
		"content":[
		{"type":"text","text":"Error: it failed","annotations":{"audience":["user","assistant"],"priority":1},"_meta":{"k":"v"}},
		{"type":"image","data":"` + png + `","mimeType":"image/png","annotations":{"priority":0.5,"lastModified":"2025-01-12T15:00:58Z"}},
		{"type":"resource_link","uri":"test://static/resource/2","name":"Text Resource 2","title":"Two","description":"plaintext","mimeType":"text/plain","size":0,"annotations":{"audience":["assistant"]}},
		{"type":"resource","resource":{"uri":"test://r/1","mimeType":"text/plain","text":"one","_meta":{"rk":1}},"annotations":{"priority":0.25}},
		{"type":"resource","resource":{"uri":"test://r/2","blob":"AAECAw=="},"_meta":{"b":true}},
		{"type":"text","text":""}
	],"structuredContent":{"id":9007199254740993,"list":[1.50,"x"]}}`
	raw := json.RawMessage(wire)
	res, err := mcp.ParseCallToolResult(&raw)
	if err != nil {
		t.Fatal(err)
	}
	got := Output("srv", "tool", res)
	checkOutput(t, got, res)
	zero := int64(0)
	want := []events.Part{
		{Type: events.PartText, Text: "Error: it failed", Annotations: json.RawMessage(`{"audience":["user","assistant"],"priority":1}`), Meta: json.RawMessage(`{"k":"v"}`)},
		{Type: events.PartImage, MIMEType: "image/png", Data: png, Size: len(png), Annotations: json.RawMessage(`{"priority":0.5,"lastModified":"2025-01-12T15:00:58Z"}`)},
		{Type: events.PartLink, URI: "test://static/resource/2", Name: "Text Resource 2", Title: "Two", Description: "plaintext", MIMEType: "text/plain",
			ResourceSize: &zero, Annotations: json.RawMessage(`{"audience":["assistant"]}`)},
		{Type: events.PartResource, URI: "test://r/1", MIMEType: "text/plain", Text: "one", ResourceMeta: json.RawMessage(`{"rk":1}`), Annotations: json.RawMessage(`{"priority":0.25}`)},
		{Type: events.PartResource, URI: "test://r/2", MIMEType: "application/octet-stream", Data: "AAECAw==", Size: 8, Meta: json.RawMessage(`{"b":true}`)},
		{Type: events.PartText},
	}
	if !got.PartsWhole || !reflect.DeepEqual(got.Parts, want) {
		gotJSON, _ := json.Marshal(got.Parts)
		wantJSON, _ := json.Marshal(want)
		t.Errorf("PartsWhole %v, parts\n%s\nwant\n%s", got.PartsWhole, gotJSON, wantJSON)
	}
	if s := string(got.Structured); s != `{"id":9007199254740993,"list":[1.50,"x"]}` {
		t.Errorf("Structured %s, want the server's bytes", s)
	}
	var meta map[string]any
	if err := json.Unmarshal(got.Meta, &meta); err != nil || meta["srv/trace"] != "t-1" {
		t.Errorf("Meta %s, %v", got.Meta, err)
	}
	if want := "Error: it failed\nResource Link: Two at test://static/resource/2"; got.LLMContent != want {
		t.Errorf("LLMContent %q, want %q", got.LLMContent, want)
	}

	// One text block with nothing else is the text alone, as ever.
	for _, plain := range []*mcp.CallToolResult{mcp.NewToolResultText("hi"), mcp.NewToolResultStructured(map[string]any{"a": 1}, `{"a":1}`)} {
		if got := Output("srv", "tool", plain); got.PartsWhole || got.Parts != nil || got.Meta != nil {
			t.Errorf("a plain text result: PartsWhole %v, parts %+v, meta %s", got.PartsWhole, got.Parts, got.Meta)
		}
	}
	// An annotated one is kept as a part.
	annotated := &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent{Type: "text", Text: "hi",
		Annotated: mcp.Annotated{Annotations: &mcp.Annotations{Audience: []mcp.Role{mcp.RoleUser}}}}}}
	if got := Output("srv", "tool", annotated); !got.PartsWhole || len(got.Parts) != 1 || string(got.Parts[0].Annotations) != `{"audience":["user"]}` {
		t.Errorf("an annotated text: PartsWhole %v, parts %+v", got.PartsWhole, got.Parts)
	}
}

// Annotations and _meta past maxExtras are left out, and the text says so.
func TestOutputBoundsAnnotationsAndMeta(t *testing.T) {
	t.Parallel()
	big := &mcp.Meta{AdditionalFields: map[string]any{"blob": strings.Repeat("x", maxExtras)}}
	res := &mcp.CallToolResult{Result: mcp.Result{Meta: big}, Content: []mcp.Content{
		mcp.TextContent{Type: "text", Text: "a", Meta: &mcp.Meta{AdditionalFields: map[string]any{"small": 1}}},
		mcp.TextContent{Type: "text", Text: "b", Meta: big},
	}}
	got := Output("srv", "tool", res)
	checkOutput(t, got, res)
	if got.Meta != nil || string(got.Parts[0].Meta) != `{"small":1}` || got.Parts[1].Meta != nil {
		t.Errorf("meta %d bytes, parts %+v; want only the small _meta kept", len(got.Meta), got.Parts)
	}
	if !strings.Contains(got.LLMContent, "2 annotations or _meta beyond") {
		t.Errorf("LLMContent %q does not say what was left out", got.LLMContent)
	}
}
