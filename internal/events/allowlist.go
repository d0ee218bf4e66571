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
