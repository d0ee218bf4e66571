package events

import "fmt"

// PartType is what a Part holds.
type PartType string

// The part types. Text is carried in Result.LLMContent, not as a part.
const (
	// PartImage and PartAudio hold base64 Data of MIMEType.
	PartImage PartType = "image"
	PartAudio PartType = "audio"
	// PartResource is an embedded resource: its URI, and either Text or
	// base64 Data (a blob), of MIMEType.
	PartResource PartType = "resource"
)

// Part is one typed piece of a result's content (an MCP content block
// that is not text).
type Part struct {
	Type     PartType `json:"type"`
	MIMEType string   `json:"mimeType,omitempty"`
	// Data is base64, as MCP carries it; empty when Ref is set.
	Data string `json:"data,omitempty"`
	// Text is a text resource's content.
	Text string `json:"text,omitempty"`
	// URI names a resource.
	URI string `json:"uri,omitempty"`
	// Ref names the object-store entry that holds Data, for a part too
	// large for one message: "<bucket>/<name>".
	Ref string `json:"ref,omitempty"`
	// Size is how many bytes of Data (base64) the part has, also when it
	// travels by Ref.
	Size int `json:"size,omitempty"`
}

// Validate checks a part against the contract.
func (p *Part) Validate() error {
	switch p.Type {
	case PartImage, PartAudio:
		if p.MIMEType == "" {
			return fmt.Errorf("%s part without a mimeType", p.Type)
		}
	case PartResource:
		if p.URI == "" {
			return fmt.Errorf("resource part without a uri")
		}
	default:
		return fmt.Errorf("unknown part type %q", p.Type)
	}
	return nil
}
