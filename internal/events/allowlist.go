package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// AllowEntry is one remembered approval ("always allow"). Scope is
// "tool", "server", "command" (a shell command: Argv, the command line
// exactly when Exact, else its start) or "path". The policy's remember
// rule says which entries an "always" answer stores.
type AllowEntry struct {
	Scope  string   `json:"scope"`
	Tool   string   `json:"tool,omitempty"`
	Server string   `json:"server,omitempty"`
	Argv   []string `json:"argv,omitempty"`
	Exact  bool     `json:"exact,omitempty"`
	Path   string   `json:"path,omitempty"`
	// Prefix is the form of command entries before argv: a command root
	// such as "git", which covered every git command line. Records that
	// still have it are read as the argv of their words, not exact, which
	// the default policy lets cover only the commands it deems harmless
	// with any arguments.
	Prefix string `json:"prefix,omitempty"`
}

// AllowRecord is one remembered approval as the allowlist bucket
// (AllowlistBucket) holds it.
type AllowRecord struct {
	AllowEntry
	// By is the approver who answered "always"; For the invocation.
	By      string    `json:"by"`
	For     string    `json:"for"`
	AddedAt time.Time `json:"addedAt"`
}

// Key is the record's key in the bucket: a hash of what it allows, so the
// same approval given twice is one record.
func (r AllowRecord) Key() string {
	h := sha256.New()
	for _, s := range append([]string{r.Scope, r.Tool, r.Server, strconv.FormatBool(r.Exact), r.Path, r.Prefix}, r.Argv...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// SubjectAllowlistRevoke + "." + principal carries RevokeRequest
// (request; see RevokeSubject): an executor deletes the entries and
// records the request, so the trail says who revoked what.
const SubjectAllowlistRevoke = "tool.allowlist.revoke"

// RevokeSubject is where principal asks for remembered approvals to be
// revoked. Only those who may revoke reach it: an approver imports its
// own, in an account of its own; in the services account only admins
// may send to it.
func RevokeSubject(principal string) string {
	return Request(SubjectAllowlistRevoke + "." + principalToken(principal))
}

// RevokeRequest asks for allowlist entries (AllowRecord.Key) to be
// deleted.
type RevokeRequest struct {
	Header
	Keys []string `json:"keys"`
}

// EnvelopeType implements Envelope.
func (*RevokeRequest) EnvelopeType() string { return "tool.allowlist.revoke" }

// MaxRevokeKeys bounds the keys of one RevokeRequest.
const MaxRevokeKeys = 1024

// Validate implements Envelope.
func (r *RevokeRequest) Validate() error {
	if err := r.validate(); err != nil {
		return err
	}
	if len(r.Keys) == 0 {
		return invalid(r.EnvelopeType(), "keys is empty")
	}
	if len(r.Keys) > MaxRevokeKeys {
		return invalid(r.EnvelopeType(), "%d keys; at most %d in one request", len(r.Keys), MaxRevokeKeys)
	}
	return nil
}

// RevokeReply answers a RevokeRequest: the keys revoked, and those the
// allowlist did not hold. Error says why nothing more was done.
type RevokeReply struct {
	Header
	RequestID string   `json:"requestId"`
	Revoked   []string `json:"revoked,omitempty"`
	Unknown   []string `json:"unknown,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// EnvelopeType implements Envelope.
func (*RevokeReply) EnvelopeType() string { return "tool.allowlist.revoke.reply" }

// Validate implements Envelope.
func (r *RevokeReply) Validate() error { return r.validate() }
