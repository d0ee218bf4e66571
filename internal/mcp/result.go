// Package mcp hosts an MCP server's tools as toolbus tools. This file turns
// what a server answers to tools/call into a tool's Output.
package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// textSep joins the text pieces of a result. MCP text blocks are separate
// blocks, and plain concatenation (seed 000's display) runs the last word
// of one into the first of the next; Gemini CLI's current display joins
// them with a newline, and so do we, for the model and for display alike.
const textSep = "\n"

// ErrorWithoutText is the message of an error result whose server gave no
// text to say what went wrong.
const ErrorWithoutText = "the MCP tool reported an error without text"

// Output converts the result of calling toolName on the MCP server
// serverName into a tool's Output. It never returns nil, nor panics on a
// result decoded from the wire or built of mcp-go's types (nil, nil
// blocks and pointers to blocks included), and every part it returns
// passes events.Part.Validate.
//
// For the model, LLMContent holds, in the order the server gave them, the
// text blocks joined with a newline (empty ones add nothing), resource
// links as "Resource Link: <title or name> at <uri>", and a note in
// brackets for each block that could not be kept (data that is not
// base64, an image without a MIME type) or is of a type this code does
// not know ("[unsupported content type X]"; mcp-go's decoder refuses such
// a result whole, so only one built in process has one). Images, audio and
// embedded resources are Parts, their base64 data kept as sent. When there
// is no text but there are parts, LLMContent says what the parts are, so
// that a consumer that reads only text is not handed "". A result without
// content blocks but with structuredContent has the JSON of that as its
// text; when there are blocks, structuredContent is left out, since the
// spec asks servers to give the same in the blocks.
//
// For display, an all-text result is its text, joined as for the model;
// anything else is the content array as indented JSON in a ```json fence,
// with base64 data shortened to its size.
//
// A result with isError has Err set to an MCP_TOOL_ERROR whose message,
// like LLMContent, is the server's text, or ErrorWithoutText; its parts
// are kept, as a screenshot of a failure may show what went wrong.
func Output(serverName, toolName string, res *mcp.CallToolResult) *tool.Output {
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	c := converter{server: serverName, tool: toolName}
	for _, block := range res.Content {
		c.add(block)
	}
	out := &tool.Output{Parts: c.parts}
	text := strings.Join(c.text, textSep)
	onlyStructured := len(res.Content) == 0 && hasStructured(res)
	switch {
	case len(res.Content) > 0:
		out.ReturnDisplay = c.display(res.Content)
	case onlyStructured:
		text, out.ReturnDisplay = structured(res)
	default:
		// An empty result, as seed 000 shows one.
		out.ReturnDisplay = "```json\n[]\n```"
	}
	if text == "" && len(c.parts) > 0 {
		text = c.describeParts()
	}
	out.LLMContent = text

	if res.IsError {
		// The server's text, not a description of its parts: that an
		// error came with an image says nothing of what went wrong.
		msg := strings.Join(c.text, textSep)
		if onlyStructured {
			msg = text
		}
		if msg == "" {
			msg = ErrorWithoutText
		}
		out.LLMContent = msg
		out.Err = &events.ToolError{Type: events.ErrMCPToolError, Message: msg}
		if out.ReturnDisplay == "" || len(res.Content) == 0 && !onlyStructured {
			// Nothing, or "[]", would tell a person nothing of the failure.
			out.ReturnDisplay = msg
		}
	}
	return out
}

// converter gathers a result's text pieces and parts, block by block.
type converter struct {
	server, tool string
	text         []string
	parts        []events.Part
}

func (c *converter) add(block mcp.Content) {
	switch b := deref(block).(type) {
	case mcp.TextContent:
		// An empty block adds nothing but a stray newline.
		if b.Text != "" {
			c.text = append(c.text, b.Text)
		}
	case mcp.ImageContent:
		c.media(events.PartImage, "an image", b.MIMEType, b.Data)
	case mcp.AudioContent:
		c.media(events.PartAudio, "audio", b.MIMEType, b.Data)
	case mcp.ResourceLink:
		label := b.Title
		if label == "" {
			label = b.Name
		}
		if label == "" {
			label = b.URI
		}
		c.text = append(c.text, fmt.Sprintf("Resource Link: %s at %s", label, b.URI))
	case mcp.EmbeddedResource:
		c.resource(b.Resource)
	default:
		c.text = append(c.text, fmt.Sprintf("[unsupported content type %s]", contentType(block)))
	}
}

