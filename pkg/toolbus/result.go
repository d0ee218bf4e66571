package toolbus

import "github.com/toolbus/toolbus/internal/events"

// Result is the terminal answer to one call.
//
// A failed call has a Result too: Error is set, and LLMContent holds the
// failure as the model should read it (a policy's reason, an unknown
// tool's closest names). Invoke then also returns Error as its error.
type Result struct {
	// InvocationID names the call, for Cancel, ReadOutput and the audit
	// trail.
	InvocationID string
	// Tool is the catalogue name the call was made under.
	Tool string
	// LLMContent is what goes back to the model.
	LLMContent string
	// Display is what a person is shown.
	Display string
	// Parts are the non-text pieces of the result (an MCP tool's images,
	// audio, embedded resources), in the order the tool gave them.
	Parts []Part
	// Error is set when the call failed.
	Error *ToolError
	// Truncated is set when LLMContent was cut to fit; OutputRef then
	// names the stored whole output, which ReadOutput returns.
	Truncated bool
	OutputRef string
	// Policy is the policy decision the call got, when it got that far.
	Policy *Decision
}

// Err is the call's failure as an error (a *ToolError), or nil.
func (r *Result) Err() error {
	if r == nil || r.Error == nil {
		return nil
	}
	return r.Error
}

// Decision is what the policy said about a call.
type Decision struct {
	// Verdict is ALLOW, DENY or ASK_USER.
	Verdict string
	Reason  string
	// Revision identifies the policy set that decided.
	Revision string
	// Cached is set when the decision was reused for an identical call.
	Cached bool
}

// PartType is what a Part holds.
type PartType string

// The part types.
const (
	// PartImage and PartAudio hold base64 Data of MIMEType.
	PartImage PartType = "image"
	PartAudio PartType = "audio"
	// PartResource is an embedded resource: URI and either Text or base64
	// Data.
	PartResource PartType = "resource"
)

// Part is one typed, non-text piece of a result.
type Part struct {
	Type     PartType
	MIMEType string
	// Data is base64; empty when Ref is set.
	Data string
	Text string
	URI  string
	// Ref names the stored data of a part too large for the result;
	// ReadOutput(ctx, Ref) returns it (base64, as Data would be).
	Ref string
	// Size is the length of the data (base64) in bytes.
	Size int
}

func resultFrom(r *events.Result) *Result {
	out := &Result{
		InvocationID: r.InvocationID,
		Tool:         r.Tool,
		LLMContent:   r.LLMContent,
		Display:      r.ReturnDisplay,
		Error:        toolError(r.Error),
		Truncated:    r.Truncated,
		OutputRef:    r.OutputRef,
	}
	for _, p := range r.Parts {
		if p.Type == events.PartText || p.Type == events.PartLink {
			// A result kept block by block (an MCP tool's) has its text
			// blocks and links as parts too; LLMContent holds them.
			continue
		}
		out.Parts = append(out.Parts, Part{Type: PartType(p.Type), MIMEType: p.MIMEType, Data: p.Data, Text: p.Text, URI: p.URI, Ref: p.Ref, Size: p.Size})
	}
	if p := r.Policy; p != nil {
		out.Policy = &Decision{Verdict: string(p.Verdict), Reason: p.Reason, Revision: p.Revision, Cached: p.Cached}
	}
	return out
}
