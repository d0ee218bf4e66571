package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/policy/shell"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
	"github.com/toolbus/toolbus/internal/testkit/sandboxwire"
)

// The differential fuzz target of issue 8: a remembered "always allow"
// must cover only what it names. Lines are asked of the default policy
// with a remembered set in place; a line the policy ALLOWs runs in real
// bash in the sandbox (sandbox_test.go), and every program it started must
// be one the set names. The policy's analysis and bash are two readings of
// the same line; the sandbox says which one is right.

// rememberedSets are the lines approved with "always" of the issue's
// "Done when": `ls` alone, then `git status` and `cat`. What the allowlist
// holds is what the policy's remember rule keeps of them.
var rememberedSets = [][]string{{"ls"}, {"git status", "cat"}}

// sandboxHome is the home the policy is told about; the sandbox has none.
const sandboxHome = "/home/agent"

// decideRemembered asks pol about line as the executor asks about a
// run_shell_command call in the sandbox's working directory, once the
// lines of approved have been answered "always", and returns the decision
// and the analysis the policy saw (for failure reports). With
// shellInput, it is the one place that knows the shape of the policy's
// input and of remembered entries.
func decideRemembered(tb testing.TB, pol *policy.Policy, line string, approved []string) (policy.Decision, any) {
	tb.Helper()
	in := shellInput(pol, line)
	in.Allowlist = rememberedEntries(tb, pol, approved)
	return pol.Decide(context.Background(), in), in.Shell
}

func shellInput(pol *policy.Policy, line string) *policy.Input {
	sh := shell.Analyze(line)
	return &policy.Input{
		Tool:      policy.ToolInput{Name: "run_shell_command", Kind: events.KindExecute, Source: events.SourceBuiltin},
		Args:      map[string]any{"command": line},
		Caller:    events.Identity{ID: "agent:fuzz"},
		Shell:     &sh,
		Paths:     sh.Locate(sandboxWorkdir, sandboxHome, pol.Samples()),
		Home:      sandboxHome,
		Workspace: sandboxWorkdir,
	}
}

// remembered caches the allowlist of each policy and approved set, per
// process.
var remembered struct {
	sync.Mutex
	entries map[rememberedKey][]policy.AllowEntry
}

type rememberedKey struct {
	pol      *policy.Policy
	approved string
}

// rememberedEntries is the allowlist after answering "always" to each
// line of approved: the entries the policy's remember rule makes of it.
func rememberedEntries(tb testing.TB, pol *policy.Policy, approved []string) []policy.AllowEntry {
	tb.Helper()
	remembered.Lock()
	defer remembered.Unlock()
	key := rememberedKey{pol, strings.Join(approved, "\n")}
	if e, ok := remembered.entries[key]; ok {
		return e
	}
	var entries []policy.AllowEntry
	for _, line := range approved {
		e, err := pol.Remember(context.Background(), shellInput(pol, line), events.ProceedAlways)
		if err != nil || len(e) == 0 {
			tb.Fatalf("answering %q with always remembers %v (%v)", line, e, err)
		}
		entries = append(entries, e...)
	}
	if remembered.entries == nil {
		remembered.entries = map[rememberedKey][]policy.AllowEntry{}
	}
	remembered.entries[key] = entries
	return entries
}

// defaultPolicyOnce is the embedded default policy, compiled once per
// test process (policytest).
func defaultPolicyOnce(tb testing.TB) *policy.Policy {
	tb.Helper()
	return policytest.Default(tb)
}

// uncovered returns the runs that no entry of remembered covers. A run is
// covered when the program that ran is the system's program of that name
// (not the workspace's ./ls), it was called by that name (argv[0]: not
// `exec -a ls touch`), and its arguments start with the entry's words
// after the first (`git status` covers `git status -s`, not `git log`).
// sudo and busybox runs that executed another program are covered: that
// program is judged on its own record.
func uncovered(runs []sandboxwire.Record, remembered []string) []sandboxwire.Record {
	var out []sandboxwire.Record
	for _, r := range runs {
		if r.Wraps == nil && !slices.ContainsFunc(remembered, func(p string) bool { return covers(strings.Fields(p), r) }) {
			out = append(out, r)
		}
	}
	return out
}

func covers(words []string, r sandboxwire.Record) bool {
	prog := r.Program()
	return len(words) > 0 && len(r.Argv) >= len(words) &&
		slices.Contains(systemDirs, path.Dir(prog)) && path.Base(prog) == words[0] &&
		path.Base(r.Argv[0]) == words[0] && slices.Equal(r.Argv[1:len(words)], words[1:])
}

