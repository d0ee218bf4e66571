package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/toolbus/toolbus/internal/closest"
	"github.com/toolbus/toolbus/internal/events"
)

// Check says what would make Compile refuse files before any test runs:
// a syntax error, no decision, a verdict none of the three.
func Check(files Files) error {
	modules, err := parse(files)
	if err != nil {
		return err
	}
	return check(modules)
}

// check refuses a set that would compile and then judge every call
// wrongly: one that defines no decision (every call would be a DENY that
// says "undefined"), or writes a verdict that is none of the three (every
// call that reaches it would be a DENY that says so). It looks at the
// set's own modules, tests left out, and says where the mistake is.
func check(modules map[string]*ast.Module) error {
	var problems []string
	defined := map[string]bool{} // rules of package toolbus, by name
	for _, name := range sortedNames(modules) {
		if isTest(name) {
			continue
		}
		m := modules[name]
		if m.Package.Path.String() != "data.toolbus" {
			continue
		}
		for _, r := range m.Rules {
			defined[ruleName(r)] = true
		}
		ast.WalkTerms(m, func(t *ast.Term) bool {
			obj, ok := t.Value.(ast.Object)
			if !ok {
				return false
			}
			v := obj.Get(ast.InternedTerm("verdict"))
			if v == nil {
				return false
			}
			s, ok := v.Value.(ast.String)
			if ok && !events.Verdict(s).Valid() {
				problems = append(problems, fmt.Sprintf("%s: verdict %q is none of ALLOW, DENY and ASK_USER", where(v, name), string(s)))
			}
			return false
		})
	}
	if !defined["decision"] {
		msg := "the set defines no " + Query + ": every policy set must (see policy/README.md)"
		if near := nearest("decision", defined); near != "" {
			msg += fmt.Sprintf("; it defines %q: a misspelling?", near)
		}
		problems = append([]string{msg}, problems...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("policy: %s", strings.Join(problems, "; "))
	}
	return nil
}

// ruleName is the name a rule defines in its package: the first part of
// its head's reference.
func ruleName(r *ast.Rule) string {
	ref := r.Head.Ref()
	if len(ref) == 0 {
		return ""
	}
	if s, ok := ref[0].Value.(ast.Var); ok {
		return string(s)
	}
	return ref[0].String()
}

// where is FILE:LINE of t, or the file's name when t has no location.
func where(t *ast.Term, file string) string {
	if t.Location == nil {
		return file
	}
	return fmt.Sprintf("%s:%d", file, t.Location.Row)
}

// nearest is the name of names at most two edits from want, "" for none.
func nearest(want string, names map[string]bool) string {
	best, bestDist := "", 3
	for _, n := range sortedKeys(names) {
		if d := closest.Distance(want, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

func sortedNames(modules map[string]*ast.Module) []string {
	names := make([]string, 0, len(modules))
	for n := range modules {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
