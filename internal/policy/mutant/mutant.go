// Package mutant breaks a Rego policy set on purpose, one change at a time,
// and runs the set's own tests against each broken copy. A change no test
// notices is a property of the policy that nothing holds in place.
//
// The changes (mutants) are deletions: each rule body (the rule made to
// never hold, or a default removed), each expression of each body (a
// comparison, a membership, a negation), each entry of a set or array
// literal (the lists a policy team edits, the parts of a concat), and
// each alternative of a regular expression written as a literal string.
// An every is also read as some, the mistake a table test with one item
// cannot see. The arguments of sprintf are left alone: they make reasons,
// not verdicts.
package mutant

import (
	"context"
	"fmt"
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/toolbus/toolbus/internal/policy"
)

// Mutant is one change to one module of a policy set.
type Mutant struct {
	// File is the module's file name.
	File string
	// Line is where the changed part starts.
	Line int
	// Key names the change without line numbers, so that a list of
	// equivalent mutants survives edits elsewhere in the file:
	// "shell.rego: remember_never: delete entry \"awk\"".
	Key string

	index int
}

func (m Mutant) String() string { return fmt.Sprintf("%s:%d: %s", m.File, m.Line, m.Key) }

// Set is a parsed policy set: its modules under test and its test modules.
type Set struct {
	modules map[string]*ast.Module
	tests   map[string]*ast.Module

	// killers are the tests that failed on the latest mutants, the
	// latest first, at most maxKillers: Run tries them first, as a few
	// table tests kill most mutants, and running every test of the set
	// until one fails takes several times longer.
	mu      sync.Mutex
	killers []string
}

// maxKillers bounds the tests Run tries before the whole set.
const maxKillers = 12

// Parse reads a policy set, file name → Rego source. Files ending in
// _test.rego are its tests and are never mutated.
func Parse(files map[string]string) (*Set, error) {
	s := &Set{modules: map[string]*ast.Module{}, tests: map[string]*ast.Module{}}
	for name, src := range files {
		if !strings.HasSuffix(name, ".rego") {
			continue
		}
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, fmt.Errorf("mutant: parse %s: %w", name, err)
		}
		if strings.HasSuffix(name, "_test.rego") {
			s.tests[name] = m
		} else {
			s.modules[name] = m
		}
	}
	return s, nil
}

// Mutants lists every change the set's modules allow, in a fixed order.
func (s *Set) Mutants() []Mutant {
	var out []Mutant
	for _, name := range sortedKeys(s.modules) {
		seen := map[string]int{}
		for i, p := range points(s.modules[name].Copy()) {
			key := name + ": " + p.key
			seen[key]++
			if n := seen[key]; n > 1 {
				key = fmt.Sprintf("%s (#%d)", key, n)
			}
			out = append(out, Mutant{File: name, Line: p.line, Key: key, index: i})
		}
	}
	return out
}

// Result is what the tests made of one mutant.
type Result struct {
	// Killed: a test failed or errored, or the set no longer compiles.
	Killed bool
	// Failed names the first test that failed, or the compile error.
	Failed string
	// Compile says the mutant was killed by not compiling, not by a test.
	Compile bool
}

// Run applies m to a copy of the set and runs its tests, stopping at the
// first failure: first those that failed on the latest mutants, then, if
// none fails, all of them. It is safe for concurrent use.
func (s *Set) Run(ctx context.Context, m Mutant) (Result, error) {
	if killers := s.latestKillers(); len(killers) > 0 {
		quoted := make([]string, len(killers))
		for i, k := range killers {
			quoted[i] = regexp.QuoteMeta(k)
		}
		res, err := s.run(ctx, m, "^("+strings.Join(quoted, "|")+")$")
		if err != nil || res.Killed {
			s.killedBy(res)
			return res, err
		}
	}
	res, err := s.run(ctx, m, "")
	s.killedBy(res)
	return res, err
}

// run applies m to a fresh copy of the set and runs the tests whose full
// name (data.PACKAGE.NAME) filter matches, every test when it is "".
func (s *Set) run(ctx context.Context, m Mutant, filter string) (Result, error) {
	mods := map[string]*ast.Module{}
	for name, mod := range s.tests {
		mods[name] = mod.Copy()
	}
	for name, mod := range s.modules {
		mods[name] = mod.Copy()
	}
	pts := points(mods[m.File])
	if m.index >= len(pts) {
		return Result{}, fmt.Errorf("mutant: %s: no such change", m)
	}
	pts[m.index].apply()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A test case gets the time the executor gives one
	// (policy.TestCaseTimeout), not OPA's default of 5 s: on a loaded host a
	// test that passes ran out of those, and its mutant counted as
	// killed by it. One that never ends is still stopped.
	ch, err := tester.NewRunner().SetModules(mods).SetDefaultRegoVersion(ast.RegoV1).RaiseBuiltinErrors(true).SetTimeout(policy.TestCaseTimeout).Filter(filter).RunTests(ctx, nil)
	if err != nil {
		return Result{Killed: true, Compile: true, Failed: firstLine(err.Error())}, nil
	}
	res := Result{}
	for r := range ch {
		if res.Killed || r.Skip {
			continue
		}
		if r.Error != nil || r.Fail {
			res = Result{Killed: true, Failed: r.Package + "." + r.Name}
			cancel()
		}
	}
	if !res.Killed && ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	return res, nil
}

