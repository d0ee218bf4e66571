package policy_test

import "strings"

// generateLine builds a shell line from fuzzed choices among fragments of
// bash syntax: statements joined by separators, each a command (a name
// spelt one of many ways, maybe behind a wrapper, with arguments and
// redirections) or a compound, an assignment, an expansion or a hook that
// can run a command. Every choice reads one byte; when the bytes run out
// every choice is the first fragment, so a short input gives a short,
// plain line. Most names are ls, git status or cat, so that the policy
// ALLOWs often enough for the sandbox to judge.
func generateLine(choices []byte) string {
	g := &generator{choices: choices}
	var b strings.Builder
	for i, n := 0, 1+g.pick(4); i < n; i++ {
		if i > 0 {
			b.WriteString(g.from(separators))
		}
		b.WriteString(g.statement(0))
	}
	return b.String()
}

type generator struct {
	choices []byte
	next    int
}

// pick reads one choice in [0, n).
func (g *generator) pick(n int) int {
	if g.next >= len(g.choices) {
		return 0
	}
	c := int(g.choices[g.next]) % n
	g.next++
	return c
}

func (g *generator) from(list []string) string { return list[g.pick(len(list))] }

func (g *generator) statement(depth int) string {
	if depth > 2 {
		return g.command()
	}
	inner := func() string { return g.statement(depth + 1) }
	switch g.pick(20) {
	case 0, 1, 2, 3, 4, 5, 6:
		return g.command()
	case 7:
		return "( " + inner() + " )"
	case 8:
		return "{ " + inner() + "; }"
	case 9:
		return "if " + inner() + "; then " + inner() + "; fi"
	case 10:
		return g.from([]string{"for x in a b; do ", "while false; do ", "until true; do ", "select x in a; do "}) + inner() + "; break; done"
	case 11:
		return g.from(hiddenStatements)
	case 12:
		return inner() + " " + g.from(comments)
	case 13:
		return g.from(lineRunners) + shellQuote(inner()) + g.from(lineRunnerEnds)
	case 14:
		return g.command() + " <<" + g.from([]string{"EOF", "'EOF'", "-EOF", `"EOF"`}) + "\n" + g.from(heredocBodies) + "\nEOF"
	case 15:
		return g.from(assignments) + " " + g.command()
	case 16:
		return g.from(funcNames) + "() { " + inner() + "; }; " + g.command()
	case 17:
		return "case x in x) " + inner() + ";; esac"
	case 18:
		return g.from(setups) + "; " + inner()
	default:
		return "$(" + inner() + ")"
	}
}

func (g *generator) command() string {
	var b strings.Builder
	if g.pick(3) == 1 {
		b.WriteString(g.from(wrappers))
		b.WriteByte(' ')
	}
	b.WriteString(g.from(commandNames))
	for i, n := 0, g.pick(4); i < n; i++ {
		b.WriteByte(' ')
		b.WriteString(g.from(arguments))
	}
	if g.pick(4) == 1 {
		b.WriteByte(' ')
		b.WriteString(g.from(redirections))
	}
	return b.String()
}

// shellQuote quotes s in single quotes for bash.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var separators = []string{"; ", " && ", " || ", " | ", "\n", " & ", " |& ", ";", " ;; ", "\n\n"}

var commandNames = []string{
	"ls", "ls", "ls", "git status", "cat", "ls -la", "cat P", "git status -s",
	`l\s`, `"l"s`, `'l's`, `\ls`, `$'\x6cs'`, "/bin/ls", "/usr/bin/ls", "./ls", "../work/ls", "../toolbus-fuzz/work/ls", "${x:-ls}", "$(echo ls)", "`echo ls`", "l*", "{ls,}",
	"touch P", "touch", "git", "git -c alias.x='!touch P' x", "git log", "rm -rf /", "{rm,-rf,/}", "echo", "printf", "true", ":", "x", "f",
	"eval", "source", ".", "exec", "command", "builtin", "enable", "alias", "trap", "declare", "let", "read", "mapfile", "printf -v", "hash",
	"bash -c", "sh -c", "xargs", "find . -exec", "env", "sudo", "busybox", "nice", "timeout 1", "stdbuf -o0", "nohup", "coproc", "time", "!",
}

