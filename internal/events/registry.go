package events

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
)

// Batch ties together the chunks of one registration that was too large for
// a single message. Chunks are numbered from 0; the last has Last set.
type Batch struct {
	ID   string `json:"id"`
	Seq  int    `json:"seq"`
	Last bool   `json:"last"`
}

// RegisterRequest is sent on SubjectRegister by a provider: a process that
// hosts tools (the built-in set of an executor, command discovery, an MCP
// client for one server).
type RegisterRequest struct {
	Header
	// Provider is the id of the process that serves these tools; it becomes
	// one of the tools' Hosts.
	Provider string `json:"provider"`
	Source   Source `json:"source"`
	// Server names the MCP server; required when Source is "mcp".
	Server string `json:"server,omitempty"`
	// Trust is the MCP server's trust setting.
	Trust bool `json:"trust,omitempty"`
	// Workspace names the workspace the provider runs these tools in
	// (an executor's --workspace-name); empty for none.
	Workspace string `json:"workspace,omitempty"`
	// Replace makes the request the provider's whole set for (Source,
	// Server): once the last chunk is in, the provider's tools of that
	// scope that the request did not name are removed. This is how a
	// rediscovery replaces what an earlier discovery found.
	Replace bool `json:"replace,omitempty"`
	// Batch is set when the request was split into chunks.
	Batch *Batch     `json:"batch,omitempty"`
	Tools []ToolSpec `json:"tools"`
}

// EnvelopeType implements Envelope.
func (*RegisterRequest) EnvelopeType() string { return "tool.register.request" }

// Validate implements Envelope. Problems with single tools are not errors of
// the request: the registry rejects those tools one by one and says why.
func (r *RegisterRequest) Validate() error {
	typ := r.EnvelopeType()
	if err := r.header().validate(); err != nil {
		return err
	}
	switch {
	case r.Provider == "":
		return invalid(typ, "provider is empty")
	case !r.Source.Valid():
		return invalid(typ, "unknown source %q (want builtin, discovered, mcp or composite)", r.Source)
	case r.Source == SourceMCP && r.Server == "":
		return invalid(typ, "source mcp needs a server name")
	case r.Source != SourceMCP && r.Server != "":
		return invalid(typ, "server %q given for source %s", r.Server, r.Source)
	case r.Batch != nil && (r.Batch.ID == "" || r.Batch.Seq < 0):
		return invalid(typ, "batch needs an id and a sequence number >= 0")
	}
	return nil
}

// ToolOutcome is what the registry did with one ToolSpec of a request.
type ToolOutcome struct {
	// Requested is the name the provider gave.
	Requested string `json:"requested"`
	// Name is the catalogue name the tool got; empty if rejected.
	Name string `json:"name,omitempty"`
	// Warning explains a rename or an overwrite.
	Warning string `json:"warning,omitempty"`
	// Error says why the tool was rejected.
	Error string `json:"error,omitempty"`
}

// RegisterReply answers a RegisterRequest.
type RegisterReply struct {
	Header
	RequestID string        `json:"requestId"`
	Tools     []ToolOutcome `json:"tools,omitempty"`
	// Removed lists tools a Replace request dropped.
	Removed []string `json:"removed,omitempty"`
	// Error is set when the whole request was refused.
	Error string `json:"error,omitempty"`
}

// EnvelopeType implements Envelope.
func (*RegisterReply) EnvelopeType() string { return "tool.register.reply" }

// Validate implements Envelope.
func (r *RegisterReply) Validate() error {
	if err := r.header().validate(); err != nil {
		return err
	}
	if r.RequestID == "" {
		return invalid(r.EnvelopeType(), "requestId is empty")
	}
	return nil
}

// RemoveRequest removes tools from the catalogue: the named ones, or all of
// a source (removeDiscoveredTools removes discovered and MCP tools), or all
// of one MCP server (removeMcpToolsByServer), or all a provider hosts.
type RemoveRequest struct {
	Header
	Names    []string `json:"names,omitempty"`
	Sources  []Source `json:"sources,omitempty"`
	Server   string   `json:"server,omitempty"`
	Provider string   `json:"provider,omitempty"`
}

// EnvelopeType implements Envelope.
func (*RemoveRequest) EnvelopeType() string { return "tool.registry.remove" }

// Validate implements Envelope.
func (r *RemoveRequest) Validate() error {
	typ := r.EnvelopeType()
	if err := r.header().validate(); err != nil {
		return err
	}
	if len(r.Names) == 0 && len(r.Sources) == 0 && r.Server == "" && r.Provider == "" {
		return invalid(typ, "nothing selected: give names, sources, a server or a provider")
	}
	for _, s := range r.Sources {
		if !s.Valid() {
			return invalid(typ, "unknown source %q", s)
		}
	}
	return nil
}

