package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

const allowAll = "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"ok\"}\n"

func TestLimitsComeWithTheDecision(t *testing.T) {
	ctx := context.Background()
	p, err := Compile(ctx, Files{"p.rego": allowAll + `
limits contains {"name": "per agent", "key": ["agent", input.caller.agent], "calls": 3, "per": "1m"}
limits contains {"name": "at once", "key": "all", "concurrent": 2, "queue": {"max": 5, "wait": "30s"}}
limits contains {"name": "bytes", "key": [input.tool.name], "bytes": 100, "per": "1h"} if input.tool.kind == "edit"
limits contains {"name": "exactly", "key": "all", "calls": 10, "per": "1h", "exact": true}
limits contains {"name": "not exactly", "key": "all", "bytes": 10, "per": "1h", "exact": false}
`})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide(ctx, &Input{Tool: ToolInput{Name: "read_file", Kind: events.KindRead}, Caller: events.Identity{ID: "a", Agent: "x"}})
	if d.Verdict != events.Allow || len(d.Limits) != 4 {
		t.Fatalf("got %s %q with %+v, want ALLOW with 4 limits", d.Verdict, d.Reason, d.Limits)
	}
	by := map[string]Limit{}
	for _, l := range d.Limits {
		by[l.Name] = l
		if l.ID == "" || strings.ContainsAny(l.ID, ".*> ") {
			t.Errorf("limit %q has id %q, not one subject token", l.Name, l.ID)
		}
	}
	if l := by["per agent"]; l.Calls != 3 || l.Per != time.Minute || l.Concurrent != 0 {
		t.Errorf("per agent: %+v", l)
	}
	if l := by["at once"]; l.Concurrent != 2 || l.Queue != 5 || l.QueueWait != 30*time.Second {
		t.Errorf("at once: %+v", l)
	}
	for name, want := range map[string]bool{"per agent": false, "exactly": true, "not exactly": false} {
		if l := by[name]; l.Exact != want {
			t.Errorf("%s: exact %v, want %v", name, l.Exact, want)
		}
	}
	// Another agent's calls are counted apart; the same agent's together.
	other := p.Decide(ctx, &Input{Tool: ToolInput{Name: "read_file", Kind: events.KindRead}, Caller: events.Identity{ID: "a", Agent: "y"}})
	same := p.Decide(ctx, &Input{Tool: ToolInput{Name: "grep", Kind: events.KindRead}, Caller: events.Identity{ID: "b", Agent: "x"}})
	idOf := func(d Decision, name string) string {
		for _, l := range d.Limits {
			if l.Name == name {
				return l.ID
			}
		}
		return ""
	}
	if idOf(other, "per agent") == by["per agent"].ID {
		t.Error("two agents share one counter")
	}
	if idOf(same, "per agent") != by["per agent"].ID {
		t.Error("one agent's calls are counted apart")
	}
	// A key is kept apart element by element: no name a caller chooses
	// joins two keys.
	a := p.Decide(ctx, &Input{Caller: events.Identity{Agent: `x","y`}})
	b := p.Decide(ctx, &Input{Caller: events.Identity{Agent: "x"}})
	if idOf(a, "per agent") == idOf(b, "per agent") {
		t.Error("a crafted agent name shares another's counter")
	}

	// A set without the rule has no limits.
	plain, err := Compile(ctx, Files{"p.rego": allowAll})
	if err != nil {
		t.Fatal(err)
	}
	if d := plain.Decide(ctx, &Input{}); d.Verdict != events.Allow || d.Limits != nil {
		t.Errorf("without the rule: %s %+v", d.Verdict, d.Limits)
	}
}

func TestMalformedLimitsFailClosed(t *testing.T) {
	ctx := context.Background()
	tests := []struct{ name, rule, says string }{
		{"not a set", `limits := "many"`, "not a set of limits"},
		{"not an object", `limits contains 3`, "a limit is an object"},
		{"no name", `limits contains {"key": "k", "calls": 1, "per": "1m"}`, "needs a name"},
		{"no key", `limits contains {"name": "n", "calls": 1, "per": "1m"}`, "needs a key"},
		{"key of numbers", `limits contains {"name": "n", "key": [1], "calls": 1, "per": "1m"}`, "key must be"},
		{"no kind", `limits contains {"name": "n", "key": "k", "per": "1m"}`, "exactly one of"},
		{"two kinds", `limits contains {"name": "n", "key": "k", "calls": 1, "bytes": 5, "per": "1m"}`, "exactly one of"},
		{"a typo", `limits contains {"name": "n", "key": "k", "call": 1, "per": "1m"}`, "unknown field"},
		{"zero", `limits contains {"name": "n", "key": "k", "calls": 0, "per": "1m"}`, "above 0"},
		{"fraction", `limits contains {"name": "n", "key": "k", "calls": 1.5, "per": "1m"}`, "whole number"},
		{"no interval", `limits contains {"name": "n", "key": "k", "calls": 1}`, "per must be"},
		{"bad interval", `limits contains {"name": "n", "key": "k", "calls": 1, "per": "forever"}`, "per must be"},
		{"interval too long", `limits contains {"name": "n", "key": "k", "calls": 1, "per": "48h"}`, "per must be"},
		{"queue on a rate", `limits contains {"name": "n", "key": "k", "calls": 1, "per": "1m", "queue": {"max": 1, "wait": "1s"}}`, "queue is for concurrent"},
		{"per on concurrent", `limits contains {"name": "n", "key": "k", "concurrent": 1, "per": "1m"}`, "per is for"},
		{"queue without wait", `limits contains {"name": "n", "key": "k", "concurrent": 1, "queue": {"max": 1}}`, "queue needs"},
		{"queue wait too long", `limits contains {"name": "n", "key": "k", "concurrent": 1, "queue": {"max": 1, "wait": "1h"}}`, "queue.wait"},
		{"exact not a boolean", `limits contains {"name": "n", "key": "k", "calls": 1, "per": "1m", "exact": "yes"}`, "exact must be true or false"},
		{"exact on concurrent", `limits contains {"name": "n", "key": "k", "concurrent": 1, "exact": true}`, "exact is for calls and bytes"},
		{"error in the rule", `limits contains {"name": "n", "key": "k", "calls": to_number("many"), "per": "1m"}`, "policy error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(ctx, Files{"p.rego": allowAll + tt.rule + "\n"})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			d := p.Decide(ctx, &Input{Tool: ToolInput{Name: "read_file", Kind: events.KindRead}})
			if d.Verdict != events.Deny || !strings.Contains(d.Reason, tt.says) || d.Limits != nil {
				t.Errorf("got %s (%s) %+v, want DENY saying %q", d.Verdict, d.Reason, d.Limits, tt.says)
			}
		})
	}
}
