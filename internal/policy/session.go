package policy

import "github.com/open-policy-agent/opa/v1/ast"

// ReadsSession reports whether the policy may read input.session: only
// then does a call's decision need the session's counts, which cost the
// executor a round trip to the bus.
func (p *Policy) ReadsSession() bool { return p.readsSession }

// readsSession reports whether a module other than a test may read
// input.session: a reference to it, to the input whole (x := input) or
// to a key of it known only when evaluated (input[k]), any of which
// could reach it.
func readsSession(modules map[string]*ast.Module) bool {
	input := ast.Var("input")
	found := false
	var visit func(x any) bool
	visit = func(x any) bool {
		if found {
			return true
		}
		switch x := x.(type) {
		case ast.Var:
			found = x.Equal(input) // the input whole, not the head of a reference
		case ast.Ref:
			if x[0].Value.Compare(input) != 0 {
				return false
			}
			if len(x) == 1 {
				found = true
				return true
			}
			key, ok := x[1].Value.(ast.String)
			found = !ok || string(key) == "session"
			for _, t := range x[1:] { // input[data.x[input.session]]
				ast.NewGenericVisitor(visit).Walk(t)
			}
			return true
		}
		return found
	}
	for name, m := range modules {
		if !isTest(name) {
			ast.NewGenericVisitor(visit).Walk(m)
		}
	}
	return found
}
