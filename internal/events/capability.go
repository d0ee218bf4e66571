package events

import (
	"crypto/rand"
	"encoding/base64"
)

// A capability is an id that grants something to whoever names it: a
// background shell's output, a stored output, an answer subject, a read
// in progress. Each is minted by NewCapability, never by nuid: nuid's ids
// form a progression (a fixed prefix and a sequence with a fixed
// increment), so a caller that saw a few of them (every envelope id is
// one) predicts the next. Whoever keeps a capability also keeps who it
// was minted for, and answers a wrong owner as it answers an unknown id.
// nuid names correlations only: ids that grant nothing when guessed.

// capabilityBytes is a capability's randomness: 128 bits, so that a
// guess finds a live one with odds of about live/2^128.
const capabilityBytes = 16

// CapabilityLen is the length of every id NewCapability makes: 16 bytes
// in unpadded base64.
const CapabilityLen = (capabilityBytes*8 + 5) / 6

// NewCapability returns a fresh capability: 128 bits from crypto/rand,
// base64url without padding (22 characters of [A-Za-z0-9_-]), so that it
// is one subject token and one file name. It is safe for concurrent use.
func NewCapability() string {
	var b [capabilityBytes]byte
	// crypto/rand.Read never returns an error and always fills b (Go
	// 1.24 and later): it crashes the program rather than hand out a
	// predictable id.
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// IsCapability says whether s has the shape of an id NewCapability
// makes. It says nothing of whether one was minted: a holder looks that
// up, with its owner.
func IsCapability(s string) bool {
	if len(s) != CapabilityLen {
		return false
	}
	// The decoder skips newlines: 22 characters may hold fewer bytes.
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == capabilityBytes
}
