package events

import "strconv"

// AuditCheckpoint is published on SubjectAuditCheckpoint by the bus's
// owner (toolbus up, cmd/bus) every so often: a digest over the audit
// stream's messages From..To (sequences, both included), chained to the
// checkpoint before it and signed with the owner's ed25519 key. The
// stream keeps it like any event; `toolbus audit verify` recomputes each
// digest from the messages and checks each signature with the public key
// it trusts, so a message removed or changed after its checkpoint shows.
//
// The stream's limits (age, bytes) evict its oldest messages, checkpoints
// too, so the bus also keeps the chain's first and latest checkpoints in
// AuditChainBucket, outside the stream: Index numbers the chain so that
// verify can tell how much of it is gone.
type AuditCheckpoint struct {
	Header
	// Index numbers the chain: 1 for the first checkpoint a bus makes
	// (or the first after an upgrade from a bus that did not number
	// them), one more for each after. 0 is a checkpoint from before
	// checkpoints were numbered: its place is unknown.
	Index uint64 `json:"index,omitempty"`
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
	Count uint64 `json:"count"`
	// Digest is the hex SHA-256 of the range (internal/audit says how).
	Digest string `json:"digest"`
	// Previous is the Digest of the checkpoint before, empty for the first.
	Previous string `json:"previous,omitempty"`
	// Key is the signing key's id: the hex SHA-256 of its public key, cut
	// to 16 characters.
	Key string `json:"key"`
	// Signature is the base64 ed25519 signature of SignedText().
	Signature string `json:"signature"`
}

// EnvelopeType implements Envelope.
func (*AuditCheckpoint) EnvelopeType() string { return "tool.audit.checkpoint" }

// Validate implements Envelope.
func (c *AuditCheckpoint) Validate() error {
	typ := c.EnvelopeType()
	if err := c.header().validate(); err != nil {
		return err
	}
	switch {
	case c.From == 0 || c.To < c.From:
		return invalid(typ, "range %d..%d is empty", c.From, c.To)
	case c.Count == 0 || c.Count > c.To-c.From+1:
		return invalid(typ, "count %d does not fit the range %d..%d", c.Count, c.From, c.To)
	case len(c.Digest) != 64:
		return invalid(typ, "digest is not a hex SHA-256")
	case c.Key == "" || c.Signature == "":
		return invalid(typ, "unsigned")
	case c.Index > 1 && c.Previous == "":
		// Only the chain's first checkpoint may start it.
		return invalid(typ, "checkpoint %d of the chain follows none", c.Index)
	}
	return nil
}

// SignedText is what Signature signs: every field but the signature, in a
// fixed form. A numbered checkpoint signs a v2 text, which has the index;
// one without an index keeps the v1 text it was signed with. Removing a
// checkpoint's index changes the text's version, so its signature no
// longer matches.
func (c *AuditCheckpoint) SignedText() []byte {
	version, index := "v1", ""
	if c.Index > 0 {
		version, index = "v2", strconv.FormatUint(c.Index, 10)+"\n"
	}
	return []byte("toolbus audit checkpoint " + version + "\n" + c.Sender.ID + "\n" + c.Time.UTC().Format("2006-01-02T15:04:05.000000000Z") + "\n" +
		strconv.FormatUint(c.From, 10) + "\n" + strconv.FormatUint(c.To, 10) + "\n" + strconv.FormatUint(c.Count, 10) + "\n" + c.Digest + "\n" + c.Previous + "\n" + c.Key + "\n" + index)
}
