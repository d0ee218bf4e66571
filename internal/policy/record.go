package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy/shell"
)

// A decision is reproducible from the audit trail: the executor records,
// beside every decision, the input document the policy was evaluated on,
// as the policy saw it — the tool as the executor judges it, the caller,
// the allowlist entries that applied, the files the call names with where
// links led them, the analysis of a shell line, the host's home and
// workspace. Replaying that document under the same policy gives the same
// decision; under another, the decision that policy would have made
// (toolbus audit whatif), and evaluated with OPA's tracer, which rules
// made it (toolbus policy explain).
//
// The arguments are left out of the record: the invocation carries them
// already (or the approver's answer, when it modified them), and they are
// the one part that may be large. A replay decodes them again with
// DecodeArgs, as the executor did.

// Recorded is the input of one decision as the audit trail keeps it.
type Recorded struct {
	// Input is the input document, JSON, without "args".
	Input []byte
	// ShellLine is the line a shell tool's call would run. Before a line
	// is allowed, bash's own parser is asked how it reads it (see
	// shell.Analysis.CheckWithBash); a replay that allows a line bash was
	// not asked about asks it then.
	ShellLine string
	// BashChecked is set when bash was asked: the input's shell.opaque
	// then holds its answer, if it disagreed.
	BashChecked bool
	// Lossy is set when a string of the input was not valid UTF-8 (a file
	// name can be any bytes): JSON holds such a string with U+FFFD in
	// place of the bad bytes, so a replay judges a slightly different
	// input.
	Lossy bool
	// Session is the input's "session", which Input leaves out: the
	// counts change with every call, and a decision reused for the same
	// conclusions of the loop guards (Policy.SessionConclusions) keeps
	// the Input it was made on.
	Session *SessionCounts
}

// DecideRecorded is Decide, and the input the decision was made on as the
// audit trail records it.
func (p *Policy) DecideRecorded(ctx context.Context, input *Input) (Decision, Recorded) {
	d, value := p.decideInput(ctx, input)
	rec := Recorded{Session: input.Session}
	if sh := input.Shell; sh != nil {
		rec.ShellLine, rec.BashChecked = sh.Line(), sh.BashChecked()
	}
	if value != nil {
		rec.Input, rec.Lossy = appendInputJSON(nil, value)
	}
	return d, rec
}

// Replay decides again on a recorded input, with the arguments args
// (decoded by DecodeArgs), as Decide did on the executor: an allowed shell
// line bash was not asked about is shown to bash, and judged again as
// opaque when bash reads it differently. Nothing of the call runs. An
// input that does not decode is an error, not a decision.
func (p *Policy) Replay(ctx context.Context, rec Recorded, args map[string]any) (Decision, error) {
	d, _, err := p.replay(ctx, rec, args)
	return d, err
}

// replay is Replay, and the input document it decided on last.
func (p *Policy) replay(ctx context.Context, rec Recorded, args map[string]any) (Decision, ast.Object, error) {
	value, err := rec.value(args)
	if err != nil {
		return Decision{}, nil, err
	}
	d := p.decideValue(ctx, value)
	if d.Verdict == events.Allow && rec.ShellLine != "" && !rec.BashChecked {
		sh := shell.Analyze(rec.ShellLine)
		if reason := sh.CheckWithBash(ctx); reason != "" {
			if err := addOpaque(value, reason); err != nil {
				return Decision{}, nil, err
			}
			d = p.decideValue(ctx, value)
		}
	}
	return d, value, nil
}

// value is the input document of rec with args put back.
func (rec Recorded) value(args map[string]any) (ast.Object, error) {
	v, err := ValueFromJSON(rec.Input)
	if err != nil {
		return nil, fmt.Errorf("recorded policy input: %w", err)
	}
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, errors.New("recorded policy input is not an object")
	}
	argsValue := ast.NewObject()
	if len(args) > 0 {
		a, err := ast.InterfaceToValue(args)
		if err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
		if o, ok := a.(ast.Object); ok {
			argsValue = o
		}
	}
	obj.Insert(k.args, ast.NewTerm(argsValue))
	if s := rec.Session; s != nil {
		obj.Insert(k.session, sessionTerm(s))
	}
	return obj, nil
}

