package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"time"
)

// Kind is what a tool does, as Gemini CLI classifies tools (seed 003). The
// default policy judges tools by kind.
type Kind string

// The kinds of seed 003.
const (
	KindRead    Kind = "read"
	KindEdit    Kind = "edit"
	KindDelete  Kind = "delete"
	KindMove    Kind = "move"
	KindSearch  Kind = "search"
	KindExecute Kind = "execute"
	KindThink   Kind = "think"
	KindFetch   Kind = "fetch"
	KindOther   Kind = "other"
)

// The kinds of what an MCP server offers beside tools: a prompt to get,
// a resource (or a template of resources) to read. Their entries are in
// the catalogue, named by the rules of MCP tools, and their gets and reads
// are calls that the policy judges and the audit records; but they are
// not tools (IsTool), and no tool list or declaration shows them.
const (
	KindPrompt   Kind = "prompt"
	KindResource Kind = "resource"
)

// KindComposite is a composite tool: a named list of steps, each a call of
// another tool that its caller's invocation sends and the policy judges
// on its own (internal/composite).
const KindComposite Kind = "composite"

// Kinds lists every valid kind.
var Kinds = []Kind{KindRead, KindEdit, KindDelete, KindMove, KindSearch, KindExecute, KindThink, KindFetch, KindOther, KindPrompt, KindResource, KindComposite}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

// Mutator reports whether tools of this kind change the world (seed 003
// MUTATOR_KINDS).
func (k Kind) Mutator() bool {
	return k == KindEdit || k == KindDelete || k == KindMove || k == KindExecute
}

// Source is where a tool came from. It orders the catalogue (built-in, then
// discovered, then MCP) and decides the naming rules.
type Source string

// The three sources of seed 000, and the composite tools defined in the
// settings an executor reads (KindComposite).
const (
	SourceBuiltin    Source = "builtin"
	SourceDiscovered Source = "discovered"
	SourceMCP        Source = "mcp"
	SourceComposite  Source = "composite"
)

// Valid reports whether s is a known source.
func (s Source) Valid() bool {
	return s == SourceBuiltin || s == SourceDiscovered || s == SourceMCP || s == SourceComposite
}

// ToolSpec is a tool as its provider declares it on tool.register. The
// registry turns it into a catalogue Tool, applying the naming rules.
type ToolSpec struct {
	// Name is the tool's own name. For an MCP tool this is the name the
	// server uses; the registry derives the catalogue name from it.
	Name        string `json:"name"`
	DisplayName string `json:"displayName,omitempty"`
	Description string `json:"description"`
	// Kind defaults to "other".
	Kind Kind `json:"kind,omitempty"`
	// Category groups tools for enabling and disabling as a whole (seed
	// 004: filesystem, search, execution, web...). Defaults to the source.
	Category string `json:"category,omitempty"`
	// Parameters is the JSON Schema of the arguments, an object, kept as the
	// provider sent it. Missing means no parameters.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// ReadOnly and ConcurrencySafe describe side effects; a read-only tool
	// may run in parallel with others.
	ReadOnly        bool `json:"readOnly,omitempty"`
	ConcurrencySafe bool `json:"concurrencySafe,omitempty"`
	// Aliases are other names the tool answers to (seed 004).
	Aliases []string `json:"aliases,omitempty"`
	// Annotations are MCP tool annotations, kept as sent, every key.
	Annotations     json.RawMessage `json:"annotations,omitempty"`
	OutputMarkdown  bool            `json:"outputMarkdown,omitempty"`
	CanUpdateOutput bool            `json:"canUpdateOutput,omitempty"`
	// MCPFeature is, for a prompt or a resource (KindPrompt,
	// KindResource), the MCP server's declaration of it as sent: a prompt,
	// a resource or a resource template object.
	MCPFeature json.RawMessage `json:"mcpFeature,omitempty"`
	MCPDeclaration
}

