package policy

import (
	"cmp"
	"fmt"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy/shell"
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
	Shell *shell.Analysis
	// Paths are the files the call names, absolute and cleaned.
	Paths []string
	// Home and Workspace describe the executor's host; WorkspaceName is
	// what callers name the workspace by (input.env.workspaceName), its
	// path when it has no other name.
	Home, Workspace, WorkspaceName string
	// Answer is the outcome of the approver's answer, for the remember
	// and approver rules only.
	Answer events.Outcome
	// Approver is who answered, for the approver rule only.
	Approver *Approver
	// HardLinks are those of Paths that are regular files with more than
	// one name: the other name may be any file on the same file system.
	HardLinks []string
	// HookAsked says a user's pre hook asked for a person to confirm the
	// call (internal/hooks: "ask"), for the rules about who may answer.
	HookAsked bool
	// Protected are those of Paths that toolbus runs as code of the
	// settings' owner (internal/protect): a hook's script, a stdio MCP
	// server's, a discovery command's.
	Protected []ProtectedPath
	// Session counts the calls of the caller's session, for the loop
	// guards; nil when the policy reads no input.session
	// (Policy.ReadsSession).
	Session *SessionCounts
}

// SessionCounts is what the fleet counted of the caller of a call
// (events.SessionCounts), shown to the policy as input.session.
type SessionCounts = events.SessionCounts

