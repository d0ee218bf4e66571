package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy/shell"
)

func defaultPolicy(t testing.TB) *Policy {
	t.Helper()
	files, err := LoadDir("../../policy")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(context.Background(), files)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRegoUnitTests runs policy/*_test.rego with OPA's tester, as
// `toolbus policy test` and `opa test policy/` do.
func TestRegoUnitTests(t *testing.T) {
	files, err := LoadDir("../../policy")
	if err != nil {
		t.Fatal(err)
	}
	results, err := Test(context.Background(), files)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) < 20 {
		t.Errorf("only %d Rego tests ran", len(results))
	}
	for _, r := range results {
		if !r.Pass {
			t.Errorf("%s: failed %s", r.Name, r.Error)
		}
	}
}

// shellInput is the input the executor makes of a shell line run in /w
// for a user whose home is /home/ada, with entries remembered.
func shellInput(p *Policy, line string, remembered ...AllowEntry) *Input {
	sh := shell.Analyze(line)
	return &Input{
		Tool:   ToolInput{Name: "run_shell_command", Kind: events.KindExecute, Source: events.SourceBuiltin},
		Args:   map[string]any{"command": line},
		Caller: events.Identity{ID: "agent:test"},
		Shell:  &sh, Paths: sh.Locate("/w", "/home/ada", p.Samples()), Home: "/home/ada", Workspace: "/w",
		Allowlist: remembered,
	}
}

// TestChainedShellCannotHide runs real shell lines through the real parser
// and the default policy: a dangerous command is found wherever it hides.
func TestChainedShellCannotHide(t *testing.T) {
	p := defaultPolicy(t)
	tests := []struct {
		line string
		want events.Verdict
		says string
	}{
		{"ls -la", events.AskUser, "execute tools ask the user"},
		{"rm -rf /", events.Deny, "recursive removal of /"},
		{"ls && rm -rf /", events.Deny, "recursive removal"},
		{"cd x; rm -rf /", events.Deny, "recursive removal"},
		{"$(rm -rf /)", events.Deny, "recursive removal"},
		{"echo `rm -rf /`", events.Deny, "recursive removal"},
		{"echo \"$(rm -rf /)\"", events.Deny, "recursive removal"},
		{"true || (rm -rf /)", events.Deny, "recursive removal"},
		{"ls | xargs rm -rf /", events.Deny, "recursive removal"},
		{"sudo rm -rf /", events.Deny, "recursive removal"},
		{"sudo -u root /bin/rm -r -f /*", events.Deny, "recursive removal"},
		// Escapes and quotes bash removes, and spellings of / and $HOME.
		{`\rm -rf /`, events.Deny, "recursive removal"},
		{`r\m -rf /`, events.Deny, "recursive removal"},
		{`"r"'m' -rf /`, events.Deny, "recursive removal"},
		{`rm -rf "/"`, events.Deny, "recursive removal"},
		{`rm -rf //`, events.Deny, "recursive removal"},
		{`rm -rf /./`, events.Deny, "recursive removal"},
		{`rm -rf "$HOME"`, events.Deny, "recursive removal"},
		{`rm -rf "${HOME}"/*`, events.Deny, "recursive removal"},
		{`busybox rm -rf /`, events.Deny, "recursive removal"},
		{"rm -rf \\\n /", events.Deny, "recursive removal"},
		// $'...' is not read as literal text: not denied by name, but asked.
		{`$'\x72m' -rf /`, events.AskUser, "execute tools ask the user"},
		{`rm -rf ./build`, events.AskUser, "execute tools ask the user"},
		{`rm -rf "$HOME/project/build"`, events.AskUser, "execute tools ask the user"},
		{"env FOO=1 nice -n 5 rm -fr ~", events.Deny, "recursive removal"},
		{"bash -c 'rm -rf /'", events.Deny, "recursive removal"},
		{"sh -lc \"ls; rm -rf /\"", events.Deny, "recursive removal"},
		{"eval 'rm -rf /'", events.Deny, "recursive removal"},
		{"f() { rm -rf /; }; f", events.Deny, "recursive removal"},
		{":(){ :|:& };:", events.Deny, "fork bomb"},
		{"dd if=/dev/zero of=/dev/sda bs=1M", events.Deny, "dd writes onto the disk /dev/sda"},
		{"echo boom > /dev/sda", events.Deny, "writes onto the disk /dev/sda"},
		{"cat ~/.ssh/id_rsa", events.Deny, "sensitive path /home/ada/.ssh/id_rsa"},
		{"cat /etc/shadow | head", events.Deny, "sensitive path /etc/shadow"},
		{"grep KEY .env", events.Deny, "sensitive path /w/.env"},
		{"cp .env.example .env.local", events.Deny, "sensitive path /w/.env.local"},
		{"echo 'unclosed", events.Deny, "cannot be parsed"},
		{"rm -rf build && make", events.AskUser, ""},
		{"echo 'rm -rf /'", events.AskUser, ""}, // a string, not a command
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			d := p.Decide(context.Background(), shellInput(p, tt.line))
			if d.Verdict != tt.want || !strings.Contains(d.Reason, tt.says) {
				t.Errorf("got %s (%s), want %s saying %q", d.Verdict, d.Reason, tt.want, tt.says)
			}
			if d.Revision != p.Revision() {
				t.Errorf("decision revision %q, policy %q", d.Revision, p.Revision())
			}
		})
	}
}

// TestPolicyFailsClosed: whatever goes wrong in the policy, the answer is
// DENY with a reason, never ALLOW.
func TestPolicyFailsClosed(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		rego string
		says string
	}{
		// The set defines a decision, which this input leaves undefined.
		{"undefined decision", "package toolbus\ndecision := {\"verdict\": \"ALLOW\"} if input.never\n", "data.toolbus.decision is undefined"},
		{"not an object", "package toolbus\ndecision := \"ALLOW\"\n", "is not an object"},
		// A verdict made when the call is judged, which no check on load sees.
		{"unknown verdict", "package toolbus\ndecision := {\"verdict\": concat(\"\", [\"Y\", \"ES\"])}\n", `verdict is "YES"`},
		{"runtime error", "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": sprintf(\"%d\", [1/input.zero])}\n", "policy error"},
		{"conflict", "package toolbus\ndecision := {\"verdict\": \"ALLOW\"} if true\ndecision := {\"verdict\": \"DENY\"} if true\n", "policy error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(ctx, Files{"p.rego": tt.rego})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			d := p.Decide(ctx, &Input{Tool: ToolInput{Name: "read_file", Kind: events.KindRead}})
			if d.Verdict != events.Deny || !strings.Contains(d.Reason, tt.says) {
				t.Errorf("got %s (%s), want DENY saying %q", d.Verdict, d.Reason, tt.says)
			}
		})
	}
}

func TestCompileRefusesBrokenSets(t *testing.T) {
	ctx := context.Background()
	good, _ := LoadDir("../../policy")
	tests := []struct {
		name  string
		files Files
		says  string
	}{
		{"empty", Files{}, "empty policy set"},
		{"syntax error", Files{"p.rego": "package toolbus\ndecision := {"}, "rego_parse_error"},
		{"not Rego v1", Files{"p.rego": "package toolbus\ndeny[x] { x := 1 }\n"}, "rego_parse_error"},
		{"no decision", Files{"p.rego": "package toolbus\nother := 1\n"}, "the set defines no data.toolbus.decision"},
		{"a misspelt decision", Files{"p.rego": "package toolbus\ndesicion := {\"verdict\": \"ALLOW\"}\n"}, `it defines "desicion": a misspelling?`},
		{"a decision in another package", Files{"p.rego": "package tolbus\ndecision := {\"verdict\": \"ALLOW\"}\n"}, "the set defines no data.toolbus.decision"},
		{"a misspelt verdict", Files{"p.rego": "package toolbus\n\ndecision := {\"verdict\": \"DENY\"} if input.x\n\nelse := {\"verdict\": \"ALOW\", \"reason\": \"ok\"}\n"}, `p.rego:5: verdict "ALOW" is none of ALLOW, DENY and ASK_USER`},
		{"failing Rego test", merge(good, Files{"extra_test.rego": "package extra_test\nimport data.toolbus\ntest_wrong if toolbus.decision.verdict == \"ALLOW\" with input as {\"tool\": {\"kind\": \"execute\"}}\n"}), "Rego tests fail: data.extra_test.test_wrong"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(ctx, tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("got %v, want an error saying %q", err, tt.says)
			}
		})
	}
}

func merge(a, b Files) Files {
	out := Files{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func TestRevisionDependsOnContentOnly(t *testing.T) {
	a := Files{"a.rego": "x", "b.rego": "y"}
	b := Files{"b.rego": "y", "a.rego": "x"}
	c := Files{"a.rego": "x", "b.rego": "z"}
	if a.Revision() != b.Revision() || a.Revision() == c.Revision() || !strings.HasPrefix(a.Revision(), "sha256:") {
		t.Errorf("revisions %s %s %s", a.Revision(), b.Revision(), c.Revision())
	}
}

// BenchmarkDecide is the policy decision alone, for a read_file call and
// for a shell line (parsing included).
func BenchmarkDecide(b *testing.B) {
	p := defaultPolicy(b)
	ctx := context.Background()
	read := &Input{Tool: ToolInput{Name: "read_file", Kind: events.KindRead, Source: events.SourceBuiltin},
		Args: map[string]any{"file_path": "README.md"}, Caller: events.Identity{ID: "agent"}, Paths: []string{"/w/README.md"}, Home: "/h", Workspace: "/w"}
	b.Run("read_file", func(b *testing.B) {
		for range b.N {
			if d := p.Decide(ctx, read); d.Verdict != events.Allow {
				b.Fatal(d.Reason)
			}
		}
	})
	b.Run("shell", func(b *testing.B) {
		for range b.N {
			if d := p.Decide(ctx, shellInput(p, "git status && go test ./...")); d.Verdict != events.AskUser {
				b.Fatal(d.Reason)
			}
		}
	})
}

func TestDeterminism(t *testing.T) {
	ctx := context.Background()
	if p := defaultPolicy(t); !p.Deterministic() {
		t.Error("the default policy is not seen as deterministic")
	}
	timed, err := Compile(ctx, Files{"p.rego": "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": sprintf(\"%d\", [time.now_ns()])}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if timed.Deterministic() {
		t.Error("a policy calling time.now_ns is seen as deterministic")
	}
}

// TestDeniedPaths: the per-file judgement tools use for files they pick
// themselves. It fails closed on a rule that gives something else than a
// set of paths; a policy without the rule refuses no file on its own.
func TestDeniedPaths(t *testing.T) {
	ctx := context.Background()
	in := &Input{Tool: ToolInput{Name: "search_file_content", Kind: events.KindSearch, Source: events.SourceBuiltin},
		Caller: events.Identity{ID: "agent"}, Paths: []string{"/w/main.go", "/w/.env", "/w/a/.env.local", "/w/.env.example"}}
	denied, err := defaultPolicy(t).DeniedPaths(ctx, in)
	if err != nil || len(denied) != 2 || !denied["/w/.env"] || !denied["/w/a/.env.local"] {
		t.Errorf("default policy: %v %v", denied, err)
	}
	without, err := Compile(ctx, Files{"p.rego": "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"x\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if denied, err := without.DeniedPaths(ctx, in); err != nil || len(denied) != 0 {
		t.Errorf("no rule: %v %v", denied, err)
	}
	for _, src := range []string{
		"package toolbus\ndenied_paths := 7\n",
		"package toolbus\ndenied_paths contains 7 if true\n",
		"package toolbus\ndenied_paths contains p if { some p in input.paths; 1 / 0 == 1 }\n",
	} {
		p, err := Compile(ctx, Files{"p.rego": "package toolbus\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"x\"}\n", "q.rego": src})
		if err != nil {
			continue // refused at compile time: as good
		}
		if denied, err := p.DeniedPaths(ctx, in); err == nil {
			t.Errorf("%q: no error, denied %v", src, denied)
		}
	}
}

// FuzzAnalyzeShell: command lines come from models. Analysing any line
// never panics, and the default policy never lets a shell line run without
// asking: whatever the parser makes of it, the verdict is ASK_USER or DENY.
func FuzzAnalyzeShell(f *testing.F) {
	for _, s := range []string{"ls -la", "rm -rf /", `\rm -rf "$HOME"`, "a && b || c; d | e", "f(){ f|f& }; f", "echo $'\\x41'", "cat <<EOF\nx\nEOF", "bash -c 'eval \"rm -rf /\"'", "\"unterminated"} {
		f.Add(s)
	}
	p := defaultPolicy(f)
	f.Fuzz(func(t *testing.T, line string) {
		if d := p.Decide(context.Background(), shellInput(p, line)); d.Verdict == events.Allow {
			t.Fatalf("%q was allowed: %s", line, d.Reason)
		}
	})
}

// TestConstants: the constants package is evaluated once and its values
// used by the decision; a constant without a value (one that reads input,
// or fails) refuses the set instead of leaving the rules that read it
// undefined.
func TestConstants(t *testing.T) {
	ctx := context.Background()
	decision := "package toolbus\ndecision := {\"verdict\": \"DENY\", \"reason\": data.toolbus_constants.reason} if regex.match(data.toolbus_constants.pattern, input.args.x)\n" +
		"default decision := {\"verdict\": \"ALLOW\", \"reason\": \"no match\"}\n"
	p, err := Compile(ctx, Files{"p.rego": decision, "c.rego": "package toolbus_constants\npattern := concat(\"|\", [\"a\", \"b\"])\nreason := upper(\"matched\")\n"})
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(ctx, &Input{Args: map[string]any{"x": "b"}}); d.Verdict != events.Deny || d.Reason != "MATCHED" {
		t.Errorf("b: %s %s", d.Verdict, d.Reason)
	}
	if d := p.Decide(ctx, &Input{Args: map[string]any{"x": "c"}}); d.Verdict != events.Allow {
		t.Errorf("c: %s %s", d.Verdict, d.Reason)
	}
	for name, src := range map[string]string{
		"reads input": "package toolbus_constants\npattern := input.args.x\n",
		"fails":       "package toolbus_constants\npattern := concat(\"|\", [1])\n",
	} {
		if _, err := Compile(ctx, Files{"p.rego": decision, "c.rego": src}); err == nil {
			t.Errorf("a constant that %s was accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