// addOpaque adds reason to input.shell.opaque, as CheckWithBash adds it to
// the analysis's Opaque.
func addOpaque(input ast.Object, reason string) error {
	t := input.Get(k.shell)
	if t == nil {
		return errors.New("recorded policy input has a shell line but no shell analysis")
	}
	sh, ok := t.Value.(ast.Object)
	if !ok {
		return errors.New("recorded input.shell is not an object")
	}
	var list []*ast.Term
	if o := sh.Get(k.opaque); o != nil {
		arr, ok := o.Value.(*ast.Array)
		if !ok {
			return errors.New("recorded input.shell.opaque is not an array")
		}
		for i := range arr.Len() {
			if s, ok := arr.Elem(i).Value.(ast.String); ok && string(s) == reason {
				return nil
			}
			list = append(list, arr.Elem(i))
		}
	}
	sh.Insert(k.opaque, ast.ArrayTerm(append(list, ast.StringTerm(reason))...))
	return nil
}

// appendInputJSON appends the input document v, without "args" and
// "session", as JSON.
// lossy reports a string that was not valid UTF-8.
func appendInputJSON(b []byte, v ast.Value) (out []byte, lossy bool) {
	if obj, ok := v.(ast.Object); ok {
		return appendObject(b, obj, k.args, k.session)
	}
	return appendJSON(b, v)
}

// appendJSON appends v as JSON. An input document holds only JSON values:
// anything else (a set, a reference) is written as null.
func appendJSON(b []byte, v ast.Value) (out []byte, lossy bool) {
	switch v := v.(type) {
	case ast.Null:
		return append(b, "null"...), false
	case ast.Boolean:
		if v {
			return append(b, "true"...), false
		}
		return append(b, "false"...), false
	case ast.Number:
		return append(b, v...), false
	case ast.String:
		out, err := jsontext.AppendQuote(b, string(v))
		return out, err != nil
	case *ast.Array:
		b = append(b, '[')
		for i := range v.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			var l bool
			b, l = appendJSON(b, v.Elem(i).Value)
			lossy = lossy || l
		}
		return append(b, ']'), lossy
	case ast.Object:
		return appendObject(b, v, nil, nil)
	}
	return append(b, "null"...), false
}

// appendObject appends obj as JSON, leaving out the member skip names.
func appendObject(b []byte, obj ast.Object, skip, skip2 *ast.Term) (out []byte, lossy bool) {
	b = append(b, '{')
	first := true
	obj.Foreach(func(key, val *ast.Term) {
		if skip != nil && (key.Equal(skip) || key.Equal(skip2)) {
			return
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		var l1, l2 bool
		b, l1 = appendJSON(b, key.Value)
		b = append(b, ':')
		b, l2 = appendJSON(b, val.Value)
		lossy = lossy || l1 || l2
	})
	return append(b, '}'), lossy
}

// ValueFromJSON reads one JSON value as an OPA value, numbers kept as
// written (as DecodeArgs keeps them), without going through Go maps. It
// is strict as DecodeArgs is: a name given twice, invalid UTF-8 or
// anything after the value is an error. Recorded inputs come from the
// audit stream, which anyone who may publish on the bus writes to: this
// never panics on any input (FuzzValueFromJSON).
func ValueFromJSON(data []byte) (ast.Value, error) {
	r := readers.Get().(*jsonReader)
	defer func() {
		r.src.Reset(nil)
		r.dec.Reset(&r.src)
		readers.Put(r)
	}()
	r.src.Reset(data)
	r.dec.Reset(&r.src)
	t, err := readTerm(r.dec)
	if err != nil {
		return nil, err
	}
	if _, err := r.dec.ReadToken(); err != io.EOF {
		if err == nil {
			err = errors.New("more than one value")
		}
		return nil, err
	}
	return t.Value, nil
}

// jsonReader is a decoder kept for the next value: a replay reads one
// recorded input after another, and a decoder's buffers outweigh the input.
type jsonReader struct {
	src bytes.Reader
	dec *jsontext.Decoder
}

var readers = sync.Pool{New: func() any {
	r := &jsonReader{}
	r.dec = jsontext.NewDecoder(&r.src)
	return r
}}

// inputNames are the names of an input document's fields, as the terms
// Input.value makes them with: a recorded input repeats them in every
// object, and reading one shares its term.
var inputNames = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, t := range []*ast.Term{hardLinksKey, approverKey, hookAskedKey, protectedKey, ofKey, byKey, callsKey, repeatsKey, k.tool, k.args, k.caller, k.allowlist, k.paths, k.env, k.shell,
		k.name, k.kind, k.source, k.server, k.trust, k.readOnly, k.annotations, k.id, k.role, k.agent, k.session, k.user, k.host, k.client,
		k.proven, k.scope, k.path, k.home, k.workspace, k.commands, k.argv, k.text, k.literal, k.redirects, k.functions, k.parseError,
		k.recursive, k.op, k.target, k.exact, k.answer, k.outcome, k.words, k.wrappers, k.globs, k.moreArgs, k.stdin, k.forkLoops, k.opaque} {
		m[string(t.Value.(ast.String))] = t
	}
	return m
}()

