package policy

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/toolbus/toolbus/internal/events"
)

// Input is what the policy sees of one invocation. policy/README.md
// documents its JSON shape.
type Input struct {
	Tool ToolInput
	// Args are the decoded arguments.
	Args map[string]any
	// Caller is who asked for the call.
	Caller events.Identity
	// Allowlist holds the remembered approvals that may apply to this call.
	Allowlist []AllowEntry
	// Shell is set for shell tools: what the command line would run.
	Shell *Shell
	// Paths are the files the call names, absolute and cleaned.
	Paths []string
	// Home and Workspace describe the executor's host.
	Home, Workspace string
}

// ToolInput is the policy's view of the tool.
type ToolInput struct {
	Name        string
	Kind        events.Kind
	Source      events.Source
	Server      string
	Trust       bool
	ReadOnly    bool
	Annotations map[string]any
}

// AllowEntry is one remembered approval ("always allow"). Scope is
// "tool", "server", "command" (a shell command prefix) or "path".
type AllowEntry struct {
	Scope  string `json:"scope"`
	Tool   string `json:"tool,omitempty"`
	Server string `json:"server,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	Path   string `json:"path,omitempty"`
}

// value builds the input document directly as OPA terms: converting Go
// maps with ast.InterfaceToValue costs more than the evaluation itself.
func (in *Input) value() (ast.Value, error) {
	allow := make([]*ast.Term, len(in.Allowlist))
	for i, e := range in.Allowlist {
		allow[i] = obj("scope", str(e.Scope), "tool", str(e.Tool), "server", str(e.Server), "prefix", str(e.Prefix), "path", str(e.Path))
	}
	args := ast.NewObject()
	if len(in.Args) > 0 {
		v, err := ast.InterfaceToValue(in.Args)
		if err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
		if o, ok := v.(ast.Object); ok {
			args = o
		}
	}
	annotations := ast.NewObject()
	if len(in.Tool.Annotations) > 0 {
		v, err := ast.InterfaceToValue(in.Tool.Annotations)
		if err != nil {
			return nil, fmt.Errorf("annotations: %w", err)
		}
		if o, ok := v.(ast.Object); ok {
			annotations = o
		}
	}
	c := in.Caller
	root := obj(
		"tool", obj("name", str(in.Tool.Name), "kind", str(string(in.Tool.Kind)), "source", str(string(in.Tool.Source)),
			"server", str(in.Tool.Server), "trust", ast.BooleanTerm(in.Tool.Trust), "readOnly", ast.BooleanTerm(in.Tool.ReadOnly),
			"annotations", ast.NewTerm(annotations)),
		"args", ast.NewTerm(args),
		"caller", obj("id", str(c.ID), "role", str(c.Role), "agent", str(c.Agent), "session", str(c.Session), "user", str(c.User), "host", str(c.Host)),
		"allowlist", ast.ArrayTerm(allow...),
		"paths", strs(in.Paths),
		"env", obj("home", str(in.Home), "workspace", str(in.Workspace)),
	)
	if in.Shell != nil {
		root.Value.(ast.Object).Insert(str("shell"), in.Shell.term())
	}
	return root.Value, nil
}

func (s *Shell) term() *ast.Term {
	cmds := make([]*ast.Term, len(s.Commands))
	for i, c := range s.Commands {
		cmds[i] = obj("name", str(c.Name), "args", strs(c.Args), "argv", strs(c.Argv), "text", str(c.Text),
			"literal", ast.BooleanTerm(c.Literal), "redirects", redirectTerms(c.Redirects))
	}
	fns := make([]*ast.Term, len(s.Functions))
	for i, f := range s.Functions {
		fns[i] = obj("name", str(f.Name), "recursive", ast.BooleanTerm(f.Recursive))
	}
	t := obj("commands", ast.ArrayTerm(cmds...), "redirects", redirectTerms(s.Redirects), "functions", ast.ArrayTerm(fns...))
	if s.ParseError != "" {
		t.Value.(ast.Object).Insert(str("parseError"), str(s.ParseError))
	}
	return t
}

func redirectTerms(rs []Redirect) *ast.Term {
	out := make([]*ast.Term, len(rs))
	for i, r := range rs {
		out[i] = obj("op", str(r.Op), "target", str(r.Target))
	}
	return ast.ArrayTerm(out...)
}

// obj builds an object term from alternating keys and values.
func obj(kv ...any) *ast.Term {
	pairs := make([][2]*ast.Term, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		pairs = append(pairs, [2]*ast.Term{str(kv[i].(string)), kv[i+1].(*ast.Term)})
	}
	return ast.ObjectTerm(pairs...)
}

func str(s string) *ast.Term { return ast.StringTerm(s) }

func strs(ss []string) *ast.Term {
	out := make([]*ast.Term, len(ss))
	for i, s := range ss {
		out[i] = ast.StringTerm(s)
	}
	return ast.ArrayTerm(out...)
}