// ToggleRequest enables or disables tools at run time: single tools (by name
// or alias), whole kinds or whole categories. Enabling a tool that the
// configuration excludes makes it active (seed 002). Toggling a kind or a
// category clears the per-tool toggles inside it, so it acts on the whole
// group. Reset drops every runtime toggle, leaving the configuration alone.
type ToggleRequest struct {
	Header
	Enable     bool     `json:"enable"`
	Names      []string `json:"names,omitempty"`
	Kinds      []Kind   `json:"kinds,omitempty"`
	Categories []string `json:"categories,omitempty"`
	Reset      bool     `json:"reset,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ToggleRequest) EnvelopeType() string { return "tool.registry.toggle" }

// Validate implements Envelope.
func (r *ToggleRequest) Validate() error {
	typ := r.EnvelopeType()
	if err := r.header().validate(); err != nil {
		return err
	}
	if !r.Reset && len(r.Names) == 0 && len(r.Kinds) == 0 && len(r.Categories) == 0 {
		return invalid(typ, "nothing selected: give names, kinds or categories")
	}
	for _, k := range r.Kinds {
		if !k.Valid() {
			return invalid(typ, "unknown kind %q", k)
		}
	}
	return nil
}

// ChangeOp names one kind of catalogue change.
type ChangeOp string

// Catalogue change operations.
const (
	OpAdded       ChangeOp = "added"
	OpUpdated     ChangeOp = "updated"
	OpOverwritten ChangeOp = "overwritten"
	OpRemoved     ChangeOp = "removed"
	OpActivated   ChangeOp = "activated"
	OpDeactivated ChangeOp = "deactivated"
)

// Change is one change to one catalogue entry.
type Change struct {
	Op      ChangeOp `json:"op"`
	Name    string   `json:"name"`
	Warning string   `json:"warning,omitempty"`
}

// ChangeReply answers a RemoveRequest or a ToggleRequest.
type ChangeReply struct {
	Header
	RequestID string   `json:"requestId"`
	Changes   []Change `json:"changes,omitempty"`
	// Unknown lists names the request gave that match no tool.
	Unknown []string `json:"unknown,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ChangeReply) EnvelopeType() string { return "tool.registry.reply" }

// Validate implements Envelope.
func (r *ChangeReply) Validate() error {
	if err := r.header().validate(); err != nil {
		return err
	}
	if r.RequestID == "" {
		return invalid(r.EnvelopeType(), "requestId is empty")
	}
	return nil
}

// CatalogChanged is published on SubjectCatalogChanged after every request
// that changed the catalogue, naming the request that caused it.
type CatalogChanged struct {
	Header
	// Cause is the id of the request that made the change.
	Cause   string   `json:"cause"`
	Changes []Change `json:"changes"`
}

// EnvelopeType implements Envelope.
func (*CatalogChanged) EnvelopeType() string { return "tool.catalog.changed" }

// Validate implements Envelope.
func (c *CatalogChanged) Validate() error {
	if err := c.header().validate(); err != nil {
		return err
	}
	if len(c.Changes) == 0 {
		return invalid(c.EnvelopeType(), "no changes")
	}
	return nil
}

// EncodeRegister encodes req as envelopes of at most limit bytes each: one
// when it fits, else chunks of its tools that share a Batch, each its own
// envelope with its own id. Each tool is encoded once, and each chunk's
// envelope around the tools already encoded, so that a set of 10,000 tools
// costs one encoding of its bytes however it is cut.
func EncodeRegister(req *RegisterRequest, limit int, batchID string) ([][]byte, error) {
	Stamp(req)
	if err := req.Validate(); err != nil {
		return nil, err
	}
	specs, err := encodeSpecs(req.Tools)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, s := range specs {
		total += len(s) + 1
	}
	// Room for the envelope around the tools (its header, the batch).
	const envelope = 4096
	if total+envelope <= limit {
		data, err := wrapTools(req, nil, specs)
		if err != nil {
			return nil, err
		}
		return [][]byte{data}, nil
	}
	var chunks [][]byte
	for start := 0; start < len(specs); {
		end, size := start, 0
		for end < len(specs) && (end == start || size+len(specs[end])+1+envelope <= limit) {
			if len(specs[end])+envelope > limit {
				return nil, fmt.Errorf("tool %q: its declaration (%d bytes) is larger than the bus allows in one message (%d)", req.Tools[end].Name, len(specs[end]), limit-envelope)
			}
			size += len(specs[end]) + 1
			end++
		}
		batch := &Batch{ID: batchID, Seq: len(chunks), Last: end == len(specs)}
		data, err := wrapTools(req, batch, specs[start:end])
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, data)
		start = end
	}
	return chunks, nil
}

// wrapTools is the envelope of req, with batch and with specs (each an
// encoded ToolSpec) as its tools.
func wrapTools(req *RegisterRequest, batch *Batch, specs [][]byte) ([]byte, error) {
	head := *req
	head.Tools = []ToolSpec{}
	if batch != nil {
		head.Header.ID, head.Batch = "", batch
		Stamp(&head)
	}
	data, err := jsonv2.Marshal(&head, encodeOptions)
	if err != nil {
		return nil, err
	}
	// Tools is the envelope's last field: its empty array ends the JSON.
	const empty = `"tools":[]}`
	if !bytes.HasSuffix(data, []byte(empty)) {
		return nil, fmt.Errorf("register request: its encoding does not end with %s", empty)
	}
	size := len(data)
	for _, s := range specs {
		size += len(s) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, data[:len(data)-2]...)
	for i, s := range specs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, s...)
	}
	return append(out, "]}"...), nil
}

// encodeSpecs encodes each tool, on every core when there are many.
func encodeSpecs(tools []ToolSpec) ([][]byte, error) {
	specs := make([][]byte, len(tools))
	errs := make([]error, len(tools))
	workers := min(runtime.GOMAXPROCS(0), len(tools)/256+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(tools); i += workers {
				specs[i], errs[i] = jsonv2.Marshal(&tools[i], encodeOptions)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", tools[i].Name, err)
		}
	}
	return specs, nil
}

// LostCause is the CatalogChanged cause of the registry taking executor
// off its tools' hosts after it stopped answering: the executor, if it is
// there after all (its connection came back), registers its tools again.
func LostCause(executor string) string { return "lost:" + executor }