func readTerm(dec *jsontext.Decoder) (*ast.Term, error) {
	switch dec.PeekKind() {
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		var elems []*ast.Term
		for dec.PeekKind() != ']' {
			t, err := readTerm(dec)
			if err != nil {
				return nil, err
			}
			elems = append(elems, t)
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		return ast.NewTerm(ast.NewArray(elems...)), nil
	case '{':
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		fields := make([][2]*ast.Term, 0, 8)
		for dec.PeekKind() != '}' {
			// A name read as it is written: the names of an input are
			// plain, and looked up without a copy.
			raw, err := dec.ReadValue()
			if err != nil {
				return nil, err
			}
			var key *ast.Term
			if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
				if key = inputNames[string(raw[1:len(raw)-1])]; key == nil {
					key = ast.StringTerm(string(raw[1 : len(raw)-1]))
				}
			} else {
				name, err := jsontext.AppendUnquote(nil, raw)
				if err != nil {
					return nil, err
				}
				key = ast.StringTerm(string(name))
			}
			v, err := readTerm(dec)
			if err != nil {
				return nil, err
			}
			fields = append(fields, [2]*ast.Term{key, v})
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		return ast.NewTerm(ast.NewObject(fields...)), nil
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case 'n':
		return ast.InternedNullTerm, nil
	case 't':
		return ast.InternedTerm(true), nil
	case 'f':
		return ast.InternedTerm(false), nil
	case '"':
		return ast.InternedTerm(tok.String()), nil
	case '0':
		return ast.NewTerm(ast.Number(tok.String())), nil
	}
	return nil, fmt.Errorf("unexpected %v", tok)
}

// Explanation is why a policy made a decision, from OPA's trace of its
// evaluation.
type Explanation struct {
	Decision Decision
	// Rules are the rules whose bodies held, in the order the evaluation
	// reached them: the decision's own branch and every rule it read
	// that held (each reason to deny, ask or allow). Values without
	// conditions (sets of names, patterns) are left out.
	Rules []RuleHit
	// Trace is OPA's whole trace, with locations.
	Trace string
}

// constant reports whether r is a value without conditions (a set of
// names, a pattern): it holds for every input and explains nothing.
func constant(r *ast.Rule) bool {
	if r.Default || len(r.Head.Args) > 0 || len(r.Body) != 1 {
		return false
	}
	t, ok := r.Body[0].Terms.(*ast.Term)
	return ok && t.Value.Compare(ast.Boolean(true)) == 0
}

// RuleHit is one rule that held.
type RuleHit struct {
	File string `json:"file"`
	Row  int    `json:"row"`
	// Rule is the rule's first line, as written.
	Rule string `json:"rule"`
}

// Explain replays rec under the policy with OPA's tracer on and reports
// the rules behind the decision. It is for one call at a time (a person
// asking why): the query it traces is the one every decision uses.
func (p *Policy) Explain(ctx context.Context, rec Recorded, args map[string]any) (*Explanation, error) {
	d, value, err := p.replay(ctx, rec, args)
	if err != nil {
		return nil, err
	}
	buf := topdown.NewBufferTracer()
	if _, err := p.query.Eval(ctx, rego.EvalParsedInput(value), rego.EvalQueryTracer(buf)); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	ex := &Explanation{Decision: d}
	seen := make(map[*ast.Rule]bool)
	for _, ev := range *buf {
		r, ok := ev.Node.(*ast.Rule)
		if !ok || ev.Op != topdown.ExitOp || seen[r] || r.Location == nil || constant(r) {
			continue
		}
		seen[r] = true
		line, _, _ := strings.Cut(string(r.Location.Text), "\n")
		ex.Rules = append(ex.Rules, RuleHit{File: r.Location.File, Row: r.Location.Row, Rule: strings.TrimSpace(line)})
	}
	var tr strings.Builder
	topdown.PrettyTraceWithLocation(&tr, *buf)
	ex.Trace = tr.String()
	return ex, nil
}
