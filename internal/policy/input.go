package policy

import (
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

// value builds the input document as plain maps, which OPA takes without
// a JSON round trip.
func (in *Input) value() map[string]any {
	allow := make([]any, len(in.Allowlist))
	for i, e := range in.Allowlist {
		allow[i] = map[string]any{"scope": e.Scope, "tool": e.Tool, "server": e.Server, "prefix": e.Prefix, "path": e.Path}
	}
	paths := make([]any, len(in.Paths))
	for i, p := range in.Paths {
		paths[i] = p
	}
	args := in.Args
	if args == nil {
		args = map[string]any{}
	}
	annotations := in.Tool.Annotations
	if annotations == nil {
		annotations = map[string]any{}
	}
	v := map[string]any{
		"tool": map[string]any{
			"name": in.Tool.Name, "kind": string(in.Tool.Kind), "source": string(in.Tool.Source),
			"server": in.Tool.Server, "trust": in.Tool.Trust, "readOnly": in.Tool.ReadOnly, "annotations": annotations,
		},
		"args": args,
		"caller": map[string]any{
			"id": in.Caller.ID, "role": in.Caller.Role, "agent": in.Caller.Agent,
			"session": in.Caller.Session, "user": in.Caller.User, "host": in.Caller.Host,
		},
		"allowlist": allow,
		"paths":     paths,
		"env":       map[string]any{"home": in.Home, "workspace": in.Workspace},
	}
	if in.Shell != nil {
		v["shell"] = in.Shell.value()
	}
	return v
}

func (s *Shell) value() map[string]any {
	cmds := make([]any, len(s.Commands))
	for i, c := range s.Commands {
		cmds[i] = map[string]any{
			"name": c.Name, "args": anySlice(c.Args), "argv": anySlice(c.Argv), "text": c.Text,
			"literal": c.Literal, "redirects": redirectValues(c.Redirects),
		}
	}
	fns := make([]any, len(s.Functions))
	for i, f := range s.Functions {
		fns[i] = map[string]any{"name": f.Name, "recursive": f.Recursive}
	}
	v := map[string]any{"commands": cmds, "redirects": redirectValues(s.Redirects), "functions": fns}
	if s.ParseError != "" {
		v["parseError"] = s.ParseError
	}
	return v
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func redirectValues(rs []Redirect) []any {
	out := make([]any, len(rs))
	for i, r := range rs {
		out[i] = map[string]any{"op": r.Op, "target": r.Target}
	}
	return out
}
