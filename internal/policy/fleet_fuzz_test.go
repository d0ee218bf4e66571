package policy

import (
	"strings"
	"testing"
)

// FuzzDecodeFleetKeys: the policy bucket's active and shadow keys are
// read by every executor. Whatever they hold, a decoder never panics,
// and what it takes names revisions a key can be made of, with a share
// of 0 to 100: a bad value is refused, never read as the whole fleet.
func FuzzDecodeFleetKeys(f *testing.F) {
	for _, seed := range []string{
		`{"stable":"sha256:0123456789abcdef"}`,
		`{"stable":"sha256:0123456789abcdef","next":"sha256:fedcba9876543210","share":{"percent":30,"principals":["agent-7"]}}`,
		`{"revision":"sha256:0123456789abcdef","files":{"p.rego":"package toolbus"}}`,
		`{"stable":"","next":"sha256:0123456789abcdef","share":{"percent":101}}`,
		`{"revision":"sha256:0123456789abcdef","by":"admin"}`,
		`{"revision":"sha256:../../x"}`,
		`null`, `[]`, `{"share":{"workspaces":[""]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := decodeActive(data); err == nil {
			if r.Share.Percent < 0 || r.Share.Percent > 100 {
				t.Fatalf("a share of %d%% was taken", r.Share.Percent)
			}
			for _, rev := range []string{r.Stable, r.Next} {
				if rev == "" {
					continue
				}
				if key, err := revisionKeyOf(rev); err == nil && (strings.ContainsAny(key[len(revisionKey):], ".*> ") || len(key) != len(revisionKey)+16) {
					t.Fatalf("revision %q makes the key %q", rev, key)
				}
			}
			r.Share.Holds("agent", "ws")
		}
		if s, err := decodeShadow(data); err == nil {
			if _, err := revisionKeyOf(s.Revision); err != nil {
				t.Fatalf("a shadow of revision %q was taken", s.Revision)
			}
		}
	})
}