// ProtectedPath is one path of a call that toolbus runs as code: Path as
// the call names it, Of the protected file or directory it is in, By what
// runs it.
type ProtectedPath struct {
	Path, Of, By string
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

// AllowEntry is one remembered approval; its shape is the allowlist
// bucket's (events.AllowEntry).
type AllowEntry = events.AllowEntry

// value builds the input document directly as OPA terms: converting Go
// maps with ast.InterfaceToValue costs more than the evaluation itself.
// The names of the fields are terms made once (see k).
func (in *Input) value() (ast.Value, error) {
	allow := make([]*ast.Term, len(in.Allowlist))
	for i, e := range in.Allowlist {
		allow[i] = allowEntryTerm(&e)
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
	tool, err := in.Tool.term()
	if err != nil {
		return nil, err
	}
	fields := make([][2]*ast.Term, 0, 7)
	fields = append(fields,
		[2]*ast.Term{k.tool, tool},
		[2]*ast.Term{k.args, ast.NewTerm(args)},
		[2]*ast.Term{k.caller, lastIdentity.get(in.Caller, func() *ast.Term { return identityTerm(in.Caller) })},
		[2]*ast.Term{k.allowlist, ast.ArrayTerm(allow...)},
		[2]*ast.Term{k.paths, strs(in.Paths)},
		[2]*ast.Term{k.env, lastEnv.get(envKey{in.Home, in.Workspace, in.WorkspaceName}, func() *ast.Term {
			return obj(kv(k.home, in.Home), kv(k.workspace, in.Workspace), kv(workspaceNameKey, cmp.Or(in.WorkspaceName, in.Workspace)))
		})},
	)
	if in.Shell != nil {
		fields = append(fields, [2]*ast.Term{k.shell, shellTerm(in.Shell)})
	}
	if in.Answer != "" {
		fields = append(fields, [2]*ast.Term{k.answer, obj(kv(k.outcome, string(in.Answer)))})
	}
	if a := in.Approver; a != nil {
		fields = append(fields, [2]*ast.Term{approverKey, approverTerm(a)})
	}
	if len(in.HardLinks) > 0 {
		fields = append(fields, [2]*ast.Term{hardLinksKey, strs(in.HardLinks)})
	}
	if in.HookAsked {
		fields = append(fields, [2]*ast.Term{hookAskedKey, ast.InternedTerm(true)})
	}
	if len(in.Protected) > 0 {
		ps := make([]*ast.Term, len(in.Protected))
		for i, p := range in.Protected {
			ps[i] = obj(kv(k.path, p.Path), kv(ofKey, p.Of), kv(byKey, p.By))
		}
		fields = append(fields, [2]*ast.Term{protectedKey, ast.ArrayTerm(ps...)})
	}
	if s := in.Session; s != nil {
		fields = append(fields, [2]*ast.Term{k.session, sessionTerm(s)})
	}
	return ast.NewObject(fields...), nil
}

// term is input.tool: the last call's term when it had the same tool
// without annotations (lastTool).
func (t ToolInput) term() (*ast.Term, error) {
	if len(t.Annotations) == 0 {
		return lastTool.get(toolKey{t.Name, t.Kind, t.Source, t.Server, t.Trust, t.ReadOnly}, func() *ast.Term { return toolTerm(t, ast.NewObject()) }), nil
	}
	v, err := ast.InterfaceToValue(t.Annotations)
	if err != nil {
		return nil, fmt.Errorf("annotations: %w", err)
	}
	annotations, ok := v.(ast.Object)
	if !ok {
		annotations = ast.NewObject()
	}
	return toolTerm(t, annotations), nil
}

// sessionTerm is input.session.
func sessionTerm(s *SessionCounts) *ast.Term {
	return obj([2]*ast.Term{callsKey, ast.InternedTerm(s.Calls)}, [2]*ast.Term{repeatsKey, ast.InternedTerm(s.Repeats)})
}

func toolTerm(t ToolInput, annotations ast.Object) *ast.Term {
	return obj(kv(k.name, t.Name), kv(k.kind, string(t.Kind)), kv(k.source, string(t.Source)), kv(k.server, t.Server),
		[2]*ast.Term{k.trust, ast.InternedTerm(t.Trust)}, [2]*ast.Term{k.readOnly, ast.InternedTerm(t.ReadOnly)},
		[2]*ast.Term{k.annotations, ast.NewTerm(annotations)})
}

// The parts of an input that repeat from call to call, the caller, the
// host and the tool (one without annotations), are kept as the terms made
// for the last call and shared by the next ones with the same value: no
// evaluation changes a term, and no input document is changed once made
// (a replay changes only the one it decoded).
var (
	lastIdentity lastTerm[events.Identity]
	lastEnv      lastTerm[envKey]
	lastTool     lastTerm[toolKey]
)

type envKey struct{ home, workspace, name string }

// workspaceNameKey names Input.WorkspaceName.
var workspaceNameKey = str("workspaceName")

type toolKey struct {
	name   string
	kind   events.Kind
	source events.Source
	server string
	trust  bool
	ro     bool
}

// lastTerm holds the term made for the last key it was asked for.
type lastTerm[K comparable] struct{ last atomic.Pointer[keyedTerm[K]] }

type keyedTerm[K comparable] struct {
	key  K
	term *ast.Term
}

// get is the term for key: the last one's, or one build makes.
func (c *lastTerm[K]) get(key K, build func() *ast.Term) *ast.Term {
	if e := c.last.Load(); e != nil && e.key == key {
		return e.term
	}
	t := build()
	c.last.Store(&keyedTerm[K]{key, t})
	return t
}

func identityTerm(c events.Identity) *ast.Term {
	return obj(kv(k.id, c.ID), kv(k.role, c.Role), kv(k.agent, c.Agent), kv(k.session, c.Session), kv(k.user, c.User), kv(k.host, c.Host), kv(k.client, c.Client),
		[2]*ast.Term{k.proven, ast.InternedTerm(c.Proven)}, kv(k.principal, c.Principal))
}

// Approver is who answered a confirmation request, as input.approver
// shows it: the answering identity's fields (id, role, session, ...,
// principal), and the person behind it.
type Approver struct {
	events.Identity
	// Person names the person: their email, else their name, as their
	// sign-in gives it (events.Signer); for a member of the fleet of
	// their own, the member's id. Empty when the answer names nobody.
	Person string
	// Groups are the person's groups, as their OpenID provider gives
	// them; only for a proven person.
	Groups []string
	// Proven says who the person is was proven: the bus vouched for the
	// approver that answered, and that approver proved the person (an
	// OpenID sign-in, or the person's own identity of the fleet). A
	// claim (a name typed in a page, an OS user) is not.
	Proven bool
	// Via is where they answered: console, terminal, agent-user.
	Via string
}

// approverTerm is input.approver: the identity's fields, with proven the
// person's (Approver.Proven), and person, groups and via.
func approverTerm(a *Approver) *ast.Term {
	c := a.Identity
	groups := a.Groups
	if !a.Proven {
		groups = nil // unproven groups are a claim: a rule on them must not hold
	}
	return obj(kv(k.id, c.ID), kv(k.role, c.Role), kv(k.agent, c.Agent), kv(k.session, c.Session), kv(k.user, c.User), kv(k.host, c.Host), kv(k.client, c.Client),
		[2]*ast.Term{k.proven, ast.InternedTerm(a.Proven)}, kv(k.principal, c.Principal),
		kv(personKey, a.Person), [2]*ast.Term{groupsKey, strs(groups)}, kv(viaKey, a.Via))
}

// personKey, groupsKey and viaKey name Approver's fields.
var personKey, groupsKey, viaKey = str("person"), str("groups"), str("via")

func allowEntryTerm(e *AllowEntry) *ast.Term {
	return obj(kv(k.scope, e.Scope), kv(k.tool, e.Tool), kv(k.server, e.Server), [2]*ast.Term{k.argv, strs(e.Argv)},
		[2]*ast.Term{k.exact, ast.InternedTerm(e.Exact)}, kv(k.path, e.Path))
}

// k holds the input's field names as terms, made once and shared: terms
// are not changed by evaluation.
var k = struct {
	tool, args, caller, allowlist, paths, env, shell                *ast.Term
	name, kind, source, server, trust, readOnly, annotations        *ast.Term
	id, role, agent, session, user, host, client, proven, principal *ast.Term
	scope, path, home, workspace                                    *ast.Term
	commands, argv, text, literal, redirects, functions, parseError *ast.Term
	recursive, op, target, exact, answer, outcome                   *ast.Term
	words, wrappers, globs, moreArgs, stdin, forkLoops, opaque      *ast.Term
}{
	tool: str("tool"), args: str("args"), caller: str("caller"), allowlist: str("allowlist"), paths: str("paths"), env: str("env"), shell: str("shell"),
	name: str("name"), kind: str("kind"), source: str("source"), server: str("server"), trust: str("trust"), readOnly: str("readOnly"), annotations: str("annotations"),
	id: str("id"), role: str("role"), agent: str("agent"), session: str("session"), user: str("user"), host: str("host"), client: str("client"), proven: str("proven"), principal: str("principal"),
	scope: str("scope"), path: str("path"), home: str("home"), workspace: str("workspace"),
	commands: str("commands"), argv: str("argv"), text: str("text"), literal: str("literal"), redirects: str("redirects"), functions: str("functions"), parseError: str("parseError"),
	recursive: str("recursive"), op: str("op"), target: str("target"), exact: str("exact"), answer: str("answer"), outcome: str("outcome"),
	words: str("words"), wrappers: str("wrappers"), globs: str("globs"), moreArgs: str("moreArgs"), stdin: str("stdin"), forkLoops: str("forkLoops"), opaque: str("opaque"),
}

// hardLinksKey names Input.HardLinks, present only when there are some;
// approverKey Input.Approver.
var hardLinksKey, approverKey = str("hardLinks"), str("approver")

// hookAskedKey names Input.HookAsked, present only when set.
var hookAskedKey = str("hookAsked")

// protectedKey names Input.Protected, present only when there are some,
// ofKey and byKey its fields.
var protectedKey, ofKey, byKey = str("protected"), str("of"), str("by")

// callsKey and repeatsKey name the fields of Input.Session, present only
// when set (under k.session, the name the caller's session has too).
var callsKey, repeatsKey = str("calls"), str("repeats")

// kv is one field of an object whose value is a string.
func kv(key *ast.Term, value string) [2]*ast.Term { return [2]*ast.Term{key, ast.InternedTerm(value)} }

// shellTerm is the input's shell field: the analysis of the line.
func shellTerm(s *shell.Analysis) *ast.Term {
	cmds := make([]*ast.Term, len(s.Commands))
	for i, c := range s.Commands {
		cmds[i] = obj(kv(k.name, c.Name), [2]*ast.Term{k.args, strs(c.Args)}, [2]*ast.Term{k.argv, strs(c.Argv)},
			[2]*ast.Term{k.words, strs(c.Words)}, [2]*ast.Term{k.wrappers, strs(c.Wrappers)}, kv(k.text, c.Text),
			[2]*ast.Term{k.literal, ast.InternedTerm(c.Literal)}, [2]*ast.Term{k.globs, ast.InternedTerm(c.Globs)},
			[2]*ast.Term{k.moreArgs, ast.InternedTerm(c.MoreArgs)}, [2]*ast.Term{k.stdin, ast.InternedTerm(c.Stdin)},
			[2]*ast.Term{k.paths, strs(c.Paths)}, [2]*ast.Term{k.redirects, redirectTerms(c.Redirects)})
	}
	fns := make([]*ast.Term, len(s.Functions))
	for i, f := range s.Functions {
		fns[i] = obj(kv(k.name, f.Name), [2]*ast.Term{k.recursive, ast.InternedTerm(f.Recursive)})
	}
	fields := [][2]*ast.Term{{k.commands, ast.ArrayTerm(cmds...)}, {k.redirects, redirectTerms(s.Redirects)}, {k.functions, ast.ArrayTerm(fns...)},
		{k.forkLoops, strs(s.ForkLoops)}, {k.opaque, strs(s.Opaque)}}
	if s.ParseError != "" {
		fields = append(fields, kv(k.parseError, s.ParseError))
	}
	return obj(fields...)
}

func redirectTerms(rs []shell.Redirect) *ast.Term {
	out := make([]*ast.Term, len(rs))
	for i, r := range rs {
		out[i] = obj(kv(k.op, r.Op), kv(k.target, r.Target), [2]*ast.Term{k.literal, ast.InternedTerm(r.Literal)})
	}
	return ast.ArrayTerm(out...)
}

// obj builds an object term.
func obj(fields ...[2]*ast.Term) *ast.Term { return ast.ObjectTerm(fields...) }

func str(s string) *ast.Term { return ast.StringTerm(s) }

func strs(ss []string) *ast.Term {
	out := make([]*ast.Term, len(ss))
	for i, s := range ss {
		out[i] = ast.StringTerm(s)
	}
	return ast.ArrayTerm(out...)
}
