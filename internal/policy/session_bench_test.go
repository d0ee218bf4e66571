package policy

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
)

// BenchmarkSessionConclusions is what the loop guards cost a call whose
// decision is reused: the evaluation of their package.
func BenchmarkSessionConclusions(b *testing.B) {
	p := defaultPolicy(b)
	in := &Input{Tool: ToolInput{Name: "read_file", Kind: events.KindRead, Source: events.SourceBuiltin},
		Caller: events.Identity{ID: "agent:bench", Session: "s1"}, Session: &SessionCounts{Calls: 10, Repeats: 3}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.SessionConclusions(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}
