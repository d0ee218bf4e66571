package executor

import (
	"regexp"
	"testing"
)

// FuzzIDKey: whatever a principal token and an id hold (a token is any
// subject token; an id any bytes), their key is one the bucket takes,
// and two different pairs never share one.
func FuzzIDKey(f *testing.F) {
	valid := regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`) // nats.go's KV key check
	for _, seed := range [][2]string{{"agent", "x"}, {"agent:x", "id"}, {"_", ""}, {"a.b", "c"}, {"é", "\x00"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, principal, id string) {
		k := IDKey(principal, id)
		if !valid.MatchString(k) {
			t.Fatalf("IDKey(%q, %q) = %q, not a valid key", principal, id, k)
		}
		if principal != "x" && IDKey("x", id) == k {
			t.Fatalf("IDKey(%q, %q) is also x's", principal, id)
		}
	})
}
