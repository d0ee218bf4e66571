package audit

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// TestMemoKeepsInputsApart: the memo of whatif answers only for exactly
// the same input, arguments, shell line and bash check: a call that
// differs in its arguments alone (the input document leaves them out)
// is judged on its own.
func TestMemoKeepsInputsApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pol, err := policy.Compile(ctx, policy.Files{"p.rego": `package toolbus

decision := {"verdict": "DENY", "reason": "no secrets", "remember": false} if {
	contains(input.args.query, "secret")
} else := {"verdict": "ALLOW", "reason": concat(" ", ["searching", input.args.query]), "remember": false}
`})
	if err != nil {
		t.Fatal(err)
	}
	input := json.RawMessage(`{"tool":{"name":"search"},"paths":[]}`)
	d := &events.Decision{Input: input}
	m := newMemo(pol)
	for round := range 2 { // the second round answers from the memo
		for _, q := range []string{"weather", "secret plans", "weather"} {
			r := &Record{Args: json.RawMessage(`{"query":"` + q + `"}`)}
			got, err := m.replay(ctx, pol, r, d)
			want, _ := replay(ctx, pol, r, d)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("round %d, %q: memo %+v (%v), replay %+v", round, q, got, err, want)
			}
		}
	}
	if len(m.m) != 2 {
		t.Errorf("%d entries for two distinct calls", len(m.m))
	}
	// The approver's modified arguments are what the memo is keyed by.
	r := &Record{Args: json.RawMessage(`{"query":"weather"}`)}
	modified := &events.Decision{Input: input, Args: json.RawMessage(`{"query":"secret"}`)}
	if got, _ := m.replay(ctx, pol, r, modified); got.Verdict != events.Deny {
		t.Errorf("modified arguments judged as the invocation's: %+v", got)
	}
}

// TraceID takes the trace id out of a W3C traceparent, and nothing out
// of what is not one: a record's trace is compared with the id an
// auditor asks for.
func TestTraceID(t *testing.T) {
	for in, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "", // W3C's are lower case
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01":  "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":    "",
		"00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01": "",
		"": "",
	} {
		if got := TraceID(in); got != want {
			t.Errorf("TraceID(%q) = %q, want %q", in, got, want)
		}
	}
}