var wrappers = []string{
	"exec -a ls", "exec", "exec -c", "env", "env -S 'touch P'", "env -u X", "env X=1", "env -i", "env -C /", "env --",
	"nice", "nice -n 5", "nice -5", "timeout 5", "timeout -s KILL 5", "timeout -k 1 5", "stdbuf -o0", "stdbuf -o", "xargs", "xargs -E ls",
	"xargs -I ls", "sudo", "sudo -u root", "sudo -u ls", "sudo -s", "busybox", "command", "command -p", "builtin", "nohup", "time", "!", "coproc",
}

var arguments = []string{
	"-la", "P", "status", "--", "-s", "$(touch P)", "`touch P`", "'a[$(touch P)]'", `"$x"`, "${x:-touch}", "${!x}", "$((a[$(touch P)]))",
	"*", "?", "[t]ouch", "{a,b}", "{touch,P}", "{,;touch,P}", "<(touch P)", ">(touch P)", "-exec touch {} \\;", ".", "/", "~", "~root",
	`\#`, "'#'", "#", "# \\", `a\ b`, `"a b"`, "$'\\x74ouch'", "-c", "'touch P'", "touch", "-e", "ls", "x=1", "-u", "--split-string=touch",
	"&& touch P", "; touch P", "| touch P", "\\\ntouch P", "$x", "${x@P}", "${a[$(touch P)]}", "P=1",
}

var redirections = []string{
	"> f", ">> f", "2>&1", "< /dev/null", "<<< 'touch P'", "> /tmp/x", ">/outside/file", "&> /dev/null", "< <(touch P)", "> >(touch P)",
	"3<> f", ">&-", "<&-", "2> >(touch P)",
}

var hiddenStatements = []string{
	"x='a[$(touch P)]'; (( x ))", "declare -a 'a=($(touch P))'", "let 'x=a[$(touch P)]'", "[[ -v a[$(touch P)] ]]", "test -v 'a[$(touch P)]'",
	"(( a[$(touch P)] ))", ": $(( a[$(touch P)] ))", "a[$(touch P)]=1", "printf -v 'a[$(touch P)]' x", "read -r 'a[$(touch P)]' <<< x",
	"mapfile -C touch -c 1 a <<< x", "x='$(touch P)'; : ${x@P}", "typeset -n r='a[$(touch P)]'; : $r", "export x=$(touch P)", "x=touch; $x P",
	"declare -i x; x='a[$(touch P)]'", "unset 'a[$(touch P)]'", "[[ $(touch P) ]]", "x=$(touch P)", "readonly y=`touch P`",
}

var comments = []string{"# x", "# \\\ntouch P", "#\\\ntouch P", "# ls", "#", "# 'x", "# $(touch P)"}

var lineRunners = []string{"eval ", "bash -c ", "sh -c ", "trap ", "bash -c -- ", "bash <<< ", "busybox sh -c ", "env -S ", "sudo -s ", "xargs -a /dev/null "}

var lineRunnerEnds = []string{"", " EXIT", " x", " ls", " DEBUG"}

var heredocBodies = []string{"x", "$(touch P)", "`touch P`", "touch P", "$((a[$(touch P)]))", "${x:-$(touch P)}"}

var assignments = []string{
	"x=1", "X=`touch P`", "x=$(touch P)", "PATH=.", "PATH=/usr/local/bin", "BASH_ENV=f", "PROMPT_COMMAND='touch P'", "IFS=s", "a[$(touch P)]=1",
	"LD_PRELOAD=/x", "GIT_DIR=/", "GIT_CONFIG_PARAMETERS=\"'alias.status=!touch P'\"", "SHELLOPTS=xtrace", "PS4='$(touch P)'",
}

var funcNames = []string{"f", "ls", "cat", "git", "command", "exec", "echo"}

var setups = []string{
	"shopt -s expand_aliases; alias ls=touch", "shopt -s expand_aliases; alias x=touch", "alias ls=touch", "enable -n echo", "hash -p /bin/touch ls",
	"trap 'touch P' EXIT", "trap 'touch P' DEBUG", "set -T; trap 'touch P' RETURN", "echo 'touch P' > f", "cd /bin", "cd /", "PATH=.", "set -x; PS4='$(touch P)'",
	"set -o vi", "shopt -s extdebug", "declare -f ls", "x=touch",
}
