package policy

import (
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Shell is what the policy learns about a shell line: every simple command
// in it, wherever it hides (after && or ;, in $(...), in a subshell, a
// pipeline, a function body, or a nested `bash -c '...'` or `eval`), the
// redirections, and the functions it defines. The policy judges each
// command, so an allowed first word cannot cover a dangerous second one.
type Shell struct {
	Commands  []Command  `json:"commands"`
	Redirects []Redirect `json:"redirects"`
	Functions []Function `json:"functions"`
	// ParseError is set when the line is not valid shell; the policy must
	// not allow what it cannot read.
	ParseError string `json:"parseError,omitempty"`
}

// Command is one simple command.
type Command struct {
	// Name is the effective command, as a base name: for
	// "sudo /bin/rm -rf /" it is "rm". Wrappers (sudo, env, nice, timeout,
	// xargs...) are looked through.
	Name string `json:"name"`
	// Args are the effective command's arguments.
	Args []string `json:"args"`
	// Argv is the command as written, wrappers included.
	Argv []string `json:"argv"`
	// Text is the command's source text.
	Text string `json:"text"`
	// Literal is false when a word holds an expansion ($VAR, $(...)); such
	// words appear in Argv as their source text.
	Literal   bool       `json:"literal"`
	Redirects []Redirect `json:"redirects"`
}

// Redirect is an output or input redirection.
type Redirect struct {
	Op     string `json:"op"`
	Target string `json:"target"`
}

// Function is a shell function the line defines.
type Function struct {
	Name string `json:"name"`
	// Recursive is set when the function calls itself: the fork-bomb
	// pattern ":(){ :|:& };:".
	Recursive bool `json:"recursive"`
}

// maxNesting bounds `bash -c "bash -c ..."` recursion.
const maxNesting = 8

// AnalyzeShell parses line as bash and lists what it would run.
func AnalyzeShell(line string) Shell {
	s := Shell{Commands: []Command{}, Redirects: []Redirect{}, Functions: []Function{}}
	analyze(line, &s, 0)
	return s
}

func analyze(line string, s *Shell, depth int) {
	if depth > maxNesting {
		s.ParseError = "shell commands nested too deeply"
		return
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil {
		s.ParseError = err.Error()
		return
	}
	syntax.Walk(file, func(node syntax.Node) bool {
		switch n := node.(type) {
		case *syntax.Stmt:
			redirs := redirects(line, n.Redirs)
			s.Redirects = append(s.Redirects, redirs...)
			if call, ok := n.Cmd.(*syntax.CallExpr); ok && len(call.Args) > 0 {
				c := command(line, call)
				c.Redirects = redirs
				s.Commands = append(s.Commands, c)
				nested(c, s, depth)
			}
		case *syntax.FuncDecl:
			s.Functions = append(s.Functions, Function{Name: funcName(n), Recursive: callsItself(n)})
		}
		return true
	})
}

// nested analyses the script a command runs: bash -c 'script', eval words.
func nested(c Command, s *Shell, depth int) {
	switch c.Name {
	case "sh", "bash", "zsh", "dash", "ksh", "ash":
		for i, a := range c.Args {
			if strings.HasPrefix(a, "-") && strings.Contains(a, "c") && !strings.HasPrefix(a, "--") && i+1 < len(c.Args) {
				analyze(c.Args[i+1], s, depth+1)
				return
			}
		}
	case "eval":
		analyze(strings.Join(c.Args, " "), s, depth+1)
	}
}

func command(src string, call *syntax.CallExpr) Command {
	c := Command{Literal: true, Text: source(src, call), Argv: make([]string, 0, len(call.Args))}
	for _, w := range call.Args {
		v, lit := word(src, w)
		c.Literal = c.Literal && lit
		c.Argv = append(c.Argv, v)
	}
	eff := unwrap(c.Argv)
	if len(eff) > 0 {
		c.Name = path.Base(eff[0])
		c.Args = eff[1:]
	}
	if c.Args == nil {
		c.Args = []string{}
	}
	return c
}

// unwrap looks through commands that run another command.
func unwrap(argv []string) []string {
	for len(argv) > 0 {
		skipValue := map[string]bool{}
		switch path.Base(argv[0]) {
		case "sudo", "doas":
			skipValue = map[string]bool{"-u": true, "-g": true, "-C": true, "-h": true, "-p": true, "-r": true, "-t": true}
		case "nice", "ionice":
			skipValue = map[string]bool{"-n": true, "-c": true}
		case "nohup", "time", "command", "builtin", "exec", "stdbuf", "xargs", "busybox":
		case "env":
			skipValue = map[string]bool{"-u": true, "-C": true, "-S": true}
		case "timeout":
			skipValue = map[string]bool{"-s": true, "-k": true}
		default:
			return argv
		}
		name := path.Base(argv[0])
		argv = argv[1:]
		for len(argv) > 0 {
			a := argv[0]
			switch {
			case skipValue[a] && len(argv) > 1:
				argv = argv[2:]
			case strings.HasPrefix(a, "-"):
				argv = argv[1:]
			case name == "env" && strings.Contains(a, "="):
				argv = argv[1:]
			default:
				goto done
			}
		}
	done:
		if name == "timeout" && len(argv) > 0 {
			argv = argv[1:] // the duration
		}
	}
	return argv
}

// word returns a word's value when it is literal, else its source text.
func word(src string, w *syntax.Word) (string, bool) {
	var b strings.Builder
	if !literalParts(&b, w.Parts) {
		return source(src, w), false
	}
	return b.String(), true
}

// literalParts writes the value bash gives a word made only of literal
// text and quotes: quotes removed and backslash escapes undone, so `\rm`
// and `r\m` are rm as `"rm"` is. $'...' (ANSI-C escapes) is not taken as
// literal.
func literalParts(b *strings.Builder, parts []syntax.WordPart) bool {
	return literalIn(b, parts, false)
}

func literalIn(b *strings.Builder, parts []syntax.WordPart, inDouble bool) bool {
	for _, p := range parts {
		switch p := p.(type) {
		case *syntax.Lit:
			unescape(b, p.Value, inDouble)
		case *syntax.SglQuoted:
			if p.Dollar {
				return false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar || !literalIn(b, p.Parts, true) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// unescape undoes bash's backslash escapes in unquoted text, or in text
// inside double quotes, where only $ ` " \ and a newline are escaped.
func unescape(b *strings.Builder, s string, inDouble bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		next := s[i+1]
		switch {
		case next == '\n': // a line continuation disappears
			i++
		case !inDouble || strings.IndexByte("$`\"\\", next) >= 0:
			b.WriteByte(next)
			i++
		default:
			b.WriteByte(c)
		}
	}
}

func redirects(src string, rs []*syntax.Redirect) []Redirect {
	out := make([]Redirect, 0, len(rs))
	for _, r := range rs {
		if r.Word == nil {
			continue
		}
		target, _ := word(src, r.Word)
		out = append(out, Redirect{Op: r.Op.String(), Target: target})
	}
	return out
}

// funcName is a function's name; empty for an anonymous one, which the
// parser accepts even for bash (`()(...)`).
func funcName(fn *syntax.FuncDecl) string {
	switch {
	case fn.Name != nil:
		return fn.Name.Value
	case len(fn.Names) > 0 && fn.Names[0] != nil:
		return fn.Names[0].Value
	}
	return ""
}

func callsItself(fn *syntax.FuncDecl) bool {
	name := funcName(fn)
	if name == "" || fn.Body == nil {
		return false
	}
	found := false
	syntax.Walk(fn.Body, func(node syntax.Node) bool {
		if call, ok := node.(*syntax.CallExpr); ok && len(call.Args) > 0 && call.Args[0].Lit() == name {
			found = true
		}
		return !found
	})
	return found
}

func source(src string, n syntax.Node) string {
	start, end := int(n.Pos().Offset()), int(n.End().Offset())
	if start < 0 || end > len(src) || start > end {
		return ""
	}
	return src[start:end]
}

// Paths lists the words of the line that name files: redirection targets,
// and literal arguments that look like paths ("/x", "./x", "~/x", "a/b",
// ".env"), with "~" expanded to home and relative paths joined to dir.
func (s Shell) Paths(dir, home string) []string { return s.paths(dir, home, false) }

// Words lists every argument and redirection target of the line as the
// path it would name if it were a file (flags and URLs aside), for looking
// for symbolic links: `cat notes.txt` names a file though the word does
// not look like a path.
func (s Shell) Words(dir, home string) []string { return s.paths(dir, home, true) }

func (s Shell) paths(dir, home string, every bool) []string {
	var out []string
	add := func(w string, always bool) {
		if every && !always && strings.HasPrefix(w, "-") {
			return // a flag
		}
		if p, ok := pathOf(w, dir, home, always || every); ok && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, c := range s.Commands {
		for _, a := range c.Args {
			if i := strings.IndexByte(a, '='); i > 0 && strings.HasPrefix(a, "-") || strings.HasPrefix(a, "of=") || strings.HasPrefix(a, "if=") {
				a = a[i+1:] // --file=x, of=/dev/sda
			}
			add(a, false)
		}
	}
	for _, r := range s.Redirects {
		if r.Op != ">&" && r.Op != "<&" { // those name file descriptors
			add(r.Target, true)
		}
	}
	return out
}

// pathOf resolves w as a path if it looks like one, or always if told so.
func pathOf(w, dir, home string, always bool) (string, bool) {
	if w == "" || strings.HasPrefix(w, "-") && !always || strings.Contains(w, "://") {
		return "", false
	}
	looks := strings.ContainsRune(w, '/') || strings.HasPrefix(w, "~") || strings.HasPrefix(w, ".")
	if !looks && !always {
		return "", false
	}
	switch {
	case w == "~":
		w = home
	case strings.HasPrefix(w, "~/"):
		w = home + w[1:]
	case strings.HasPrefix(w, "~"):
		return "", false // ~user: not resolvable here
	}
	if !path.IsAbs(w) {
		w = path.Join(dir, w)
	}
	return path.Clean(w), true
}
