package policy_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// permissive allows every shell line it can read: a policy under which a
// replay of a recorded DENY reaches bash's check, as a live call would.
var permissive = policy.Files{"p.rego": `package toolbus

decision := {"verdict": "DENY", "reason": concat("; ", input.shell.opaque), "remember": false} if {
	count(input.shell.opaque) > 0
} else := {"verdict": "DENY", "reason": input.shell.parseError, "remember": false} if {
	input.shell.parseError
} else := {"verdict": "ALLOW", "reason": "anything readable", "remember": false}
`}

// asExecuted is what the executor's policy sees of args: the bytes of the
// call decoded by DecodeArgs.
func asExecuted(tb testing.TB, args map[string]any) map[string]any {
	tb.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := policy.DecodeArgs(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// checkReplay decides in under pol as the executor does, then checks the
// record: it is the input document the decision was made on, and a replay
// under pol gives the same decision, and under other the decision a live
// call under other gets (fresh makes that call's input again).
func checkReplay(t *testing.T, pol, other *policy.Policy, in *policy.Input, fresh func() *policy.Input) {
	t.Helper()
	ctx := context.Background()
	in.Args = asExecuted(t, in.Args)
	d, rec := pol.DecideRecorded(ctx, in)
	want, err := policy.InputValue(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := policy.RecordedValue(rec, in.Args)
	if err != nil {
		t.Fatalf("the record does not read back: %v\n%s", err, rec.Input)
	}
	if got.Compare(want) != 0 {
		t.Fatalf("recorded input differs from the evaluated one:\n got %v\nwant %v", got, want)
	}
	again, err := pol.Replay(ctx, rec, in.Args)
	if err != nil || !reflect.DeepEqual(again, d) {
		t.Fatalf("replay under the same policy: %+v (%v), recorded %+v", again, err, d)
	}
	if other == nil {
		return
	}
	live := other.Decide(ctx, fresh())
	replayed, err := other.Replay(ctx, rec, in.Args)
	if err != nil || !reflect.DeepEqual(replayed, live) {
		t.Fatalf("replay under another policy: %+v (%v), a live call %+v", replayed, err, live)
	}
}

// TestReplayGivesTheDecision: for every line of the shell corpus, with and
// without remembered approvals, the record of a decision reads back as
// the input evaluated, replays to the same decision, and under another
// policy to the decision a live call would get (bash's check included).
func TestReplayGivesTheDecision(t *testing.T) {
	pol := defaultPolicyOnce(t)
	other, err := policy.Compile(context.Background(), permissive)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range rememberedSeeds {
		for _, approved := range append([][]string{nil}, rememberedSets...) {
			make := func() *policy.Input {
				in := shellInput(pol, line)
				in.Allowlist = rememberedEntries(t, pol, approved)
				return in
			}
			checkReplay(t, pol, other, make(), make)
		}
	}
}

// TestReplayOfFileTools: the parts of the input a shell line does not
// have — annotations with numbers, paths and hard links, nested arguments
// with large numbers, every field of the caller.
func TestReplayOfFileTools(t *testing.T) {
	pol := defaultPolicyOnce(t)
	in := &policy.Input{
		Tool: policy.ToolInput{Name: "write_file", Kind: events.KindEdit, Source: events.SourceMCP, Server: "fs",
			Annotations: map[string]any{"title": "Write", "destructiveHint": true, "n": 1.5, "big": json.Number("123456789012345678901")}},
		Args:      map[string]any{"file_path": "/w/.env", "content": "x", "n": json.Number("12345678901234567890"), "list": []any{"a", map[string]any{"b": nil}}},
		Caller:    events.Identity{ID: "agent:a", Role: "agent", Agent: "gemini", Session: "s", User: "ada", Host: "h", Client: "c"},
		Paths:     []string{"/w/.env", "/home/ada/.ssh/id_rsa"},
		HardLinks: []string{"/home/ada/.ssh/id_rsa"},
		Allowlist: []policy.AllowEntry{{Scope: "server", Server: "fs"}, {Scope: "path", Tool: "write_file", Path: "/w/x"}},
		Home:      "/home/ada", Workspace: "/w",
	}
	checkReplay(t, pol, nil, in, nil)
	if d, _ := pol.Replay(context.Background(), mustRecord(t, pol, in), in.Args); d.Verdict != events.Deny {
		t.Errorf("writing .env replays as %s", d.Verdict)
	}
	// A file name that is not UTF-8 cannot be kept exactly in JSON: the
	// record says so.
	in.Paths = []string{"/w/\xff.txt"}
	if _, rec := pol.DecideRecorded(context.Background(), in); !rec.Lossy {
		t.Error("a path with invalid UTF-8 was recorded as exact")
	}
}

func mustRecord(t *testing.T, pol *policy.Policy, in *policy.Input) policy.Recorded {
	t.Helper()
	_, rec := pol.DecideRecorded(context.Background(), in)
	return rec
}

// FuzzReplay: generated shell lines, recorded under the default policy,
// replay to the same decision, and under the permissive one to a live
// call's.
func FuzzReplay(f *testing.F) {
	for _, s := range generatorSeeds {
		f.Add(s)
	}
	pol := defaultPolicyOnce(f)
	other, err := policy.Compile(context.Background(), permissive)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, choices []byte) {
		line := generateLine(choices)
		checkReplay(t, pol, other, shellInput(pol, line), func() *policy.Input { return shellInput(pol, line) })
	})
}

// FuzzValueFromJSON: a recorded input comes from the audit stream, which
// anyone allowed to publish on the bus writes to. Reading it never panics,
// and an object reads as the value the executor's own decoding makes of
// the same bytes (DecodeArgs, then OPA's conversion): a differential test
// of the two decoders.
func FuzzValueFromJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":[1,{"b":null}],"c":true,"d":1.50,"e":-0,"f":1e999}`, `{"a":1,"a":2}`,
		`[1]`, `{"a":"\u00e9\ud83d\ude00"}`, `{"a":"\ud800"}`, `{} {}`, `{"a":`, "{\"a\":\"\xff\"}", `"x"`, `{"":{"":[]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := policy.ValueFromJSON(data)
		args, argsErr := policy.DecodeArgs(data)
		if argsErr != nil {
			if err == nil {
				if _, isObject := v.(ast.Object); isObject {
					t.Fatalf("%q: read as %v, but DecodeArgs refuses it: %v", data, v, argsErr)
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: DecodeArgs reads it, ValueFromJSON does not: %v", data, err)
		}
		want, err := ast.InterfaceToValue(args)
		if err != nil {
			t.Fatal(err)
		}
		if v.Compare(want) != 0 {
			t.Fatalf("%q: read as %v, the executor's decoding makes %v", data, v, want)
		}
	})
}

// TestExplainNamesTheRules: OPA's trace of a decision names the rules
// that made it — the decision's branch and the reason's own rule.
func TestExplainNamesTheRules(t *testing.T) {
	pol := defaultPolicyOnce(t)
	ctx := context.Background()
	explain := func(in *policy.Input) *policy.Explanation {
		t.Helper()
		in.Args = asExecuted(t, in.Args)
		_, rec := pol.DecideRecorded(ctx, in)
		ex, err := pol.Explain(ctx, rec, in.Args)
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	has := func(ex *policy.Explanation, file, text string) bool {
		return slices.ContainsFunc(ex.Rules, func(r policy.RuleHit) bool {
			return strings.HasSuffix(r.File, file) && strings.Contains(r.Rule, text) && r.Row > 0
		})
	}
	ex := explain(shellInput(pol, "rm -rf /"))
	if ex.Decision.Verdict != events.Deny || !has(ex, "toolbus.rego", `decision := {"verdict": "DENY"`) || !has(ex, "shell.rego", "deny contains") {
		t.Errorf("rm -rf /: %s, rules %+v", ex.Decision.Verdict, ex.Rules)
	}
	if !strings.Contains(ex.Trace, "Exit") || !strings.Contains(ex.Trace, "shell.rego") {
		t.Errorf("the trace has no exits with locations:\n%.2000s", ex.Trace)
	}
	read := &policy.Input{Tool: policy.ToolInput{Name: "read_file", Kind: events.KindRead, Source: events.SourceBuiltin},
		Args: map[string]any{"file_path": "/w/a.txt"}, Paths: []string{"/w/a.txt"}, Home: "/home/ada", Workspace: "/w"}
	ex = explain(read)
	if ex.Decision.Verdict != events.Allow || !has(ex, "toolbus.rego", `allow contains concat("", [input.tool.kind, " tools are allowed"])`) {
		t.Errorf("read_file: %s, rules %+v", ex.Decision.Verdict, ex.Rules)
	}
	if has(ex, "", "deny contains") {
		t.Errorf("an allowed read names a deny rule: %+v", ex.Rules)
	}
}