// checkRemembered is the property: for every remembered set, a line the
// policy ALLOWs runs nothing the set does not cover. The line runs at most
// once, and only when some set ALLOWs it.
func checkRemembered(t *testing.T, pol *policy.Policy, sb *sandbox, line string) {
	t.Helper()
	for _, v := range violations(t, pol, sb, line) {
		t.Error(v)
	}
}

// violations returns what breaks the property for line, one message for
// each remembered set under which it breaks.
func violations(tb testing.TB, pol *policy.Policy, sb *sandbox, line string) []string {
	tb.Helper()
	var out []string
	var rep *sandboxwire.Report
	for _, set := range rememberedSets {
		d, analysis := decideRemembered(tb, pol, line, set)
		if d.Verdict != events.Allow {
			continue
		}
		if rep == nil {
			var err error
			if rep, err = sb.run(line); err != nil {
				tb.Fatalf("%q: %v", line, err)
			}
		}
		bad := uncovered(rep.Records, set)
		if len(bad) == 0 && rep.Garbled == 0 && rep.Dropped == 0 {
			continue
		}
		a, _ := json.Marshal(analysis)
		var ran strings.Builder
		for _, r := range bad {
			fmt.Fprintf(&ran, "\n\t%s", r)
		}
		if rep.Garbled+rep.Dropped > 0 {
			fmt.Fprintf(&ran, "\n\t(%d reports cut off and %d dropped: what ran is not known)", rep.Garbled, rep.Dropped)
		}
		out = append(out, fmt.Sprintf("with %q remembered the policy ALLOWs %q (%s), but bash ran what that does not cover:%s\nanalysis: %s\nbash: %s, stderr %q",
			set, line, d.Reason, ran.String(), a, rep.Exit, rep.Stderr))
	}
	return out
}

// TestDifferentialSeesWhatRuns holds the target to its job with a policy
// that ALLOWs every line: a line that runs touch beside ls breaks the
// property, and lines that run only what is remembered do not. Were the
// sandbox to record nothing, or the oracle to cover everything, the fuzz
// target would pass any policy; this test would not.
func TestDifferentialSeesWhatRuns(t *testing.T) {
	pol, err := policy.Compile(context.Background(), policy.Files{"open.rego": `package toolbus

decision := {"verdict": "ALLOW", "reason": "this test's policy allows everything", "remember": true}

remember contains {"scope": "tool", "tool": input.tool.name}
`})
	if err != nil {
		t.Fatal(err)
	}
	sb := defaultSandbox(t)
	for line, want := range map[string]int{
		"ls; touch P":          2, // under both sets
		"exec -a ls touch P":   2,
		"./ls":                 2,
		"git status; git log":  2,
		"ls":                   1, // under git status and cat
		"git status -s; cat P": 1, // under ls
		"true":                 0,
	} {
		if got := violations(t, pol, sb, line); len(got) != want {
			t.Errorf("%q breaks the property %d times, want %d: %q", line, len(got), want, got)
		}
	}
}

// FuzzRememberedCommand holds the property for raw lines (line, mutated
// byte by byte from the seeds) and for lines built from fuzzed choices
// among shell fragments (choices, see generateLine), which reach far more
// of bash's syntax than byte mutation does.
//
// The seeds include the lines issue 8 found: they fail until the shell
// analysis understands them, and `go test` runs them every time.
func FuzzRememberedCommand(f *testing.F) {
	for _, line := range rememberedSeeds {
		f.Add(line, []byte(nil))
	}
	for _, choices := range generatorSeeds {
		f.Add("", choices)
	}
	pol := defaultPolicyOnce(f)
	sb := defaultSandbox(f)
	f.Fuzz(func(t *testing.T, line string, choices []byte) {
		checkRemembered(t, pol, sb, line)
		if len(choices) > 0 {
			checkRemembered(t, pol, sb, generateLine(choices))
		}
	})
}