// MCPDeclaration is what an MCP server declares of a tool beyond what
// every tool has, kept as the server sent it so that the facade lists
// the tool as the server did. The JSON values keep their keys, their
// order and their numbers; only insignificant whitespace and string
// escapes may differ from the server's bytes. Together the three JSON
// values take at most MaxMCPDeclaration bytes (TrimMCPDeclaration).
type MCPDeclaration struct {
	// Title is the tool's title, for people.
	Title string `json:"title,omitempty"`
	// OutputSchema is the JSON Schema (an object) of the tool's
	// structuredContent.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Icons is the tool's icons, a JSON array.
	Icons json.RawMessage `json:"icons,omitempty"`
	// Meta is the tool's _meta, a JSON object.
	Meta json.RawMessage `json:"meta,omitempty"`
}

// MaxMCPDeclaration bounds the bytes of a tool's outputSchema, icons and
// _meta together. A catalogue shard (and a registration) is one message:
// one tool of megabytes would make its shard impossible to write, and
// with it every later change of the catalogue.
const MaxMCPDeclaration = 64 << 10

// TrimMCPDeclaration leaves out of d, largest first, the outputSchema,
// icons and _meta that take it past MaxMCPDeclaration, and says what it
// left out, one sentence each.
func (d *MCPDeclaration) TrimMCPDeclaration() []string {
	fields := []struct {
		name string
		raw  *json.RawMessage
	}{{"outputSchema", &d.OutputSchema}, {"icons", &d.Icons}, {"_meta", &d.Meta}}
	total := 0
	for _, f := range fields {
		total += len(*f.raw)
	}
	var dropped []string
	for total > MaxMCPDeclaration {
		big := 0
		for i, f := range fields {
			if len(*f.raw) > len(*fields[big].raw) {
				big = i
			}
		}
		f := fields[big]
		dropped = append(dropped, fmt.Sprintf("its %s (%d bytes) is left out: a tool's outputSchema, icons and _meta may take %d bytes together",
			f.name, len(*f.raw), MaxMCPDeclaration))
		total -= len(*f.raw)
		*f.raw = nil
	}
	return dropped
}

// validate checks d's JSON values are of the kinds MCP has them.
func (d *MCPDeclaration) validate() error {
	switch {
	case len(d.OutputSchema) > 0 && !isJSONObject(d.OutputSchema):
		return errors.New("outputSchema is not a JSON object")
	case len(d.Icons) > 0 && !isJSONArray(d.Icons):
		return errors.New("icons is not a JSON array")
	case len(d.Meta) > 0 && !isJSONObject(d.Meta):
		return errors.New("meta is not a JSON object")
	}
	return nil
}

// Tool is one catalogue entry: a line of its shard in the CatalogBucket
// and the element of every --json listing. Any process reads
// the catalogue from the bucket without asking the registry.
type Tool struct {
	V int `json:"v"`
	// Name is the unique catalogue name a model calls the tool by.
	Name        string `json:"name"`
	DisplayName string `json:"displayName"`
	Description string `json:"description"`
	Kind        Kind   `json:"kind"`
	Category    string `json:"category"`
	Source      Source `json:"source"`
	// Server and ServerToolName are set for MCP tools: the server's name
	// and the tool's name on that server.
	Server         string `json:"server,omitempty"`
	ServerToolName string `json:"serverToolName,omitempty"`
	// Trust is the MCP server's trust setting.
	Trust           bool `json:"trust,omitempty"`
	ReadOnly        bool `json:"readOnly"`
	ConcurrencySafe bool `json:"concurrencySafe"`
	OutputMarkdown  bool `json:"outputMarkdown,omitempty"`
	CanUpdateOutput bool `json:"canUpdateOutput,omitempty"`
	// Active is false for a tool that is registered but excluded or
	// disabled; InactiveReason says why.
	Active         bool   `json:"active"`
	InactiveReason string `json:"inactiveReason,omitempty"`
	// Aliases are the other names that resolve to this tool.
	Aliases []string `json:"aliases,omitempty"`
	// ExportName is the name used in the openai and anthropic formats, which
	// allow no dots and at most 64 characters; unique in the catalogue, so
	// it maps back to Name.
	ExportName string `json:"exportName"`
	// Parameters is the original JSON Schema, used to validate arguments.
	Parameters json.RawMessage `json:"parameters"`
	// GeminiParameters is Parameters sanitised for the Gemini API, present
	// only where sanitising changed something.
	GeminiParameters json.RawMessage `json:"geminiParameters,omitempty"`
	// Annotations are the tool's MCP annotations, every key as sent.
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// MCPDeclaration is the rest of an MCP tool's declaration, as sent.
	MCPDeclaration
	// Hosts are the ids of the providers (executors, MCP managers) that
	// serve the tool.
	Hosts []string `json:"hosts,omitempty"`
	// Workspaces names, for each host that registered the tool with one,
	// the workspace it runs the tool in (RegisterRequest.Workspace): a
	// call for a workspace-bound tool goes to a host of its workspace.
	Workspaces map[string]string `json:"workspaces,omitempty"`
	// Seq is the registration order; an overwrite keeps the old Seq, as a
	// JavaScript Map keeps a key's position.
	Seq       uint64    `json:"seq"`
	UpdatedAt time.Time `json:"updatedAt"`
	// MCPFeature is ToolSpec.MCPFeature: what the MCP server
	// declared of a prompt or a resource.
	MCPFeature json.RawMessage `json:"mcpFeature,omitempty"`
}

