package events

import (
	"encoding/base64"
	"strings"
	"testing"
)

// Capabilities are 22 characters of base64url, one subject token, each
// one of its own: a thousand share no prefix of 5 characters (30 bits;
// odds of a shared one about 1 in 2,000).
func TestCapabilitiesAreRandomTokens(t *testing.T) {
	prefixes := map[string]bool{}
	for range 1000 {
		c := NewCapability()
		if len(c) != CapabilityLen || !IsCapability(c) || strings.ContainsAny(c, ".*> \t") {
			t.Fatalf("%q is not a capability of %d characters and one subject token", c, CapabilityLen)
		}
		if prefixes[c[:5]] {
			t.Fatalf("%q shares its first 5 characters with an earlier capability", c)
		}
		prefixes[c[:5]] = true
	}
	if CapabilityLen != base64.RawURLEncoding.EncodedLen(capabilityBytes) {
		t.Errorf("CapabilityLen is %d, want %d", CapabilityLen, base64.RawURLEncoding.EncodedLen(capabilityBytes))
	}
}

// FuzzIsCapability: only the spelling NewCapability makes is taken: 16
// bytes in base64url without padding, its last character canonical.
func FuzzIsCapability(f *testing.F) {
	f.Add(NewCapability())
	f.Add("AAAAAAAAAAAAAAAAAAAAAB") // the last character's low bits set
	f.Add("AAAAAAAAAAAAAAAAAAAAA")
	f.Add("AAAAAAAAAAAAAAAAAAAAAA==")
	f.Add("shell_AAAAAAAAAAAAAAAA")
	f.Add("0000000000\r\r0000000000") // newlines, which the decoder skips
	f.Fuzz(func(t *testing.T, s string) {
		b, err := base64.RawURLEncoding.DecodeString(s)
		want := err == nil && len(b) == capabilityBytes && base64.RawURLEncoding.EncodeToString(b) == s
		if got := IsCapability(s); got != want {
			t.Fatalf("IsCapability(%q) = %v, want %v", s, got, want)
		}
	})
}
