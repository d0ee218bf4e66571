package catalog

import (
	"fmt"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/events"
)

// Format is a model API's shape of a tool declaration.
type Format int

// The declaration formats.
const (
	// Gemini is a FunctionDeclaration: name, description, parameters
	// (sanitised for the Gemini API).
	Gemini Format = iota
	// OpenAI is a chat-completions tool: {"type":"function","function":{...}}.
	OpenAI
	// Anthropic is a Messages API tool: name, description, input_schema.
	Anthropic
	// MCP is an MCP tools/list entry: name, title, description,
	// inputSchema, and what an MCP server declared of the tool beyond
	// (outputSchema, annotations, icons, _meta).
	MCP
	numFormats
)

var formatNames = [numFormats]string{"gemini", "openai", "anthropic", "mcp"}

func (f Format) String() string {
	if f < 0 || f >= numFormats {
		return fmt.Sprintf("Format(%d)", int(f))
	}
	return formatNames[f]
}

// ParseFormat turns "gemini", "openai", "anthropic" or "mcp" into a Format.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if n == s {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("unknown declaration format %q (want gemini, openai, anthropic or mcp)", s)
}

// ExportedName is the name a tool has in format f: the catalogue name,
// except for OpenAI and Anthropic, whose name rules need ExportName.
func ExportedName(t *events.Tool, f Format) string {
	if f == OpenAI || f == Anthropic {
		return t.ExportName
	}
	return t.Name
}

// appendDeclaration appends t's declaration in format f. The schemas are
// copied as the raw JSON they are stored as, never decoded.
func appendDeclaration(b []byte, t *events.Tool, f Format) []byte {
	switch f {
	case Gemini:
		params := t.GeminiParameters
		if len(params) == 0 {
			params = t.Parameters
		}
		b = append(b, `{"name":`...)
		b = appendString(b, t.Name)
		b = append(b, `,"description":`...)
		b = appendString(b, t.Description)
		b = append(b, `,"parameters":`...)
		b = append(b, params...)
	case OpenAI:
		b = append(b, `{"type":"function","function":{"name":`...)
		b = appendString(b, t.ExportName)
		b = append(b, `,"description":`...)
		b = appendString(b, t.Description)
		b = append(b, `,"parameters":`...)
		b = append(b, t.Parameters...)
		b = append(b, '}')
	case Anthropic:
		b = append(b, `{"name":`...)
		b = appendString(b, t.ExportName)
		b = append(b, `,"description":`...)
		b = appendString(b, t.Description)
		b = append(b, `,"input_schema":`...)
		b = append(b, t.Parameters...)
	case MCP:
		b = append(b, `{"name":`...)
		b = appendString(b, t.Name)
		if title := mcpTitle(t); title != "" {
			b = append(b, `,"title":`...)
			b = appendString(b, title)
		}
		b = append(b, `,"description":`...)
		b = appendString(b, t.Description)
		b = append(b, `,"inputSchema":`...)
		b = append(b, t.Parameters...)
		for _, f := range [...]struct {
			key string
			raw []byte
		}{{`,"outputSchema":`, t.OutputSchema}, {`,"annotations":`, t.Annotations}, {`,"icons":`, t.Icons}, {`,"_meta":`, t.Meta}} {
			if len(f.raw) > 0 {
				b = append(b, f.key...)
				b = append(b, f.raw...)
			}
		}
	}
	return append(b, '}')
}

// mcpTitle is t's title in an MCP declaration: the title its MCP server
// gave it, else its display name when that is not its name.
func mcpTitle(t *events.Tool) string {
	if t.Title != "" {
		return t.Title
	}
	if t.DisplayName != t.Name {
		return t.DisplayName
	}
	return ""
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (HTML characters aside), so invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
