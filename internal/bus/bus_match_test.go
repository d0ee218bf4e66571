package bus

import "testing"

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		subject, filter string
		want            bool
	}{
		{"a.b.c", "a.b.c", true},
		{"a.b.c", "a.*.c", true},
		{"a.b.c", "a.>", true},
		{"a", "a.>", false},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"a.b.c", "*.*.*", true},
		{"a.b.c", "*.*", false},
		{"a.bb.c", "a.b.c", false},
		{"toolbus.request.tool.invoke.facade.stdio-1", "toolbus.request.tool.invoke.facade.*", true},
		{"toolbus.request.tool.invoke.agent.stdio-1", "toolbus.request.tool.invoke.agent", false},
	} {
		if got := subjectMatches(c.subject, c.filter); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.subject, c.filter, got, c.want)
		}
	}
}