// media keeps an image or audio block as a part, or says why it could not.
func (c *converter) media(typ events.PartType, what, mimeType, data string) {
	switch {
	case mimeType == "":
		c.note("%s without a MIME type", what)
	case data == "":
		c.note("%s (%s) without data", what, mimeType)
	case !isBase64(data):
		c.note("%s (%s) whose data is not valid base64", what, mimeType)
	default:
		c.parts = append(c.parts, events.Part{Type: typ, MIMEType: mimeType, Data: data, Size: len(data)})
	}
}

// resource keeps an embedded resource as a part, or says why it could not.
func (c *converter) resource(r mcp.ResourceContents) {
	switch r := derefResource(r).(type) {
	case mcp.TextResourceContents:
		if r.URI == "" {
			// A part needs a URI; the text is still worth more kept as
			// text than dropped.
			if r.Text != "" {
				c.text = append(c.text, r.Text)
			}
			return
		}
		c.parts = append(c.parts, events.Part{Type: events.PartResource, MIMEType: r.MIMEType, URI: r.URI, Text: r.Text})
	case mcp.BlobResourceContents:
		mimeType := r.MIMEType
		if mimeType == "" {
			// What Gemini CLI assumes of a blob that does not say.
			mimeType = "application/octet-stream"
		}
		switch {
		case r.URI == "":
			c.note("an embedded resource (%s) without a URI", mimeType)
		case !isBase64(r.Blob):
			c.note("an embedded resource %s (%s) whose data is not valid base64", r.URI, mimeType)
		default:
			c.parts = append(c.parts, events.Part{Type: events.PartResource, MIMEType: mimeType, URI: r.URI, Data: r.Blob, Size: len(r.Blob)})
		}
	case nil:
		c.note("an embedded resource without contents")
	default:
		c.note("an embedded resource of unsupported contents %T", r)
	}
}

// note adds to the text what the tool returned and could not be kept.
func (c *converter) note(format string, args ...any) {
	c.text = append(c.text, fmt.Sprintf("[Tool '%s' of MCP server '%s' returned %s; it was left out]",
		c.tool, c.server, fmt.Sprintf(format, args...)))
}

// describeParts says what the parts are, one line each.
func (c *converter) describeParts() string {
	lines := make([]string, len(c.parts))
	for i, p := range c.parts {
		var what string
		switch p.Type {
		case events.PartImage:
			what = fmt.Sprintf("an image (%s)", p.MIMEType)
		case events.PartAudio:
			what = fmt.Sprintf("audio (%s)", p.MIMEType)
		default:
			what = fmt.Sprintf("a resource %s", p.URI)
			if p.MIMEType != "" {
				what += fmt.Sprintf(" (%s)", p.MIMEType)
			}
		}
		lines[i] = fmt.Sprintf("[Tool '%s' of MCP server '%s' returned %s]", c.tool, c.server, what)
	}
	return strings.Join(lines, "\n")
}

// display is what a person is shown of a result with content blocks.
func (c *converter) display(content []mcp.Content) string {
	allText := true
	for _, block := range content {
		if _, ok := deref(block).(mcp.TextContent); !ok {
			allText = false
			break
		}
	}
	if allText {
		return strings.Join(c.text, textSep)
	}
	shown := make([]any, len(content))
	for i, block := range content {
		shown[i] = forDisplay(block)
	}
	return fenced(shown)
}

