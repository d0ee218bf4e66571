package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// SessionPackage is the package of the rules that read input.session,
// the loop guards (policy/loops.rego), and SessionQuery its document:
// what they conclude, which the rest of the policy reads in place of the
// counts.
const (
	SessionPackage = "toolbus.session"
	SessionQuery   = "data." + SessionPackage
)

// ReadsSession reports whether the policy may read input.session: only
// then does a call's decision need the session's counts.
func (p *Policy) ReadsSession() bool { return p.readsSession }

// SessionApart reports whether the policy reads input.session only in
// SessionPackage, and that package reads of the input only its tool,
// caller and session, and of data only itself and the constants. A
// decision is then the same for two inputs that differ only in their
// counts, if SessionConclusions is the same for both: the executor
// evaluates the small package on every call, and reuses the decision
// made for the same call and conclusions. A policy that reads the
// counts elsewhere has every decision of a call with counts evaluated
// whole.
func (p *Policy) SessionApart() bool { return p.sessionApart }

// SessionConclusions is what SessionPackage concludes for a call: the
// values of the rules of it the rest of the policy reads (sessionApart),
// for the input's tool, caller and session, as text, the same text for
// the same values. Only for a policy that keeps
// the session apart (SessionApart); an input without counts concludes
// nothing. An error is the package's own (a built-in's error, a rule
// with two values): the whole decision then fails the same way.
func (p *Policy) SessionConclusions(ctx context.Context, input *Input) ([]byte, error) {
	if !p.sessionApart {
		return nil, errors.New("policy: the session is not kept apart")
	}
	if input.Session == nil {
		return nil, nil
	}
	// The package reads nothing else of the input (sessionApart).
	tool, err := input.Tool.term()
	if err != nil {
		return nil, fmt.Errorf("policy: input: %w", err)
	}
	value := ast.NewObject(
		[2]*ast.Term{k.tool, tool},
		[2]*ast.Term{k.caller, lastIdentity.get(input.Caller, func() *ast.Term { return identityTerm(input.Caller) })},
		[2]*ast.Term{k.session, sessionTerm(input.Session)},
	)
	rs, err := evalValue(ctx, p.session, value)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", SessionQuery, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, nil
	}
	v, ok := rs[0].Expressions[0].Value.(ast.Value)
	if !ok {
		return nil, fmt.Errorf("policy: %s: not a value", SessionQuery)
	}
	return []byte(v.String()), nil
}

// readsSession reports whether a module other than a test may read
// input.session: a reference to it, to the input whole (x := input) or
// to a key of it known only when evaluated (input[k]), any of which
// could reach it. Only modules inside reads are looked at.
func readsSession(modules map[string]*ast.Module, inside func(*ast.Module) bool) bool {
	found := false
	for name, m := range modules {
		if !isTest(name) && inside(m) {
			walkInputReads(m, func(key string, known bool) {
				found = found || !known || key == "session"
			})
		}
	}
	return found
}

// walkInputReads calls read for every reference to the input in x: with
// the key it reads (known), or none when it reads the whole input or a
// key known only when evaluated.
func walkInputReads(x any, read func(key string, known bool)) {
	input := ast.Var("input")
	var visit func(x any) bool
	visit = func(x any) bool {
		switch x := x.(type) {
		case ast.Var:
			if x.Equal(input) { // the input whole, not the head of a reference
				read("", false)
			}
		case ast.Ref:
			if x[0].Value.Compare(input) != 0 {
				return false
			}
			if len(x) == 1 {
				read("", false)
				return true
			}
			key, ok := x[1].Value.(ast.String)
			read(string(key), ok)
			for _, t := range x[1:] { // input[data.x[input.session]]
				ast.NewGenericVisitor(visit).Walk(t)
			}
			return true
		}
		return false
	}
	ast.NewGenericVisitor(visit).Walk(x)
}

// sessionApart reports whether the set keeps input.session apart (see
// Policy.SessionApart), on its compiled modules, whose references to
// rules are resolved to full data paths, and the query SessionConclusions
// evaluates: the rules of SessionPackage the rest of the set reads, each
// as the set of its values (an undefined one, the empty set), or, when
// the rest reads the package whole or by a key known only when
// evaluated, its whole document.
func sessionApart(modules map[string]*ast.Module) (string, bool) {
	inPackage := func(m *ast.Module) bool {
		return m.Package.Path.String() == SessionQuery || strings.HasPrefix(m.Package.Path.String(), SessionQuery+".")
	}
	if readsSession(modules, func(m *ast.Module) bool { return !inPackage(m) }) {
		return "", false
	}
	kept := map[string]*ast.Module{}
	for name, m := range modules {
		if !isTest(name) {
			kept[name] = m
		}
	}
	c := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1)
	if c.Compile(kept); c.Failed() {
		return "", false
	}
	pkg := ast.MustParseRef(SessionQuery)
	apart, found, whole := true, false, false
	read := map[string]bool{}
	for _, m := range c.Modules {
		if !inPackage(m) {
			// The rules only: the package clause and the imports name
			// documents without reading them.
			for _, rule := range m.Rules {
				ast.WalkRefs(rule, func(r ast.Ref) bool {
					ground := r.GroundPrefix()
					switch {
					case pkg.HasPrefix(ground) && (len(ground) < len(r) || len(r) <= len(pkg)):
						// The package whole (data.toolbus.session), a
						// document holding it (data.toolbus), or one of
						// them by a key known only when evaluated.
						whole = true
					case !r.HasPrefix(pkg):
					default:
						name, ok := r[len(pkg)].Value.(ast.String)
						whole = whole || !ok
						read[string(name)] = true
					}
					return false
				})
			}
			continue
		}
		found = true
		walkInputReads(m, func(key string, known bool) {
			apart = apart && known && (key == "tool" || key == "caller" || key == "session")
		})
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if r.HasPrefix(ast.DefaultRootRef) && !r.HasPrefix(pkg) && !r.HasPrefix(ast.MustParseRef("data."+ConstantsPackage)) {
				apart = false
			}
			return false
		})
	}
	if !apart || !found {
		return "", false
	}
	if whole || len(read) == 0 {
		return SessionQuery, true
	}
	parts := make([]string, 0, len(read))
	for _, name := range slices.Sorted(maps.Keys(read)) {
		parts = append(parts, fmt.Sprintf("{x | x := %s}", pkg.Append(ast.StringTerm(name))))
	}
	return "[" + strings.Join(parts, ", ") + "]", true
}
