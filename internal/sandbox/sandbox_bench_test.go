package sandbox

import "testing"

// BenchmarkRuleset builds the ruleset of a policy that hides a directory
// beside the workspace, under the temp dir: the directories on the way
// to it are listed and each entry is a rule of its own. Each is built
// anew, as when the cache misses.
//
//	go test ./internal/sandbox -run '^$' -bench Ruleset
func BenchmarkRuleset(b *testing.B) {
	s, err := New(Policy{Writable: []string{b.TempDir()}, Hidden: []string{b.TempDir()}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		s.cache.listed = nil
		s.Close() // built anew each time: what a cache miss costs
		rs, err := s.Ruleset()
		if err != nil {
			b.Skip(err)
		}
		rs.Close()
	}
}
