package policy

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
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

// A decision may be reused for the same conclusions of the loop guards
// only when nothing but their package reads the counts, and that package
// reads nothing the executor does not show it: each of these reads makes
// the policy judge every call with counts whole.
func TestSessionApart(t *testing.T) {
	const decision = "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"r\"} if not data.toolbus.session.deny\n"
	for _, c := range []struct {
		name, session, other string
		want                 bool
	}{
		{"the counts in their package", `deny if input.session.calls > 3`, "", true},
		{"the tool and the caller too", `deny if { input.session.calls > 3; input.tool.kind == "edit"; input.caller.session != "" }`, "", true},
		{"a constant", `deny if input.session.calls > data.toolbus_constants.n`, "package toolbus_constants\nn := 3\n", true},
		{"the counts read elsewhere", `deny if input.session.calls > 3`, "package toolbus\nx if input.session.repeats > 1\n", false},
		{"the arguments", `deny if { input.session.calls > 3; input.args.x }`, "", false},
		{"the input whole", `deny if { x := input; x.session.calls > 3 }`, "", false},
		{"a key known only when evaluated", `deny if { some k; input[k].calls > 3 }`, "", false},
		{"another package's rule", `deny if { input.session.calls > 3; data.toolbus.other }`, "package toolbus\nother if input.args.x\n", false},
	} {
		files := Files{"p.rego": decision, "s.rego": "package toolbus.session\n" + c.session + "\n"}
		if c.other != "" {
			files["o.rego"] = c.other
		}
		p, err := Compile(context.Background(), files)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := p.SessionApart(); got != c.want {
			t.Errorf("%s: SessionApart %v, want %v", c.name, got, c.want)
		}
	}
	if p := defaultPolicy(t); !p.SessionApart() {
		t.Error("the default policy does not keep its loop guards apart")
	}
}

// FuzzSessionConclusions is the differential test of the executor's reuse
// of decisions: two calls that differ only in their counts, whose loop
// guards conclude the same (SessionConclusions), must get the same
// decision from the whole policy. Were it not so, an agent could have a
// call judged once with counts the guards let pass and reuse that verdict
// past its budget, or past the repeat that asks.
func FuzzSessionConclusions(f *testing.F) {
	p := defaultPolicy(f)
	for _, c := range [][6]int64{
		{0, 1, 4, 4, 5, 5}, {1, 1, 4, 4, 5, 5}, {2, 0, 2000, 1, 2001, 1}, {3, 0, 100000, 1, 100001, 1},
		{1, 0, 1, 1, 2, 2}, {4, 1, -1, -5, 1 << 62, 1 << 62}, {5, 1, 7, 9, 7, 4}, {6, 0, 3, 5, 3, 6},
	} {
		f.Add(c[0], c[1] == 1, c[2], c[3], c[4], c[5])
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, which int64, named bool, calls1, repeats1, calls2, repeats2 int64) {
		calls := []*Input{
			{Tool: ToolInput{Name: "read_file", Kind: events.KindRead, Source: events.SourceBuiltin}, Args: map[string]any{"file_path": "/w/a.txt"}, Paths: []string{"/w/a.txt"}},
			{Tool: ToolInput{Name: "write_file", Kind: events.KindEdit, Source: events.SourceBuiltin}, Args: map[string]any{"file_path": "/w/a.txt", "content": "x"}, Paths: []string{"/w/a.txt"},
				Allowlist: []AllowEntry{{Scope: "path", Tool: "write_file", Path: "/w/a.txt"}}},
			{Tool: ToolInput{Name: "write_file", Kind: events.KindEdit, Source: events.SourceBuiltin}, Args: map[string]any{"file_path": "/w/a.txt", "content": "x"}, Paths: []string{"/w/a.txt"}},
			{Tool: ToolInput{Name: "delete_file", Kind: events.KindDelete, Source: events.SourceBuiltin}, Args: map[string]any{"file_path": "/w/a.txt"}, Paths: []string{"/w/a.txt"},
				Allowlist: []AllowEntry{{Scope: "tool", Tool: "delete_file"}}},
			{Tool: ToolInput{Name: "search", Kind: events.KindSearch, Source: events.SourceMCP, Server: "s", Trust: true}, Args: map[string]any{"q": "x"}},
			{Tool: ToolInput{Name: "fetch", Kind: events.KindFetch, Source: events.SourceBuiltin}, Args: map[string]any{"url": "https://example.com"}},
			{Tool: ToolInput{Name: "think", Kind: events.KindThink, Source: events.SourceBuiltin}, Args: map[string]any{}},
		}
		base := calls[uint64(which)%uint64(len(calls))]
		at := func(c, r int64) (*Input, []byte) {
			in := *base
			in.Caller = events.Identity{ID: "agent:fuzz", Role: "agent"}
			if named {
				in.Caller.Session = "s1"
			}
			in.Home, in.Workspace = "/home/a", "/w"
			in.Session = &SessionCounts{Calls: c, Repeats: r}
			concluded, err := p.SessionConclusions(ctx, &in)
			if err != nil {
				t.Fatalf("%d/%d: %v", c, r, err)
			}
			return &in, concluded
		}
		in1, c1 := at(calls1, repeats1)
		in2, c2 := at(calls2, repeats2)
		if string(c1) != string(c2) {
			return
		}
		d1, d2 := p.Decide(ctx, in1), p.Decide(ctx, in2)
		if d1.Verdict != d2.Verdict || d1.Reason != d2.Reason || d1.Remember != d2.Remember || d1.Idempotent != d2.Idempotent ||
			d1.ApprovalsRequired != d2.ApprovalsRequired || fmt.Sprint(d1.Limits) != fmt.Sprint(d2.Limits) {
			t.Errorf("%s with counts %d/%d and %d/%d: the guards conclude %s for both, yet the decisions are %+v and %+v",
				base.Tool.Name, calls1, repeats1, calls2, repeats2, c1, d1, d2)
		}
	})
}

// The query SessionConclusions evaluates holds the rules of the package
// the rest of the set reads, and the whole package when the rest reads
// it whole, through a document that holds it, or by a key known only
// when evaluated: a conclusion left out of the key would let a decision
// be reused when it changed.
func TestSessionConclusionsCoverWhatIsRead(t *testing.T) {
	const session = "package toolbus.session\ndeny if input.session.calls > 3\nask if input.session.repeats > 3\nextra := input.session.calls\n"
	for _, c := range []struct{ name, reader, want string }{
		{"two rules", `r if { not data.toolbus.session.deny; not data.toolbus.session.ask }`,
			`[{x | x := data.toolbus.session.ask}, {x | x := data.toolbus.session.deny}]`},
		{"the package whole", `r if { s := data.toolbus.session; not s.deny }`, SessionQuery},
		{"a document holding it", `r if { t := data.toolbus; not t.session.deny }`, SessionQuery},
		{"a key known when evaluated", `r if { some k in {"deny"}; data.toolbus.session[k] }`, SessionQuery},
		{"a package known when evaluated", `r if { some k in {"session"}; data.toolbus[k].deny }`, SessionQuery},
		{"data by a key known when evaluated", `r if { some k in {"toolbus"}; data[k].session.deny }`, SessionQuery},
	} {
		modules, err := parse(Files{"p.rego": "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"r\"}\n",
			"r.rego": "package reader\n" + c.reader + "\n", "s.rego": session})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		query, apart := sessionApart(modules)
		if !apart || query != c.want {
			t.Errorf("%s: query %q (apart %v), want %q", c.name, query, apart, c.want)
		}
	}
}
