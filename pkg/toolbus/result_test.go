package toolbus

import (
	"testing"

	"github.com/toolbus/toolbus/internal/events"
)

// A result kept block by block gives the client its pieces that are not
// text, as any other result: its text and links are in LLMContent.
func TestResultPartsAreTheNonTextPieces(t *testing.T) {
	r := resultFrom(&events.Result{InvocationID: "i", LLMContent: "see\nResource Link: a at https://x.test/a", PartsWhole: true, PartsText: 40,
		Parts: []events.Part{{Type: events.PartText, Text: "see"}, {Type: events.PartImage, MIMEType: "image/png", Data: "AAAA", Size: 4},
			{Type: events.PartLink, URI: "https://x.test/a", Name: "a"}}})
	if len(r.Parts) != 1 || r.Parts[0].Type != PartImage || r.Parts[0].Data != "AAAA" {
		t.Errorf("parts %+v, want the image alone", r.Parts)
	}
}