// forDisplay is a block as a person is shown it: base64 data replaced by
// its size, so that a person is not shown megabytes of it, and the type
// set, in case the server's Go code left it empty.
func forDisplay(block mcp.Content) any {
	switch b := deref(block).(type) {
	case mcp.TextContent:
		b.Type = mcp.ContentTypeText
		return b
	case mcp.ImageContent:
		b.Type, b.Data = mcp.ContentTypeImage, shorten(b.Data)
		return b
	case mcp.AudioContent:
		b.Type, b.Data = mcp.ContentTypeAudio, shorten(b.Data)
		return b
	case mcp.ResourceLink:
		b.Type = mcp.ContentTypeLink
		return b
	case mcp.EmbeddedResource:
		b.Type = mcp.ContentTypeResource
		if r, ok := derefResource(b.Resource).(mcp.BlobResourceContents); ok {
			r.Blob = shorten(r.Blob)
			b.Resource = r
		}
		return b
	default:
		// Unknown blocks are shown as they are: a person should see what
		// the model was told is unsupported.
		return block
	}
}

func shorten(data string) string {
	if !isBase64(data) {
		return fmt.Sprintf("<not base64, %d bytes>", len(data))
	}
	return fmt.Sprintf("<base64 %d bytes>", len(data))
}

// hasStructured reports whether res has structuredContent other than null.
func hasStructured(res *mcp.CallToolResult) bool {
	if len(res.RawStructuredContent) > 0 {
		return string(bytes.TrimSpace(res.RawStructuredContent)) != "null"
	}
	return res.StructuredContent != nil
}

// structured is the text (compact JSON) and the display (indented, fenced)
// of a result's structuredContent.
func structured(res *mcp.CallToolResult) (text, display string) {
	// The raw bytes, when there are any, keep what decoding into an any
	// would lose (integers past 2^53).
	var v any = json.RawMessage(res.RawStructuredContent)
	if len(res.RawStructuredContent) == 0 || !json.Valid(res.RawStructuredContent) {
		v = res.StructuredContent
	}
	b, err := marshal(v, "")
	if err != nil {
		msg := fmt.Sprintf("[structuredContent that is not JSON: %v]", err)
		return msg, msg
	}
	return b, fenced(v)
}

// fenced is v as 2-space-indented JSON in a ```json fence.
func fenced(v any) string {
	b, err := marshal(v, "  ")
	if err != nil {
		// Only a Go value built in process can get here (a channel, a NaN):
		// what came over the wire was JSON.
		return fmt.Sprintf("[content that cannot be shown as JSON: %v]", err)
	}
	return "```json\n" + b + "\n```"
}

// marshal is json.Marshal without escaping <, > and &, which a person
// reads better as they are ("<base64 12 bytes>"), indented when indent is
// not empty.
func marshal(v any, indent string) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// isBase64 reports whether s is standard base64, as MCP carries data,
// without holding its decoded bytes in memory. Line breaks are allowed, as
// encoding/base64 allows them.
func isBase64(s string) bool {
	_, err := io.Copy(io.Discard, base64.NewDecoder(base64.StdEncoding, strings.NewReader(s)))
	return err == nil
}

// contentType names a block's type for a note: its JSON type field when it
// has one, or else its Go type.
func contentType(block mcp.Content) string {
	if block == nil {
		return "null"
	}
	if b, err := json.Marshal(block); err == nil {
		var probe struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &probe) == nil && probe.Type != "" {
			return probe.Type
		}
	}
	return fmt.Sprintf("%T", block)
}

// deref turns a pointer to a known block into the block, so that a result
// built in process with &mcp.TextContent{...} reads as one decoded from the
// wire. A nil pointer stays as it is, an unsupported block.
func deref(block mcp.Content) mcp.Content {
	switch b := block.(type) {
	case *mcp.TextContent:
		if b != nil {
			return *b
		}
	case *mcp.ImageContent:
		if b != nil {
			return *b
		}
	case *mcp.AudioContent:
		if b != nil {
			return *b
		}
	case *mcp.ResourceLink:
		if b != nil {
			return *b
		}
	case *mcp.EmbeddedResource:
		if b != nil {
			return *b
		}
	}
	return block
}

// derefResource is deref for a resource's contents.
func derefResource(r mcp.ResourceContents) mcp.ResourceContents {
	switch c := r.(type) {
	case *mcp.TextResourceContents:
		if c != nil {
			return *c
		}
	case *mcp.BlobResourceContents:
		if c != nil {
			return *c
		}
	}
	return r
}
