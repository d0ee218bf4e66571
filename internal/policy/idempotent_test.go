package policy

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
)

// TestIdempotentComesWithTheDecision: the default policy marks reads
// idempotent and writes not, in the decision the executor acts on.
func TestIdempotentComesWithTheDecision(t *testing.T) {
	p := defaultPolicy(t)
	for _, tt := range []struct {
		kind events.Kind
		want bool
	}{
		{events.KindRead, true}, {events.KindSearch, true}, {events.KindThink, true},
		{events.KindEdit, false}, {events.KindExecute, false}, {events.KindFetch, false}, {events.KindOther, false},
	} {
		in := &Input{Tool: ToolInput{Name: "t", Kind: tt.kind, Source: events.SourceBuiltin}, Args: map[string]any{},
			Caller: events.Identity{ID: "agent:test"}, Home: "/home/ada", Workspace: "/w"}
		if d := p.Decide(context.Background(), in); d.Idempotent != tt.want {
			t.Errorf("%s: idempotent %v, want %v (%s %s)", tt.kind, d.Idempotent, tt.want, d.Verdict, d.Reason)
		}
	}
}

// TestIdempotentFailsClosed: a policy set that does not define the rule,
// or defines it as anything but true, marks nothing idempotent and still
// decides; one whose rule cannot be evaluated decides nothing.
func TestIdempotentFailsClosed(t *testing.T) {
	const decision = "package toolbus\n\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"ok\"}\n"
	for _, tt := range []struct {
		name, rule string
		want       events.Verdict
		idempotent bool
	}{
		{"no rule", "", events.Allow, false},
		{"true", "idempotent := true\n", events.Allow, true},
		{"not a boolean", "idempotent := \"yes\"\n", events.Allow, false},
		{"false", "idempotent := false\n", events.Allow, false},
		{"conflicting", "idempotent := true if input.tool.kind == \"read\"\nidempotent := false if input.tool.name == \"t\"\n", events.Deny, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(context.Background(), Files{"p.rego": decision + tt.rule})
			if err != nil {
				t.Fatal(err)
			}
			in := &Input{Tool: ToolInput{Name: "t", Kind: events.KindRead, Source: events.SourceBuiltin}, Args: map[string]any{}, Caller: events.Identity{ID: "a"}}
			d := p.Decide(context.Background(), in)
			if d.Verdict != tt.want || d.Idempotent != tt.idempotent {
				t.Errorf("got %s idempotent=%v (%s), want %s idempotent=%v", d.Verdict, d.Idempotent, d.Reason, tt.want, tt.idempotent)
			}
		})
	}
}
