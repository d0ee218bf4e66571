package policy

import (
	"context"
	"testing"
)

// The executor counts a session's calls on the bus only for a policy that
// may read them: a policy that names input.session, or the input in a way
// that could reach it, does; one that reads other fields only does not.
func TestReadsSession(t *testing.T) {
	for _, c := range []struct {
		rule string
		want bool
	}{
		{`decision := {"verdict": "ALLOW", "reason": "r"} if input.tool.kind == "read"`, false},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if input.caller.session == "s"`, false},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if input.session.repeats < 5`, true},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if input["session"].calls < 5`, true},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if { some k; input[k] }`, true},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if { x := input; x.session.calls < 5 }`, true},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if object.get(input, ["session", "calls"], 0) < 5`, true},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if data.limits[input.session.calls]`, true},
		{`decision := {"verdict": "ALLOW", "reason": "r"} if input.args[input.session.calls]`, true},
	} {
		p, err := Compile(context.Background(), Files{"p.rego": "package toolbus\n" + c.rule + "\n"})
		if err != nil {
			t.Fatalf("%s: %v", c.rule, err)
		}
		if got := p.ReadsSession(); got != c.want {
			t.Errorf("%s: ReadsSession %v, want %v", c.rule, got, c.want)
		}
	}
	// A test module's reading does not count: tests make up their input.
	p, err := Compile(context.Background(), Files{
		"p.rego":      "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"r\"}\n",
		"p_test.rego": "package toolbus_test\ntest_x if data.toolbus.decision with input as {\"session\": {\"calls\": 1}}\ntest_y if input.session.calls == 1 with input as {\"session\": {\"calls\": 1}}\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.ReadsSession() {
		t.Error("a read in a test module counts")
	}
}