// rememberedSeeds are lines to mutate, each running or naming ls, git
// status or cat beside something else, in the shapes bash offers for
// hiding a command: wrappers and their options, assignments and
// arithmetic that expand, comments, here-documents, aliases, functions,
// spellings of a name, nested shells.
var rememberedSeeds = []string{
	// Plain lines a remembered set covers.
	"ls", "ls -la", "ls -la /toolbus-fuzz/work", "ls P", "ls -- -P", "git status", "git status --short", "cat P", "cat P | git status",
	// Wrappers and their options (issue 8).
	"exec -a ls touch P", "exec ls", "exec -c ls", "ls; exec touch P",
	"xargs -E ls touch P", "xargs ls", "ls | xargs touch", "xargs -a P ls", "xargs -I ls touch P", "xargs -0 -n 1 ls",
	"env -S 'touch P' ls", "env --split-string='touch P' ls", "env -u X ls", "env -uX ls", "env -C / ls", "env X=1 ls", "env -- ls", "env -i ls", "env -0 ls",
	"nice -n 5 ls", "nice -n5 ls", "nice --adjustment=5 ls", "nice -5 ls", "nice -n 5 touch P; ls",
	"timeout 5 ls", "timeout -s KILL 5 ls", "timeout -k 1 5 ls", "timeout --signal=KILL 5 ls", "timeout -s ls touch P", "timeout ls touch P", "timeout -v 5 ls",
	"nohup ls", "nohup touch P & ls",
	"stdbuf -o0 ls", "stdbuf -o L ls", "stdbuf -o ls touch P", "stdbuf --output=0 ls", "stdbuf -o0 touch P; ls",
	"sudo ls", "sudo -u root ls", "sudo -u ls touch P", "sudo -g ls touch P", "sudo -E ls", "sudo -- ls", "sudo -s ls", "sudo -i ls", "sudo -h ls", "sudo --user=root ls", "sudo -uroot ls",
	"busybox ls", "busybox ls; busybox touch P", "busybox sh -c 'touch P'; ls",
	"command ls", "command -p ls", "command -v ls", "command -- ls", "builtin ls", "time ls", "time -p ls", "! ls",
	// Statements the analysis does not see as commands (issue 8).
	"ls; x='a[$(touch P)]'; (( x ))", "ls; declare -a 'a=($(touch P))'", "ls; declare -a a='($(touch P))'",
	"ls; x='a[$(touch P)]'; : $((x))", "ls; x='a[$(touch P)]'; : ${a[x]}", "ls; x='a[$(touch P)]'; : ${y:x}",
	"ls; x='a[$(touch P)]'; [[ x -eq 0 ]]", "ls; [[ -v a[$(touch P)] ]]", "ls; test -v 'a[$(touch P)]'", "ls; [ -v 'a[$(touch P)]' ]",
	"ls; let 'x=a[$(touch P)]'", "ls $(( a[$(touch P)] ))", "ls; a=(); a[$(touch P)]=1", "ls; declare -i x; x='a[$(touch P)]'",
	"ls; printf -v 'a[$(touch P)]' x", "ls; read -r 'a[$(touch P)]' <<< x", "ls; mapfile -C touch -c 1 a <<< x",
	"ls; typeset -n r='a[$(touch P)]'; : $r", "ls; export x=$(touch P)", "ls; readonly x=$(touch P)", "ls; local x=$(touch P)",
	"ls; x='$(touch P)'; : ${x@P}", "ls; x='a[$(touch P)]'; : ${!x}", "x=$(touch P) ls", "X=`touch P` ls",
	"ls; unset 'a[$(touch P)]'", "ls; wait -n -p 'a[$(touch P)]'",
	// Comments and line continuations (issue 8: the parser and bash differ).
	"ls # \\\ntouch P", "ls #\\\ntouch P", "ls # x \\\ntouch P", "ls \\\n# x\ntouch P", "ls; #\\\n touch P",
	// Spellings of the name (issue 8: ./ls is the workspace's own program).
	"./ls", "/bin/ls", "/usr/bin/ls", "/usr/local/bin/ls", "/sbin/ls", "../work/ls", "/toolbus-fuzz/work/ls", "././ls",
	`l\s`, `"l"s`, `'l's`, `\ls`, `$'\x6cs'`, `$'\x74ouch' P; ls`, `\t"o"uch P; ls`, `l""s`, "ls; cd /bin && ./touch P", "ls; cd /; bin/touch P",
	// Expansions.
	"ls ${x:-$(touch P)}", "ls; ${x:-touch} P", `ls; "${x:-touch}" P`, "ls; ${x/y/touch} P", "ls; x=touch; $x P", "x=touch; ls; $x P", "ls ${!x}",
	"ls `touch P`", "ls \"`touch P`\"", "ls '$(touch P)'", "ls; : $(touch P)", "ls -la -- \"$(touch P)\"", "ls $(ls)", "ls; $(echo touch) P",
	// Brace expansion and globs.
	"{ls,-la}", "{rm,-rf,/}", "ls; {rm,-rf,/}", "ls; {touch,P}", "ls {,;touch,P}", "ls *", "ls .?*", "/bin/l? P", "/bin/[t]ouch P; ls", "/*/touc? P; ls",
	// Process substitution, coprocesses, pipes and here-documents.
	"ls <(touch P)", "ls >(touch P)", "cat <(ls)", "cat <(touch P)", "coproc ls", "coproc touch P; ls", "coproc x { touch P; }; ls",
	"ls <<EOF\n$(touch P)\nEOF", "ls <<'EOF'\n$(touch P)\nEOF", "ls <<< \"$(touch P)\"", "bash <<< 'touch P'; ls", "ls | bash", "ls | sh",
	"ls | touch P", "ls |& touch P", "ls && touch P", "ls || touch P", "ls\ntouch P", "ls;touch P", "ls & touch P", "ls & wait",
	// Functions, aliases, traps and the shell's own hooks.
	"ls; f() { touch P; }; f", "ls() { touch P; }; ls", "function ls { touch P; }; ls", "ls() { command ls; }; ls",
	"ls; alias ls=touch; ls P", "shopt -s expand_aliases; alias ls=touch\nls P", "shopt -s expand_aliases; alias x=touch; x P; ls",
	"trap 'touch P' EXIT; ls", "ls; trap 'touch P' EXIT", "trap 'touch P' DEBUG; ls", "ls; trap 'touch P' ERR; false",
	"PROMPT_COMMAND='touch P' ls", "BASH_ENV=P ls", "declare -f ls", "ls; enable -n echo; echo x", "ls; hash -p /bin/touch ls; ls",
	"ls; PATH=/usr/local/bin ls", "ls; PATH=. ls", "PATH=.:$PATH ls", "ls; cd /toolbus-fuzz/work; PATH=. ls",
	// Running a file the line writes, and nested shells.
	"echo 'touch P' > f; ls; . ./f", "echo 'touch P' > f; ls; source f", "ls > f; . ./f", "printf 'touch P' > f; ls; source f",
	"eval ls", "eval 'ls; touch P'", "ls; eval \"$(echo touch P)\"", "ls; eval 'a[$(touch P)]=1'",
	"bash -c ls", "bash -c 'ls; touch P'", "sh -c ls", "ls; bash -c -- 'touch P'", "bash -c -- 'ls'", "bash -lc ls", "bash -ec 'ls'",
	"find . -exec touch P \\;", "ls; find . -name x -exec touch {} +",
	// Control flow.
	"ls; case x in x) touch P;; esac", "ls; for i in 1; do touch P; done", "ls; if ls; then touch P; fi", "ls; until ls; do :; done",
	"ls; while false; do :; done", "ls; select x in a; do break; done", "ls; [ -e P ] || touch P", "(ls; touch P)", "{ ls; touch P; }",
	// Redirections.
	"ls > /tmp/x", "ls >> /outside/file", "ls 2>&1", "ls 2>/dev/null", "ls &>/dev/null", "ls < P", "ls; exec 3<>/dev/null",
	// The remembered git status and cat.
	"git -c alias.x='!touch P' x", "git status; git -c core.pager='touch P' log", "git status -c x", "git -C / status", "git status $(touch P)",
	"git status; git log", "cat P; touch P", "cat $(touch P)", "cat .env", "cat /etc/passwd", "git status | cat", "cat <(git log)",
	// Bombs and loops stop at the sandbox's limits.
	":(){ :|:& };:", "ls; :(){ :|:& };:", "ls; while :; do :; done", "ls; for i in {1..100}; do ls; done",
}

// generatorSeeds start the generator's choices: empty bytes choose the
// first (plainest) fragment everywhere.
var generatorSeeds = [][]byte{
	{0}, {0, 1, 2, 3, 4, 5, 6, 7}, {1, 1, 1, 1, 1, 1}, {2, 7, 3, 9, 1, 4, 0, 6}, {3, 0, 11, 5, 2, 8, 13},
	{4, 6, 2, 14, 1, 0, 3, 9, 12}, {5, 15, 4, 1, 2, 3, 7, 19, 23}, {6, 12, 13, 14, 15, 16, 17}, {255, 254, 253, 252, 251},
}
