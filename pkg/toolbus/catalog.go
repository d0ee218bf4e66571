package toolbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
)

// Format is a model API's shape of a tool declaration.
type Format int

// The declaration formats.
const (
	// Gemini is a FunctionDeclaration: name, description, parameters.
	Gemini Format = iota
	// OpenAI is a chat-completions tool: {"type":"function","function":{...}},
	// named by the tool's export name.
	OpenAI
	// Anthropic is a Messages API tool: name (the export name),
	// description, input_schema.
	Anthropic
	// MCP is an MCP tools/list entry: name, title, description,
	// inputSchema, annotations.
	MCP
)

func (f Format) String() string {
	if cf, ok := f.internal(); ok {
		return cf.String()
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

func (f Format) internal() (catalog.Format, bool) {
	switch f {
	case Gemini:
		return catalog.Gemini, true
	case OpenAI:
		return catalog.OpenAI, true
	case Anthropic:
		return catalog.Anthropic, true
	case MCP:
		return catalog.MCP, true
	}
	return 0, false
}

// Tool is an active tool of the catalogue.
type Tool struct {
	// Name is the catalogue name, which Invoke takes.
	Name string
	// ExportName is the name in the OpenAI and Anthropic formats, which
	// allow fewer characters; Invoke takes it too.
	ExportName  string
	DisplayName string
	Aliases     []string
	Description string
	// Kind is what the tool does: read, edit, delete, move, search,
	// execute, think, fetch, other or composite.
	Kind string
	// Source is builtin, discovered, mcp or composite; Server names the
	// MCP server.
	Source string
	Server string
	// Parameters is the JSON Schema of the arguments.
	Parameters json.RawMessage
}

// catalog returns the client's catalogue replica, starting it on first
// use. It never creates the catalogue: a bus with none is ErrNoCatalog.
func (c *Client) catalog(ctx context.Context) (*catalog.Catalog, error) {
	c.catMu.Lock()
	defer c.catMu.Unlock()
	if c.closed {
		return nil, errors.New("toolbus: client is closed")
	}
	if c.replica == nil {
		if _, err := c.js.KeyValue(ctx, events.CatalogBucket); err != nil {
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				return nil, ErrNoCatalog
			}
			return nil, fmt.Errorf("toolbus: catalogue: %w", err)
		}
		r, err := catalog.Follow(ctx, c.js, c.log)
		if err != nil {
			return nil, fmt.Errorf("toolbus: catalogue: %w", err)
		}
		c.replica = r
	}
	return c.replica.Catalog(), nil
}

// Tools lists the active tools, built-in first, then discovered, then
// MCP tools by server. The list follows the catalogue as it changes.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	cat, err := c.catalog(ctx)
	if err != nil {
		return nil, err
	}
	var out []Tool
	for _, t := range cat.All() {
		if !t.Active || !t.IsTool() {
			continue
		}
		out = append(out, Tool{Name: t.Name, ExportName: t.ExportName, DisplayName: t.DisplayName,
			Aliases: append([]string(nil), t.Aliases...), Description: t.Description, Kind: string(t.Kind),
			Source: string(t.Source), Server: t.Server, Parameters: append(json.RawMessage(nil), t.Parameters...)})
	}
	return out, nil
}

// Declarations returns one declaration per active tool in format f, in
// the order of Tools, ready to hand to the model API. The name a model
// returns from one of them is what Invoke takes.
func (c *Client) Declarations(ctx context.Context, f Format) ([]json.RawMessage, error) {
	cf, ok := f.internal()
	if !ok {
		return nil, fmt.Errorf("toolbus: unknown declaration format %d", int(f))
	}
	cat, err := c.catalog(ctx)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	// The catalogue's array is shared: the copy is the caller's.
	if err := json.Unmarshal(cat.Declarations(cf), &out); err != nil {
		return nil, fmt.Errorf("toolbus: declarations: %w", err)
	}
	return out, nil
}

// ToolNameFor maps a name as a model returned it (a catalogue name, an
// alias or an export name) to the catalogue name. It reports false for a
// name no tool has.
func (c *Client) ToolNameFor(ctx context.Context, name string) (string, bool, error) {
	cat, err := c.catalog(ctx)
	if err != nil {
		return "", false, err
	}
	n, ok := resolve(cat, name)
	return n, ok, nil
}

// resolve prefers a catalogue name or alias, as the executor does, and
// falls back to an export name.
func resolve(cat *catalog.Catalog, name string) (string, bool) {
	if t, ok := cat.Lookup(name); ok {
		return t.Name, true
	}
	return cat.Resolve(catalog.OpenAI, name)
}
