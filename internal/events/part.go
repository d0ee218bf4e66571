package events

import (
	"encoding/json"
	"fmt"
)

// PartType is what a Part holds.
type PartType string

// The part types, those of MCP's content blocks. A result's text is in
// Result.LLMContent; text parts are there only in a result whose Parts
// are its whole content (Result.PartsWhole).
const (
	// PartText is a block of Text.
	PartText PartType = "text"
	// PartImage and PartAudio hold base64 Data of MIMEType.
	PartImage PartType = "image"
	PartAudio PartType = "audio"
	// PartResource is an embedded resource: its URI, and either Text or
	// base64 Data (a blob), of MIMEType.
	PartResource PartType = "resource"
	// PartLink is a link to a resource (MCP resource_link): its URI and
	// Name, and optionally Title, Description, MIMEType and ResourceSize.
	PartLink PartType = "resource_link"
)

// Part is one typed piece of a result's content: an MCP content block.
// Every field beyond Type is optional on the wire (omitempty), so a part
// of a server that sends none of MCP's optional fields is no larger than
// it ever was.
type Part struct {
	Type     PartType `json:"type"`
	MIMEType string   `json:"mimeType,omitempty"`
	// Data is base64, as MCP carries it; empty when Ref is set.
	Data string `json:"data,omitempty"`
	// Text is a text part's text, or a text resource's content.
	Text string `json:"text,omitempty"`
	// URI names a resource.
	URI string `json:"uri,omitempty"`
	// Name, Title and Description describe a link's resource, and
	// ResourceSize is its size in bytes, when the server said.
	Name         string `json:"name,omitempty"`
	Title        string `json:"title,omitempty"`
	Description  string `json:"description,omitempty"`
	ResourceSize *int64 `json:"resourceSize,omitempty"`
	// Annotations are the block's MCP annotations (audience, priority,
	// lastModified) and Meta its _meta, each a JSON object as the server
	// sent it.
	Annotations json.RawMessage `json:"annotations,omitempty"`
	Meta        json.RawMessage `json:"meta,omitempty"`
	// ResourceMeta is an embedded resource's own _meta (that of its
	// contents, not of the block).
	ResourceMeta json.RawMessage `json:"resourceMeta,omitempty"`
	// Ref names the object-store entry that holds Data, for a part too
	// large for one message: "<bucket>/<name>". RefText says the entry
	// holds the part's Text instead.
	Ref     string `json:"ref,omitempty"`
	RefText bool   `json:"refText,omitempty"`
	// Size is how many bytes of Data (base64) the part has, also when it
	// travels by Ref (of Text, then).
	Size int `json:"size,omitempty"`
}

// Validate checks a part against the contract.
func (p *Part) Validate() error {
	switch p.Type {
	case PartImage, PartAudio:
		if p.MIMEType == "" {
			return fmt.Errorf("%s part without a mimeType", p.Type)
		}
	case PartResource, PartLink:
		if p.URI == "" {
			return fmt.Errorf("%s part without a uri", p.Type)
		}
	case PartText:
	default:
		return fmt.Errorf("unknown part type %q", p.Type)
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"annotations", p.Annotations}, {"meta", p.Meta}, {"resourceMeta", p.ResourceMeta}} {
		if len(f.raw) > 0 && !isJSONObject(f.raw) {
			return fmt.Errorf("%s part whose %s is not a JSON object", p.Type, f.name)
		}
	}
	return nil
}