// IsTool says t is a tool: not a prompt or a resource of an MCP server,
// which only MCP clients are shown, as prompts and resources.
func (t *Tool) IsTool() bool { return t.Kind != KindPrompt && t.Kind != KindResource }

// WorkspaceBound says calls of t act on a workspace: the built-in file
// and shell tools and the tools a discovery command found, which run
// in the workspace of the executor that hosts them. Such a call must
// reach an executor of the workspace it names (Invocation.Workspace).
func (t *Tool) WorkspaceBound() bool {
	return t.Source == SourceBuiltin || t.Source == SourceDiscovered
}

// Validate checks the entry against the contract.
func (t *Tool) Validate() error {
	switch {
	case t.V != Version:
		return fmt.Errorf("%w: tool %q: got v=%d, this build speaks v=%d", ErrVersion, t.Name, t.V, Version)
	case t.Name == "":
		return invalid("tool", "name is empty")
	case !t.Source.Valid():
		return invalid("tool", "%q: unknown source %q", t.Name, t.Source)
	case !t.Kind.Valid():
		return invalid("tool", "%q: unknown kind %q", t.Name, t.Kind)
	case t.Source == SourceMCP && t.Server == "":
		return invalid("tool", "%q: MCP tool without a server", t.Name)
	case t.ExportName == "":
		return invalid("tool", "%q: exportName is empty", t.Name)
	case !isJSONObject(t.Parameters):
		return invalid("tool", "%q: parameters is not a JSON object", t.Name)
	}
	if err := t.MCPDeclaration.validate(); err != nil {
		return invalid("tool", "%q: %v", t.Name, err)
	}
	return nil
}

// DecodeTool parses a catalogue entry. It never panics on any input.
//
// Every reader of the catalogue decodes every entry, so this one decoder
// uses the faster JSON v2 implementation (about 2.7 times encoding/json's
// speed on catalogue entries here). It is also stricter: field names match
// exactly, a duplicate field or invalid UTF-8 is an error.
func DecodeTool(data []byte) (*Tool, error) {
	t := new(Tool)
	if err := jsonv2.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("%w: tool: %v", ErrMalformed, err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// EncodeTool is the JSON form of a catalogue entry, as the bucket holds it.
// Invalid UTF-8 becomes U+FFFD, as encoding/json would make it.
func EncodeTool(t *Tool) ([]byte, error) {
	return jsonv2.Marshal(t, jsontext.AllowInvalidUTF8(true))
}

// isJSONArray is isJSONObject for an array.
func isJSONArray(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '['
}

// isJSONObject reports whether raw, already known to be valid JSON (it came
// out of a decoder or json.Marshal), is an object. Not rescanning the whole
// schema keeps catalogue reads cheap.
func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}