// latestKillers is a copy of s.killers.
func (s *Set) latestKillers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.killers...)
}

// killedBy puts the test that killed a mutant first among s.killers.
func (s *Set) killedBy(res Result) {
	if !res.Killed || res.Compile {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := []string{res.Failed}
	for _, name := range s.killers {
		if name != res.Failed && len(k) < maxKillers {
			k = append(k, name)
		}
	}
	s.killers = k
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// point is one change to a module, bound to that module's nodes.
type point struct {
	key   string
	line  int
	apply func()
}

// points lists the changes of mod in a fixed order. Run finds a mutant
// again by its index in the points of a fresh copy, so the order must
// depend on the module alone.
func points(mod *ast.Module) []point {
	var out []point
	add := func(key string, loc *ast.Location, apply func()) {
		line := 0
		if loc != nil {
			line = loc.Row
		}
		out = append(out, point{key: key, line: line, apply: apply})
	}
	for ri, rule := range mod.Rules {
		name := rule.Head.Ref().String()
		if len(rule.Head.Args) > 0 {
			name += "(" + strings.TrimPrefix(strings.TrimSuffix(rule.Head.Args.String(), ")"), "(") + ")"
		}
		if rule.Default {
			add(name+": delete the default", rule.Location, func() {
				mod.Rules = append(mod.Rules[:ri:ri], mod.Rules[ri+1:]...)
			})
			continue
		}
		for branch, b := 0, rule; b != nil; branch, b = branch+1, b.Else {
			where := name
			if branch > 0 {
				where = fmt.Sprintf("%s else #%d", name, branch)
			}
			add(where+": body never holds", b.Location, func() {
				b.Body = ast.NewBody(ast.NewExpr(ast.BooleanTerm(false)))
			})
			out = append(out, bodyPoints(where, &b.Body)...)
			if b.Head.Value != nil && (branch == 0 || b.Head.Value != rule.Head.Value) {
				// A rule named *_pattern holds a regular expression.
				out = append(out, termPoints(where, b.Head.Value, strings.HasSuffix(name, "_pattern"))...)
			}
			if b.Head.Key != nil && branch == 0 {
				out = append(out, termPoints(where, b.Head.Key, false)...)
			}
		}
	}
	return out
}

// bodyPoints deletes each expression of *body, reads each every as some,
// and changes the terms of each expression, nested bodies included.
func bodyPoints(where string, body *ast.Body) []point {
	var out []point
	generated := len(*body) == 1 && (*body)[0].Location == nil
	if generated {
		return nil
	}
	for i, e := range *body {
		text := exprText(e)
		if len(*body) > 1 {
			out = append(out, point{key: fmt.Sprintf("%s: delete %q", where, text), line: row(e.Location), apply: func() {
				rest := append((*body)[:i:i], (*body)[i+1:]...)
				*body = rest
			}})
		}
		if ev, ok := e.Terms.(*ast.Every); ok {
			out = append(out, point{key: fmt.Sprintf("%s: every as some in %q", where, firstLine(text)), line: row(e.Location), apply: func() {
				sym := ast.Member.Call(ev.Value, ev.Domain)
				if ev.Key != nil {
					sym = ast.MemberWithKey.Call(ev.Key, ev.Value, ev.Domain)
				}
				some := ast.NewExpr(&ast.SomeDecl{Symbols: []*ast.Term{sym}, Location: e.Location})
				some.Location = e.Location
				exprs := append([]*ast.Expr{some}, ev.Body...)
				rest := append(append(append([]*ast.Expr{}, (*body)[:i]...), exprs...), (*body)[i+1:]...)
				for j, x := range rest {
					x.Index = j
				}
				*body = rest
			}})
			out = append(out, bodyPoints(where+" every", &ev.Body)...)
			out = append(out, termPoints(where, ev.Domain, false)...)
			continue
		}
		out = append(out, exprTermPoints(where, e)...)
	}
	return out
}

// exprTermPoints changes the terms of e: its collections and its regular
// expressions, and the bodies of its comprehensions.
func exprTermPoints(where string, e *ast.Expr) []point {
	switch t := e.Terms.(type) {
	case *ast.Term:
		return termPoints(where, t, false)
	case []*ast.Term:
		return callPoints(where, t)
	case *ast.SomeDecl:
		var out []point
		for _, x := range t.Symbols {
			out = append(out, termPoints(where, x, false)...)
		}
		return out
	}
	return nil
}

// callPoints changes the arguments of a call: none of sprintf's, and the
// first of a regex.* function as a regular expression.
func callPoints(where string, call []*ast.Term) []point {
	if len(call) == 0 {
		return nil
	}
	op := call[0].String()
	if op == "sprintf" {
		return nil
	}
	var out []point
	for i, x := range call[1:] {
		out = append(out, termPoints(where, x, i == 0 && strings.HasPrefix(op, "regex."))...)
	}
	return out
}

// termPoints deletes each entry of each set and array literal within t,
// and, when t is a regular expression written as a string, each
// alternative of its groups.
func termPoints(where string, t *ast.Term, regex bool) []point {
	var out []point
	switch v := t.Value.(type) {
	case ast.Call:
		out = append(out, callPoints(where, v)...)
	case *ast.Array:
		for i := 0; i < v.Len(); i++ {
			x := v.Elem(i)
			out = append(out, point{key: fmt.Sprintf("%s: delete entry %s", where, x), line: row(x.Location), apply: func() {
				var rest []*ast.Term
				for j := 0; j < v.Len(); j++ {
					if j != i {
						rest = append(rest, v.Elem(j))
					}
				}
				t.Value = ast.NewArray(rest...)
			}})
			out = append(out, termPoints(where, x, false)...)
		}
	case ast.Set:
		elems := v.Sorted()
		for i := 0; i < elems.Len(); i++ {
			x := elems.Elem(i)
			out = append(out, point{key: fmt.Sprintf("%s: delete entry %s", where, x), line: row(x.Location), apply: func() {
				var rest []*ast.Term
				for j := 0; j < elems.Len(); j++ {
					if j != i {
						rest = append(rest, elems.Elem(j))
					}
				}
				t.Value = ast.NewSet(rest...)
			}})
			out = append(out, termPoints(where, x, false)...)
		}
	case ast.Object:
		for _, k := range v.Keys() {
			out = append(out, termPoints(where, v.Get(k), false)...)
		}
	case *ast.ArrayComprehension:
		out = append(out, termPoints(where, v.Term, false)...)
		out = append(out, bodyPoints(where+" comprehension", &v.Body)...)
	case *ast.SetComprehension:
		out = append(out, termPoints(where, v.Term, false)...)
		out = append(out, bodyPoints(where+" comprehension", &v.Body)...)
	case *ast.ObjectComprehension:
		out = append(out, bodyPoints(where+" comprehension", &v.Body)...)
	case ast.String:
		if !regex {
			break
		}
		s := string(v)
		for _, alt := range alternatives(s) {
			out = append(out, point{key: fmt.Sprintf("%s: delete alternative %q of %s", where, s[alt.start:alt.end], shorten(s)), line: row(t.Location), apply: func() {
				t.Value = ast.String(alt.without(s))
			}})
		}
	}
	return out
}

func row(loc *ast.Location) int {
	if loc == nil {
		return 0
	}
	return loc.Row
}

func exprText(e *ast.Expr) string {
	if e.Location != nil && len(e.Location.Text) > 0 {
		return strings.Join(strings.Fields(string(e.Location.Text)), " ")
	}
	return e.String()
}

func shorten(s string) string {
	if len(s) > 24 {
		return fmt.Sprintf("%q…", s[:24])
	}
	return fmt.Sprintf("%q", s)
}

// span is one alternative of a group of a regular expression, and the |
// that goes with it.
type span struct{ start, end, cutStart, cutEnd int }

func (a span) without(s string) string { return s[:a.cutStart] + s[a.cutEnd:] }

// alternatives finds the alternatives of every group (and of the whole)
// of s, when s is a regular expression with at least one |. A string that
// does not parse as one is not a regular expression here.
func alternatives(s string) []span {
	if !strings.Contains(s, "|") {
		return nil
	}
	if _, err := syntax.Parse(s, syntax.Perl); err != nil {
		return nil
	}
	type group struct{ bars []int }
	var out []span
	starts := []int{-1} // the index of each open group's "(", -1 for the whole
	bars := [][]int{nil}
	closeGroup := func(open, end int, bs []int) {
		if len(bs) == 0 {
			return
		}
		begin := open + 1
		if open >= 0 && strings.HasPrefix(s[begin:], "?:") {
			begin += 2
		}
		bounds := append(append([]int{begin - 1}, bs...), end)
		for i := 0; i+1 < len(bounds); i++ {
			a := span{start: bounds[i] + 1, end: bounds[i+1]}
			if i+2 < len(bounds) {
				a.cutStart, a.cutEnd = a.start, a.end+1 // the alternative and the | after it
			} else {
				a.cutStart, a.cutEnd = a.start-1, a.end // the last one and the | before it
			}
			out = append(out, a)
		}
	}
	inClass := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			if strings.HasPrefix(s[i+1:], "^") {
				i++
			}
			if i+1 < len(s) && s[i+1] == ']' {
				i++
			}
		case c == '(':
			starts = append(starts, i)
			bars = append(bars, nil)
		case c == ')':
			n := len(starts) - 1
			closeGroup(starts[n], i, bars[n])
			starts, bars = starts[:n], bars[:n]
		case c == '|':
			bars[len(bars)-1] = append(bars[len(bars)-1], i)
		}
	}
	closeGroup(-1, len(s), bars[0])
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}
