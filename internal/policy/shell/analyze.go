// Package shell reads a bash command line the way the policy needs it
// read: every simple command it would run, wherever it hides, the files
// its words name, and every reason what runs may differ from what the
// analysis shows. It never runs the line; bash itself is only asked to
// parse it (see Analysis.CheckWithBash).
package shell

import (
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Analysis is what the policy learns about a shell line: every simple command
// in it, wherever it hides (after && or ;, in $(...), in a subshell, a
// pipeline, a function body, a nested `bash -c '...'`, `eval`, a here-string
// fed to a shell, or the -exec of find), the redirections, the functions it
// defines, and why the line may run more than its commands show. The policy
// judges each command, so an allowed first word cannot cover a dangerous
// second one.
//
// An Analysis is a value its caller owns: Locate and CheckWithBash change
// it, and it is not safe for concurrent use.
type Analysis struct {
	Commands  []Command  `json:"commands"`
	Redirects []Redirect `json:"redirects"`
	Functions []Function `json:"functions"`
	// ForkLoops are endless loops that start background processes, by
	// their source text: fork bombs without a function.
	ForkLoops []string `json:"forkLoops"`
	// Opaque says why what the line runs may differ from Commands:
	// assignments (PATH=..., for loops), arithmetic and [[ ]] (bash runs
	// $(...) found in array subscripts of variables' values), declare with
	// values, transforming parameter expansions, a wrapper option the
	// analyser does not model, a comment ending in a line continuation, a
	// line bash's own parser reads differently. A remembered approval never
	// covers such a line; a policy must not allow one on the strength of its
	// commands.
	Opaque []string `json:"opaque"`
	// ParseError is set when the line is not valid shell; the policy must
	// not allow what it cannot read.
	ParseError string `json:"parseError,omitempty"`

	line    string   // the source, for the check against bash's parser
	scripts []string // the scripts nested in it (bash -c, eval), likewise
	dirs    []string // directories set by wrappers (env -C)
	checked bool     // compared with bash's parser already
}

// Command is one simple command.
type Command struct {
	// Name is the base name of the program that runs: for
	// "sudo /bin/rm -rf /" it is "rm". Wrappers (sudo, env, nice, timeout,
	// xargs...) are looked through by their own option grammars.
	Name string `json:"name"`
	// Argv is what runs after the wrappers: the program as written
	// ("./ls" stays "./ls") and its arguments.
	Argv []string `json:"argv"`
	// Args are Argv without the program.
	Args []string `json:"args"`
	// Words are the command as written, wrappers included.
	Words []string `json:"words"`
	// Wrappers are the base names of the wrappers looked through, outermost
	// first.
	Wrappers []string `json:"wrappers"`
	// Text is the command's source text.
	Text string `json:"text"`
	// Literal is false when a word holds an expansion ($VAR, $(...),
	// $'...'); such words appear as their source text.
	Literal bool `json:"literal"`
	// Globs is set when an argument is a pattern bash replaces with the
	// names of matching files (*, ?, [...]).
	Globs bool `json:"globs"`
	// MoreArgs is set when the program gets arguments the line does not
	// show: xargs appends what it reads.
	MoreArgs bool `json:"moreArgs"`
	// Stdin is set when a here-document or here-string feeds the command.
	Stdin bool `json:"stdin"`
	// Paths are the arguments as the absolute paths they would name (in
	// every directory the line may run in), set by Locate.
	Paths     []string   `json:"paths"`
	Redirects []Redirect `json:"redirects"`
}

// Redirect is an output or input redirection.
type Redirect struct {
	Op     string `json:"op"`
	Target string `json:"target"`
	// Literal is false when the target holds an expansion.
	Literal bool `json:"literal"`
}

// Function is a shell function the line defines.
type Function struct {
	Name string `json:"name"`
	// Recursive is set when the function calls itself, directly or
	// through other functions of the line: the fork-bomb pattern
	// ":(){ :|:& };:".
	Recursive bool `json:"recursive"`
}

// maxNesting bounds `bash -c "bash -c ..."` recursion.
const maxNesting = 8

// Analyze parses line as bash and lists what it would run. It never fails:
// a line that is not valid shell has ParseError set, and one nested too
// deeply likewise.
func Analyze(line string) Analysis {
	s := Analysis{Commands: []Command{}, Redirects: []Redirect{}, Functions: []Function{}, ForkLoops: []string{}, Opaque: []string{}, line: line}
	a := &analyzer{s: &s, calls: map[string][]string{}}
	a.analyze(line, 0)
	s.Functions = a.functions()
	for _, c := range s.Commands {
		switch {
		case c.Name == "popd":
			a.opaque("popd goes back to a directory not known")
		case (c.Name == "cd" || c.Name == "pushd") && (!c.Literal || slices.Contains(c.Args, "-")):
			a.opaque("cd to a directory not known")
		}
	}
	if s.ParseError != "" {
		s.line = ""
	}
	return s
}

// analyzer is the state of one Analyze.
type analyzer struct {
	s *Analysis
	// calls maps each function the line defines to the names it calls.
	calls map[string][]string
	order []string
}

func (a *analyzer) opaque(reason string) {
	for _, r := range a.s.Opaque {
		if r == reason {
			return
		}
	}
	a.s.Opaque = append(a.s.Opaque, reason)
}

// analyze reads line, a script nested depth deep, into a.s. It is one
// switch over the nodes of the syntax tree, kept whole: its cases do not
// depend on one another, and in one place they list every construct that
// makes a line opaque.
func (a *analyzer) analyze(line string, depth int) {
	if depth > maxNesting {
		a.s.ParseError = "shell commands nested too deeply"
		return
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true)).Parse(strings.NewReader(line), "")
	if err != nil {
		if a.s.ParseError == "" {
			a.s.ParseError = err.Error()
		}
		return
	}
	src := line
	if depth > 0 {
		a.s.scripts = append(a.s.scripts, line)
	}
	// stdin holds, for commands at the end of a pipe, the script an
	// echo or printf at its start writes into it.
	stdin := map[*syntax.CallExpr]string{}
	syntax.Walk(file, func(node syntax.Node) bool {
		switch n := node.(type) {
		case *syntax.Stmt:
			a.stmt(src, n, stdin, depth)
		case *syntax.BinaryCmd:
			if _, ok := n.Y.Cmd.(*syntax.TimeClause); ok && (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) {
				// bash reads time as its keyword only where a pipeline
				// starts: after a pipe it is the program time (which
				// runs its arguments, and -o writes a file), while the
				// parser reads the keyword and no command at all.
				a.opaque("time after a pipe, a program the parser reads as bash's keyword")
			}
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				if script, ok := echoed(src, n.X); ok {
					if call, ok := n.Y.Cmd.(*syntax.CallExpr); ok {
						stdin[call] = script
					}
				}
			}
		case *syntax.FuncDecl:
			a.funcDecl(n)
		case *syntax.ForClause:
			switch n.Loop.(type) {
			case *syntax.WordIter:
				a.opaque("a for loop assigns a variable")
			case *syntax.CStyleLoop:
				a.opaque("arithmetic")
			}
			if l, ok := n.Loop.(*syntax.CStyleLoop); ok && l.Cond == nil && startsBackground(n.Do) {
				a.s.ForkLoops = append(a.s.ForkLoops, source(src, n))
			}
		case *syntax.WhileClause:
			if endless(n) && startsBackground(n.Do) {
				a.s.ForkLoops = append(a.s.ForkLoops, source(src, n))
			}
		case *syntax.ArithmCmd, *syntax.ArithmExp, *syntax.LetClause:
			a.opaque("arithmetic")
		case *syntax.TestClause:
			a.opaque("[[ ]]")
		case *syntax.CoprocClause:
			a.opaque("coproc assigns variables")
		case *syntax.ParamExp:
			if !simpleParam(n) {
				a.opaque("a parameter expansion that transforms its value")
			}
		case *syntax.Assign:
			if !harmlessDeclArg(n) {
				a.opaque("an assignment")
			}
		case *syntax.Comment:
			if strings.HasSuffix(n.Text, `\`) {
				a.opaque("a comment that ends in a line continuation")
			}
		case *syntax.ExtGlob, *syntax.ProcSubst:
		}
		return true
	})
}

// stmt takes one statement: its redirections and, for a simple command or
// a declare clause, the command.
func (a *analyzer) stmt(src string, n *syntax.Stmt, stdin map[*syntax.CallExpr]string, depth int) {
	redirs, fed := a.redirects(src, n.Redirs)
	a.s.Redirects = append(a.s.Redirects, redirs...)
	switch cmd := n.Cmd.(type) {
	case *syntax.CallExpr:
		if len(cmd.Args) == 0 {
			return // assignments alone: the Assign nodes say so
		}
		c, nested := a.command(src, cmd)
		c.Redirects = redirs
		c.Stdin = fed != nil
		a.s.Commands = append(a.s.Commands, c)
		for _, n := range nested {
			a.s.Commands = append(a.s.Commands, n)
		}
		a.script(src, c, fed, stdin[cmd], depth)
	case *syntax.DeclClause:
		words := []string{cmd.Variant.Value}
		for _, as := range cmd.Args {
			words = append(words, source(src, as))
		}
		a.s.Commands = append(a.s.Commands, Command{Name: cmd.Variant.Value, Argv: words, Args: words[1:], Words: words,
			Wrappers: []string{}, Text: source(src, cmd), Literal: false, Redirects: redirs, Paths: []string{}})
	}
}

// script analyses what a command runs as a script: the string of
// `bash -c`, the words of eval, the here-string or here-document or piped
// echo fed to a shell that reads its standard input.
func (a *analyzer) script(src string, c Command, fed *syntax.Redirect, piped string, depth int) {
	switch {
	case isShell(c.Name):
		script, mode := shellScript(c.Args)
		switch mode {
		case scriptArg:
			if script.literal {
				a.analyze(script.value, depth+1)
			} else {
				a.opaque("a shell runs a script that is not literal")
			}
		case scriptFile:
			a.opaque("a shell runs a script file")
		case scriptStdin:
			switch {
			case fed != nil:
				text, ok := hereText(src, fed)
				if !ok {
					a.opaque("a shell reads a here-document with expansions")
				}
				a.analyze(text, depth+1)
			case piped != "":
				a.analyze(piped, depth+1)
			default:
				a.opaque("a shell reads its script from standard input")
			}
		case scriptUnknown:
			a.opaque("a shell option the analyser does not model")
		}
	case c.Name == "eval":
		if !c.Literal {
			a.opaque("eval of words that are not literal")
			return
		}
		a.analyze(strings.Join(c.Args, " "), depth+1)
	case c.Name == "source" || c.Name == ".":
		a.opaque("a script file is sourced")
	}
}

// command builds one simple command, looking through wrappers; nested are
// the commands it runs through its arguments (find -exec).
func (a *analyzer) command(src string, call *syntax.CallExpr) (Command, []Command) {
	c := Command{Literal: true, Text: source(src, call), Words: make([]string, 0, len(call.Args)), Wrappers: []string{}, Paths: []string{}}
	for _, w := range call.Args {
		for _, v := range a.expandWord(src, w) {
			c.Literal = c.Literal && v.literal
			c.Globs = c.Globs || v.glob
			c.Words = append(c.Words, v.value)
		}
	}
	a.unwrap(&c)
	var nested []Command
	if c.Name == "find" {
		nested = findExec(c)
	}
	return c, nested
}

// funcDecl records a function and the names its body calls.
func (a *analyzer) funcDecl(fn *syntax.FuncDecl) {
	name := funcName(fn)
	if _, seen := a.calls[name]; !seen {
		a.order = append(a.order, name)
	}
	var called []string
	if fn.Body != nil {
		syntax.Walk(fn.Body, func(node syntax.Node) bool {
			if call, ok := node.(*syntax.CallExpr); ok && len(call.Args) > 0 {
				w := call.Args[0]
				if lit := w.Lit(); lit != "" {
					called = append(called, lit)
				} else if selfName(w) {
					called = append(called, name)
				}
			}
			return true
		})
	}
	a.calls[name] = append(a.calls[name], called...)
}

// selfName reports whether w is $FUNCNAME (or ${FUNCNAME}, ${FUNCNAME[0]},
// quoted or not): the running function's own name.
func selfName(w *syntax.Word) bool {
	parts := w.Parts
	if len(parts) == 1 {
		if dq, ok := parts[0].(*syntax.DblQuoted); ok {
			parts = dq.Parts
		}
	}
	if len(parts) != 1 {
		return false
	}
	pe, ok := parts[0].(*syntax.ParamExp)
	return ok && pe.Param != nil && pe.Param.Value == "FUNCNAME"
}

// functions lists the line's functions, each marked recursive when it can
// reach itself through the calls of the line's functions.
func (a *analyzer) functions() []Function {
	out := make([]Function, 0, len(a.order))
	for _, name := range a.order {
		out = append(out, Function{Name: name, Recursive: a.reaches(name, name, map[string]bool{})})
	}
	return out
}

func (a *analyzer) reaches(from, target string, seen map[string]bool) bool {
	for _, c := range a.calls[from] {
		if c == target && target != "" {
			return true
		}
		if _, isFunc := a.calls[c]; isFunc && !seen[c] {
			seen[c] = true
			if a.reaches(c, target, seen) {
				return true
			}
		}
	}
	return false
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

// endless reports whether a while loop's condition is always true
// (`while true`, `while :`, `until false`).
func endless(w *syntax.WhileClause) bool {
	if len(w.Cond) != 1 {
		return false
	}
	call, ok := w.Cond[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) != 1 || w.Cond[0].Negated {
		return false
	}
	switch call.Args[0].Lit() {
	case "true", ":":
		return !w.Until
	case "false":
		return w.Until
	}
	return false
}

// startsBackground reports whether stmts start a process in the
// background, at any depth.
func startsBackground(stmts []*syntax.Stmt) bool {
	found := false
	for _, st := range stmts {
		syntax.Walk(st, func(node syntax.Node) bool {
			if s, ok := node.(*syntax.Stmt); ok && (s.Background || s.Coprocess) {
				found = true
			}
			return !found
		})
	}
	return found
}

// simpleParam reports whether p only expands a name: $x, ${x}, $1, $@.
func simpleParam(p *syntax.ParamExp) bool {
	return p.Param != nil && !p.Excl && !p.Length && !p.Width && !p.IsSet && p.Index == nil &&
		p.Slice == nil && p.Repl == nil && p.Names == 0 && p.Exp == nil && p.NestedParam == nil &&
		len(p.Modifiers) == 0 && p.Flags == nil
}

// harmlessDeclArg reports whether an Assign node is not an assignment at
// all: an option of declare/export/local (-r), or a bare name (export X).
func harmlessDeclArg(as *syntax.Assign) bool {
	if !as.Naked || as.Index != nil || as.Array != nil {
		return false
	}
	if as.Name != nil {
		return as.Value == nil
	}
	v := as.Value.Lit()
	return strings.HasPrefix(v, "-") && !strings.ContainsAny(v, "=[$`")
}

// echoed returns the script an `echo` or `printf` with literal arguments
// writes, when st is one.
func echoed(src string, st *syntax.Stmt) (string, bool) {
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) < 2 || len(call.Assigns) > 0 {
		return "", false
	}
	name := path.Base(call.Args[0].Lit())
	if name != "echo" && name != "printf" {
		return "", false
	}
	var words []string
	for _, w := range call.Args[1:] {
		v := evalWord(src, w)
		if !v.literal {
			return "", false
		}
		if name == "echo" && len(words) == 0 && strings.HasPrefix(v.value, "-") {
			continue // echo -e, -n
		}
		words = append(words, v.value)
	}
	return strings.Join(words, " "), true
}

func source(src string, n syntax.Node) string {
	start, end := int(n.Pos().Offset()), int(n.End().Offset())
	if start < 0 || end > len(src) || start > end {
		return ""
	}
	return src[start:end]
}
