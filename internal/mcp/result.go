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
//
// For a consumer that passes the result on as MCP (the facade), the
// result is also kept as the server sent it. Unless its content is one
// plain text block, as most are, PartsWhole is set and Parts hold every
// block in its order: text blocks and resource links too, each with its
// annotations and _meta (a block that could not be kept is a text part
// with the note that says so). StructuredContent and the result's _meta
// are kept as sent (Structured, Meta). Annotations and _meta of more
// than maxExtras bytes in all are left out, and the text says so.
func Output(serverName, toolName string, res *mcp.CallToolResult) *tool.Output {
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	c := converter{server: serverName, tool: toolName, whole: partsWhole(res.Content), budget: maxExtras}
	for _, block := range res.Content {
		c.add(block)
	}
	meta := c.meta(res.Meta)
	c.noteDropped()
	out := &tool.Output{Parts: c.parts, PartsWhole: c.whole, Meta: meta}
	if hasStructured(res) {
		out.Structured = structuredJSON(res)
	}
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
	if text == "" && c.media > 0 {
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

// maxExtras bounds the bytes of annotations and _meta (the result's and
// its blocks') that a result keeps: they ride in the result message,
// beside its text and parts, which have limits of their own.
const maxExtras = 64 << 10

// converter gathers a result's text pieces and parts, block by block.
// With whole, every block is a part, text blocks and links included.
type converter struct {
	server, tool string
	whole        bool
	text         []string
	parts        []events.Part
	media        int // parts that are not text nor links
	// budget is what is left of maxExtras; dropped counts the
	// annotations and _meta that did not fit it.
	budget, dropped int
}

// partsWhole reports whether a result of content is kept block by block:
// unless it is one text block with nothing but its text, which
// LLMContent holds as it is.
func partsWhole(content []mcp.Content) bool {
	if len(content) != 1 {
		return true
	}
	t, ok := deref(content[0]).(mcp.TextContent)
	return !ok || t.Annotations != nil || t.Meta != nil
}

func (c *converter) add(block mcp.Content) {
	switch b := deref(block).(type) {
	case mcp.TextContent:
		// An empty block adds nothing but a stray newline.
		if b.Text != "" {
			c.text = append(c.text, b.Text)
		}
		c.part(events.Part{Type: events.PartText, Text: b.Text}, b.Annotated, b.Meta)
	case mcp.ImageContent:
		c.keepMedia(events.PartImage, "an image", b.MIMEType, b.Data, b.Annotated, b.Meta)
	case mcp.AudioContent:
		c.keepMedia(events.PartAudio, "audio", b.MIMEType, b.Data, b.Annotated, b.Meta)
	case mcp.ResourceLink:
		label := b.Title
		if label == "" {
			label = b.Name
		}
		if label == "" {
			label = b.URI
		}
		line := fmt.Sprintf("Resource Link: %s at %s", label, b.URI)
		c.text = append(c.text, line)
		if b.URI == "" {
			// A part needs a URI: the line stands for the link.
			c.part(events.Part{Type: events.PartText, Text: line}, mcp.Annotated{}, nil)
			return
		}
		c.part(events.Part{Type: events.PartLink, URI: b.URI, Name: b.Name, Title: b.Title, Description: b.Description,
			MIMEType: b.MIMEType, ResourceSize: b.Size}, b.Annotated, b.Meta)
	case mcp.EmbeddedResource:
		c.resource(b.Resource, b.Annotated, b.Meta)
	default:
		c.line(fmt.Sprintf("[unsupported content type %s]", contentType(block)))
	}
}

// part adds p, with the annotations and _meta a of its block, when the
// parts are the whole content.
func (c *converter) part(p events.Part, a mcp.Annotated, meta *mcp.Meta) {
	if !c.whole {
		return
	}
	if a.Annotations != nil {
		p.Annotations = c.extra(a.Annotations)
	}
	if meta != nil {
		p.Meta = c.extra(meta)
	}
	c.parts = append(c.parts, p)
}

// extra is v as JSON, when it is a JSON object that fits what is left
// of the budget; nil otherwise.
func (c *converter) extra(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil || len(data) == 0 || data[0] != '{' {
		return nil
	}
	if len(data) > c.budget {
		c.dropped++
		return nil
	}
	c.budget -= len(data)
	return data
}

// meta is the result's _meta as JSON, nil when it has none.
func (c *converter) meta(m *mcp.Meta) json.RawMessage {
	if m == nil {
		return nil
	}
	return c.extra(m)
}

// noteDropped says how many annotations and _meta were left out.
func (c *converter) noteDropped() {
	if c.dropped > 0 {
		c.note("%d annotations or _meta beyond the %d bytes a result keeps of them", c.dropped, maxExtras)
	}
}

// keepMedia keeps an image or audio block as a part, or says why it
// could not.
func (c *converter) keepMedia(typ events.PartType, what, mimeType, data string, a mcp.Annotated, meta *mcp.Meta) {
	switch {
	case mimeType == "":
		c.note("%s without a MIME type", what)
	case data == "":
		c.note("%s (%s) without data", what, mimeType)
	case !isBase64(data):
		c.note("%s (%s) whose data is not valid base64", what, mimeType)
	default:
		c.nonText(events.Part{Type: typ, MIMEType: mimeType, Data: data, Size: len(data)}, a, meta)
	}
}

// nonText adds p, a part that is not text: every result keeps those.
func (c *converter) nonText(p events.Part, a mcp.Annotated, meta *mcp.Meta) {
	c.media++
	if c.whole {
		c.part(p, a, meta)
		return
	}
	c.parts = append(c.parts, p)
}

// resource keeps an embedded resource as a part, or says why it could not.
func (c *converter) resource(r mcp.ResourceContents, a mcp.Annotated, meta *mcp.Meta) {
	switch r := derefResource(r).(type) {
	case mcp.TextResourceContents:
		if r.URI == "" {
			// A part needs a URI; the text is still worth more kept as
			// text than dropped.
			if r.Text != "" {
				c.text = append(c.text, r.Text)
			}
			c.part(events.Part{Type: events.PartText, Text: r.Text}, a, meta)
			return
		}
		p := events.Part{Type: events.PartResource, MIMEType: r.MIMEType, URI: r.URI, Text: r.Text}
		if r.Meta != nil && c.whole {
			p.ResourceMeta = c.extra(r.Meta)
		}
		c.nonText(p, a, meta)
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
			p := events.Part{Type: events.PartResource, MIMEType: mimeType, URI: r.URI, Data: r.Blob, Size: len(r.Blob)}
			if r.Meta != nil && c.whole {
				p.ResourceMeta = c.extra(r.Meta)
			}
			c.nonText(p, a, meta)
		}
	case nil:
		c.note("an embedded resource without contents")
	default:
		c.note("an embedded resource of unsupported contents %T", r)
	}
}

// note adds to the text what the tool returned and could not be kept.
func (c *converter) note(format string, args ...any) {
	c.line(fmt.Sprintf("[Tool '%s' of MCP server '%s' returned %s; it was left out]",
		c.tool, c.server, fmt.Sprintf(format, args...)))
}

// line adds a line of toolbus's own to the text, and a text part with it
// where the block it stands for was.
func (c *converter) line(s string) {
	c.text = append(c.text, s)
	c.part(events.Part{Type: events.PartText, Text: s}, mcp.Annotated{}, nil)
}

// describeParts says what the parts that are not text are, one line
// each.
func (c *converter) describeParts() string {
	var lines []string
	for _, p := range c.parts {
		var what string
		switch p.Type {
		case events.PartText, events.PartLink:
			continue
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
		lines = append(lines, fmt.Sprintf("[Tool '%s' of MCP server '%s' returned %s]", c.tool, c.server, what))
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

// structuredJSON is a result's structuredContent as JSON, as the server
// sent it when it came over the wire; nil when it is not JSON.
func structuredJSON(res *mcp.CallToolResult) json.RawMessage {
	if len(res.RawStructuredContent) > 0 && json.Valid(res.RawStructuredContent) {
		return res.RawStructuredContent
	}
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil
	}
	return data
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
