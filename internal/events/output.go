package events

import (
	"encoding/base64"
	"strings"
)

// Reading a stored output. The whole output of a call whose result was
// capped is kept in the object store OutputBucket, with the principal of
// its call as its owner. Agents cannot read the store itself: an object
// store cannot be confined to the objects one member may read (listing
// it, or reading every chunk through a wildcard filter, is one consumer
// away). An executor reads it for them: a request on
// OutputSubject(principal) is answered with the output only when the
// principal owns it, and the bus vouches for the principal.
//
// The executor answers on the request's reply subject with a stream of
// messages, each with the OutputHeader saying what it is:
//   - OutputChunk: the next bytes of the output, OutputSeqHeader its
//     number from 1, OutputReadHeader the read's token and ExecutorHeader
//     the executor sending it. After every OutputWindow-th chunk the
//     executor sends no further chunk until the reader answers on
//     OutputAnswerSubject(principal, executor) with the read's token in
//     OutputReadHeader (OutputMore to go on, OutputStop to end the read),
//     so a slow reader is never flooded. The answer is a request of its
//     own, not a reply to the chunk: the chunks come to a reader in
//     another account (an agent's) on the way back the bus made for its
//     request, which carries no reply subject the other way;
//   - OutputEnd: the output is whole; the data is an OutputDone;
//   - OutputFailed: the read failed; the data is the reason. An output
//     that is not there and one that is another's fail alike, so a
//     reader learns nothing of others' outputs.

// SubjectOutputPrefix + a principal is where that principal asks for a
// stored output. Outside tool.>: a read changes nothing and is not
// recorded.
const SubjectOutputPrefix = "toolbus.output."

// OutputSubject is where principal asks for a stored output.
func OutputSubject(principal string) string {
	return SubjectOutputPrefix + principalToken(principal)
}

// OutputAnswerSubject is where principal answers the windows of a read
// that executor serves.
func OutputAnswerSubject(principal, executor string) string {
	return SubjectOutputPrefix + principalToken(principal) + ".answer." + base64.RawURLEncoding.EncodeToString([]byte(executor))
}

// OutputOwnerKey is the object metadata key naming the principal an
// output belongs to.
const OutputOwnerKey = "toolbus-owner"

// The headers of an output read's messages.
const (
	OutputHeader     = "Toolbus-Output"
	OutputSeqHeader  = "Toolbus-Output-Seq"
	OutputReadHeader = "Toolbus-Output-Read"
)

// The kinds of message of an output read (OutputHeader), and the answers
// to a window's last chunk.
const (
	OutputChunk  = "chunk"
	OutputEnd    = "end"
	OutputFailed = "failed"

	OutputMore = "more"
	OutputStop = "stop"
)

// OutputNotYours is what a reader hears of an output that is not there
// and of one that is another principal's alike: the two must not be
// told apart.
const OutputNotYours = "no stored output of that name is yours"

// OutputWindow is how many chunks an executor sends before it waits for
// the reader.
const OutputWindow = 16

// OutputRequest asks for the stored output Name (an invocation id, an
// OutputRef or a Part's Ref without the bucket).
type OutputRequest struct {
	Header
	Name string `json:"name"`
}

// OutputDone ends a read that succeeded: how many bytes the output has,
// for the reader to check it got them all.
type OutputDone struct {
	Size uint64 `json:"size"`
}

// maxOutputName bounds an output's name: an invocation id and a part's
// suffix fit many times over.
const maxOutputName = 1024

// EnvelopeType implements Envelope.
func (*OutputRequest) EnvelopeType() string { return "tool.output.request" }

// Validate implements Envelope.
func (r *OutputRequest) Validate() error {
	if err := r.validate(); err != nil {
		return err
	}
	switch {
	case r.Name == "":
		return invalid(r.Type, "name is empty")
	case len(r.Name) > maxOutputName:
		return invalid(r.Type, "name is %d bytes, more than %d", len(r.Name), maxOutputName)
	}
	return nil
}

// OutputObjectName is the object name of a stored output in
// OutputBucket, from its name or its reference (OutputBucket/<name>).
func OutputObjectName(ref string) string { return strings.TrimPrefix(ref, OutputBucket+"/") }
