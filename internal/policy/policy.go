// Package policy decides whether a tool call may run: an OPA (Rego v1)
// policy, compiled once into a prepared query and evaluated for every
// invocation, answers ALLOW, DENY or ASK_USER with a reason. A policy set is
// a set of .rego files; one whose Rego tests fail is refused.
package policy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/toolbus/toolbus/internal/events"
)

// Query is the rule every policy set must define.
const Query = "data.toolbus.decision"

// IdempotentQuery is the rule that marks a call idempotent: running it a
// second time does no harm, so a call lost with its executor, or with the
// MCP server it ran on, may be retried once under its id (see
// events.Invocation.Attempt). It is evaluated with the decision, in the
// same evaluation (decisionQuery); a policy set that does not define it,
// or defines it as anything but true, marks nothing idempotent.
const IdempotentQuery = "data.toolbus.idempotent"

// ApprovalsQuery is how many distinct proven people must approve a call
// the policy asks about before it runs: a two-person rule is 2. It is
// evaluated with the decision; undefined is 1. Anything but a whole number
// from 1 to MaxApprovals denies the call: a rule that cannot be read must
// not fall back to fewer people.
const ApprovalsQuery = "data.toolbus.approvals_required"

// MaxApprovals bounds ApprovalsQuery: more people than a fleet has at
// hand would leave every such call waiting to its deadline.
const MaxApprovals = 5

// decisionQuery is the one query every call is judged with: the decision;
// in a set that is never undefined, whether the call is idempotent; and in
// arrays, empty when the rule is undefined, the limits the call is held to
// (LimitsQuery) and the people it needs (ApprovalsQuery), checked in
// decideValue.
const decisionQuery = "[" + Query + ", {x | x := " + IdempotentQuery + "}, [l | l := " + LimitsQuery + "], [n | n := " + ApprovalsQuery + "]]"

// PathsQuery is the rule that judges files one by one: the paths of
// input.paths the policy refuses. Tools that choose their files themselves
// (a search over the workspace, a glob of files to read) skip those. A
// policy set that does not define it refuses no file on its own.
const PathsQuery = "data.toolbus.denied_paths"

// RememberQuery is the rule that says what an "always" answer to a call
// the policy asked about is remembered as: a set of allowlist entries,
// evaluated with the call's input and input.answer.outcome. A policy set
// without it remembers nothing.
const RememberQuery = "data.toolbus.remember"

// ApproverQuery is the rule that says whether an approver may answer a
// call's confirmation request: true, or the answer is ignored. It is
// evaluated with the call's input plus input.approver and
// input.answer.outcome. A policy set without it accepts no answer.
const ApproverQuery = "data.toolbus.approver_allowed"

// ApproverDeniedQuery is the set of reasons an approver is refused, told
// to the approver. Optional.
const ApproverDeniedQuery = "data.toolbus.approver_denied"

// FlaggedQuery is the set of parts of a call the policy points an
// approver at ({"text", "why"}). Optional.
const FlaggedQuery = "data.toolbus.flagged"

// ToolDeniedQuery is the set of reasons a caller may not call a tool
// whatever the arguments, asked with input.tool and input.caller alone:
// the MCP facade leaves such tools out of that caller's list. Optional.
const ToolDeniedQuery = "data.toolbus.tool_denied"

// ElicitationQuery is the rule that says whether the person in front of
// the calling agent may answer a call's confirmation request through the
// agent's own client (an MCP elicitation), evaluated with the call's
// input. A policy set without it never asks them.
const ElicitationQuery = "data.toolbus.elicitation_allowed"

// ServerRequestQuery is the set of reasons a request an MCP server makes
// of the caller's own client while it serves a call (sampling, elicitation)
// is refused, asked with input.tool, input.caller and input.request. A
// policy set without it lets no such request through.
const ServerRequestQuery = "data.toolbus.server_request_denied"

// SamplesQuery is the rule that names files the policy deems sensitive
// (.env, id_x, ...), for judging shell globs that could match them. It is
// read once, when the set is compiled.
const SamplesQuery = "data.toolbus.sensitive_samples"

// ConstantsPackage is the package of values a policy makes from its own
// data that no input changes (a regular expression made of the sensitive
// names, say). Its rules are evaluated once, when the set is compiled, and
// the decisions are made with their values as data instead, so
// that no call makes them again; its tests, and opa test, use the rules as
// written.
const ConstantsPackage = "toolbus_constants"

// Files is a policy set: file name → Rego source. Files whose names end in
// _test.rego hold the set's unit tests.
type Files map[string]string

// LoadDir reads the .rego files of dir (not its sub-directories).
func LoadDir(dir string) (Files, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.rego"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("policy: no .rego files in %s", dir)
	}
	files := make(Files, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		files[filepath.Base(p)] = string(data)
	}
	return files, nil
}

// Revision identifies a policy set by its content: the same files give the
// same revision on every host.
func (f Files) Revision() string {
	d := f.Digest()
	return "sha256:" + hex.EncodeToString(d[:8])
}

// Policy is a compiled policy set. It is immutable and safe for concurrent
// use: one prepared query serves every goroutine.
type Policy struct {
	revision string
	files    Files
	tests    int // Rego tests passed at compile
	query    rego.PreparedEvalQuery
	paths    rego.PreparedEvalQuery
	remember rego.PreparedEvalQuery
	approver rego.PreparedEvalQuery
	refusals rego.PreparedEvalQuery
	flagged  rego.PreparedEvalQuery
	toolDeny rego.PreparedEvalQuery
	elicit   rego.PreparedEvalQuery
	srvReq   rego.PreparedEvalQuery
	samples  []string
	// nondeterministic names a built-in (time, randomness, network) that
	// makes the same input give different decisions; empty when none.
	nondeterministic string
	readsSession     bool
	// sessionApart: only SessionPackage reads input.session, and session
	// evaluates it (SessionConclusions).
	sessionApart bool
	session      rego.PreparedEvalQuery
}

// Deterministic reports whether the policy's decision depends only on its
// input, so that a decision may be reused for the same input.
func (p *Policy) Deterministic() bool { return p.nondeterministic == "" }

// Revision is the policy set's revision.
func (p *Policy) Revision() string { return p.revision }

// TestsPassed is how many of the set's Rego tests passed when it was
// compiled.
func (p *Policy) TestsPassed() int { return p.tests }

// Files is the policy set's source.
func (p *Policy) Files() Files { return p.files }

// Compile parses and compiles files, runs their Rego tests and prepares the
// decision query. Any error, including a failing test, refuses the set.
func Compile(ctx context.Context, files Files) (*Policy, error) {
	if len(files) == 0 {
		return nil, errors.New("policy: empty policy set")
	}
	modules, err := parse(files)
	if err != nil {
		return nil, err
	}
	if err := check(modules); err != nil {
		return nil, err
	}
	failures, passed, err := failedTests(ctx, modules)
	if err != nil {
		return nil, err
	} else if len(failures) > 0 {
		return nil, fmt.Errorf("policy: Rego tests fail: %s", strings.Join(failures, "; "))
	}
	sources, store, err := withConstants(ctx, files, modules)
	if err != nil {
		return nil, err
	}
	prepare := func(query string) (rego.PreparedEvalQuery, error) {
		return regoOf(query, sources, store).PrepareForEval(ctx)
	}
	q, err := prepare(decisionQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	pq, err := prepare(PathsQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	rq, err := prepare(RememberQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	aq, err := prepare(ApproverQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	adq, err := prepare(ApproverDeniedQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	fq, err := prepare(FlaggedQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	tq, err := prepare(ToolDeniedQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	eq, err := prepare(ElicitationQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	srq, err := prepare(ServerRequestQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	sq, err := prepare(SamplesQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	samples, err := stringSet(ctx, sq, SamplesQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p := &Policy{revision: files.Revision(), files: files, tests: passed, query: q, paths: pq, remember: rq,
		approver: aq, refusals: adq, flagged: fq, toolDeny: tq, elicit: eq, srvReq: srq, samples: samples,
		nondeterministic: nondeterministic(modules), readsSession: readsSession(modules, func(*ast.Module) bool { return true })}
	if query, apart := sessionApart(modules); p.readsSession && apart {
		if p.session, err = prepare(query); err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		p.sessionApart = true
	}
	return p, nil
}

// withConstants is the set's modules to evaluate calls with, tests left
// out, and the store they read: the modules of ConstantsPackage replaced
// by the values their rules make, as data under data.ConstantsPackage.
func withConstants(ctx context.Context, files Files, modules map[string]*ast.Module) (map[string]string, storage.Store, error) {
	all := make(map[string]string, len(files))
	for name, src := range files {
		if !isTest(name) {
			all[name] = src
		}
	}
	sources := maps.Clone(all)
	var constants []string
	for name := range all {
		if modules[name].Package.Path.String() == "data."+ConstantsPackage {
			constants = append(constants, name)
			delete(sources, name)
		}
	}
	if len(constants) == 0 {
		return sources, nil, nil
	}
	rs, err := regoOf("data."+ConstantsPackage, all, nil).Eval(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %s: %w", ConstantsPackage, err)
	}
	values := map[string]any{}
	if len(rs) > 0 {
		values, _ = rs[0].Expressions[0].Value.(map[string]any)
	}
	// A constant without a value would leave the rules that read it
	// undefined, and a sensitive path would then match nothing: refused.
	for _, name := range constants {
		for _, r := range modules[name].Rules {
			if len(r.Head.Args) > 0 { // a function, dropped with its module
				continue
			}
			rule := r.Head.Name.String()
			if len(r.Head.Reference) > 0 {
				rule = r.Head.Reference[0].Value.(ast.Var).String()
			}
			if _, ok := values[rule]; !ok {
				return nil, nil, fmt.Errorf("policy: %s.%s (%s) has no value; constants may not read input", ConstantsPackage, rule, name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if !ast.IsVarCompatibleString(name) || ast.IsKeyword(name) {
			return nil, nil, fmt.Errorf("policy: %s.%s: a constant needs a name Rego can use as a rule name", ConstantsPackage, name)
		}
	}
	// The values are data, read from the store as OPA values: a rule
	// holding the same literal would be evaluated again on every read.
	store := inmem.NewFromObjectWithOpts(map[string]any{ConstantsPackage: values}, inmem.OptReturnASTValuesOnRead(true))
	return sources, store, nil
}

// regoOf is query over the modules in sources, as every evaluation of a
// policy set is made: Rego v1, a built-in's error an error.
func regoOf(query string, sources map[string]string, store storage.Store) *rego.Rego {
	opts := []func(*rego.Rego){rego.Query(query), rego.SetRegoVersion(ast.RegoV1), rego.StrictBuiltinErrors(true)}
	if store != nil {
		opts = append(opts, rego.Store(store))
	}
	for name, src := range sources {
		opts = append(opts, rego.Module(name, src))
	}
	return rego.New(opts...)
}

// setOf is the members of the set a query's result is; undefined is the
// empty set.
func setOf(rs rego.ResultSet, name string) ([]any, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	list, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a set", name)
	}
	return list, nil
}

// stringSet evaluates a query without input that gives a set of strings;
// undefined is the empty set.
func stringSet(ctx context.Context, q rego.PreparedEvalQuery, name string) ([]string, error) {
	rs, err := q.Eval(ctx)
	if err != nil {
		return nil, err
	}
	list, err := setOf(rs, name)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s holds %v, not a string", name, v)
		}
		out = append(out, s)
	}
	return out, nil
}

// Samples are the file names the policy deems sensitive, as examples
// (a pattern such as id_* as id_x), for shell.Analysis.Locate.
func (p *Policy) Samples() []string { return p.samples }

// nondeterministic returns the first built-in the modules call that OPA
// marks nondeterministic (time.now_ns, rand.intn, http.send...).
func nondeterministic(modules map[string]*ast.Module) string {
	found := ""
	for name, m := range modules {
		if isTest(name) {
			continue
		}
		check := func(op string) {
			if b, ok := ast.BuiltinMap[op]; ok && b.Nondeterministic && found == "" {
				found = b.Name
			}
		}
		// Calls are expressions (x := f(y)) or terms nested anywhere.
		ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.Expr:
				if x.IsCall() {
					check(x.Operator().String())
				}
			case ast.Call:
				if len(x) > 0 {
					check(x[0].String())
				}
			}
			return false
		}).Walk(m)
	}
	return found
}

func isTest(name string) bool { return strings.HasSuffix(name, "_test.rego") }

// Test runs the Rego tests of files, as `opa test` would, sorted by name.
func Test(ctx context.Context, files Files) ([]TestResult, error) {
	modules, err := parse(files)
	if err != nil {
		return nil, err
	}
	return testModules(ctx, modules)
}

func parse(files Files) (map[string]*ast.Module, error) {
	modules := make(map[string]*ast.Module, len(files))
	for name, src := range files {
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		modules[name] = m
	}
	return modules, nil
}

// TestResult is the outcome of one Rego test.
type TestResult struct {
	Name  string
	File  string
	Pass  bool
	Skip  bool
	Error string
}

// failedTests runs the Rego tests of modules, and says which failed and
// how many passed.
func failedTests(ctx context.Context, modules map[string]*ast.Module) (failures []string, passed int, err error) {
	hasTests := false
	for name := range modules {
		hasTests = hasTests || isTest(name)
	}
	if !hasTests {
		return nil, 0, nil
	}
	results, err := testModules(ctx, modules)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range results {
		if r.Pass {
			passed++
		}
		if !r.Pass && !r.Skip {
			msg := r.Name + " failed"
			if r.Error != "" {
				msg = r.Name + ": " + r.Error
			}
			failures = append(failures, msg)
		}
	}
	return failures, passed, nil
}

// TestCaseTimeout bounds one Rego test case of a policy set.
const TestCaseTimeout = 2 * time.Minute

func testModules(ctx context.Context, modules map[string]*ast.Module) ([]TestResult, error) {
	// A test case gets far more than OPA's default of 5 s: a busy
	// executor must not refuse a good policy because its tests ran
	// slowly. One that never ends is still stopped (and ctx bounds all).
	ch, err := tester.NewRunner().SetModules(modules).SetDefaultRegoVersion(ast.RegoV1).RaiseBuiltinErrors(true).SetTimeout(TestCaseTimeout).RunTests(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("policy: run Rego tests: %w", err)
	}
	var results []TestResult
	for r := range ch {
		tr := TestResult{Name: r.Package + "." + r.Name, File: r.Location.File, Pass: r.Pass(), Skip: r.Skip}
		if r.Error != nil {
			tr.Error = r.Error.Error()
		}
		results = append(results, tr)
	}
	slices.SortFunc(results, func(a, b TestResult) int { return strings.Compare(a.Name, b.Name) })
	return results, nil
}

// Decision is the policy's answer for one invocation.
type Decision struct {
	Verdict events.Verdict
	Reason  string
	// Remember says whether an "always" answer to this call may be kept.
	Remember bool
	// Idempotent says the policy marks the call idempotent
	// (IdempotentQuery): it may be retried once.
	Idempotent bool
	// Revision is the policy revision that decided.
	Revision string
	// Limits are the limits the call is held to once it may run
	// (LimitsQuery); none for a policy set without the rule.
	Limits []Limit
	// ApprovalsRequired is how many distinct proven people must approve
	// the call when the verdict asks (ApprovalsQuery): 1 unless the
	// policy says more.
	ApprovalsRequired int
}

// Decide evaluates the policy for input. It never fails open: an error, an
// undefined decision or a malformed one is a DENY that says why.
//
// A shell line the policy allows is first read by bash's own parser (see
// shell.Analysis.CheckWithBash): when bash reads it differently than the
// analysis, the line is marked opaque and judged again.
func (p *Policy) Decide(ctx context.Context, input *Input) Decision {
	d, _ := p.decideInput(ctx, input)
	return d
}

// decideInput is Decide, and the input document it decided on last (nil
// when input could not be made one).
func (p *Policy) decideInput(ctx context.Context, input *Input) (Decision, ast.Value) {
	value, err := input.value()
	if err != nil {
		return p.policyError("input: %v", err), nil
	}
	d := p.decideValue(ctx, value)
	if sh := input.Shell; d.Verdict == events.Allow && sh != nil {
		if reason := sh.CheckWithBash(ctx); reason != "" {
			if value, err = input.value(); err != nil {
				return p.policyError("input: %v", err), nil
			}
			d = p.decideValue(ctx, value)
		}
	}
	return d, value
}

// policyError is the DENY of a decision that could not be made.
func (p *Policy) policyError(format string, args ...any) Decision {
	return Decision{Verdict: events.Deny, Reason: "policy error: " + fmt.Sprintf(format, args...), Revision: p.revision}
}

// decideValue evaluates the decision query on an input document.
func (p *Policy) decideValue(ctx context.Context, value ast.Value) Decision {
	deny := p.policyError
	rs, err := evalValue(ctx, p.query, value)
	if err != nil {
		var halt *topdown.Error
		if errors.As(err, &halt) {
			return deny("%s", halt.Message)
		}
		return deny("%v", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return deny("%s is undefined", Query)
	}
	both, ok := rs[0].Expressions[0].Value.(*ast.Array)
	if !ok || both.Len() != 4 {
		return deny("%s is undefined", Query)
	}
	out, ok := both.Elem(0).Value.(ast.Object)
	if !ok {
		return deny("%s is not an object", Query)
	}
	// Only true is idempotent: a set holding anything else, or more
	// than one value (a rule defined twice over), marks nothing.
	idem, _ := both.Elem(1).Value.(ast.Set)
	idempotent := idem != nil && idem.Len() == 1 && idem.Contains(ast.BooleanTerm(true))
	var limits []Limit
	if given, _ := both.Elem(2).Value.(*ast.Array); given != nil && given.Len() == 1 {
		if limits, err = limitsOf(given.Elem(0).Value); err != nil {
			return deny("%v", err)
		}
	}
	approvals := 1
	if given, _ := both.Elem(3).Value.(*ast.Array); given != nil && given.Len() > 0 {
		n, ok := given.Elem(0).Value.(ast.Number)
		k, isInt := n.Int()
		if given.Len() != 1 || !ok || !isInt || k < 1 || k > MaxApprovals {
			return deny("%s is %v, not a whole number from 1 to %d", ApprovalsQuery, given, MaxApprovals)
		}
		approvals = k
	}
	verdict, _ := field(out, verdictKey).(ast.String)
	reason, _ := field(out, reasonKey).(ast.String)
	remember, _ := field(out, rememberKey).(ast.Boolean)
	if !events.Verdict(verdict).Valid() {
		return deny("%s.verdict is %q, not ALLOW, DENY or ASK_USER", Query, string(verdict))
	}
	return Decision{Verdict: events.Verdict(verdict), Reason: string(reason), Remember: bool(remember), Idempotent: idempotent, Revision: p.revision, Limits: limits,
		ApprovalsRequired: approvals}
}

// The fields of a decision, as terms made once.
var verdictKey, reasonKey, rememberKey = str("verdict"), str("reason"), str("remember")

// field is the value of key in o, nil when o has none.
func field(o ast.Object, key *ast.Term) ast.Value {
	if v := o.Get(key); v != nil {
		return v.Value
	}
	return nil
}

// evalValue evaluates q on an input document, its result left as OPA
// values (ast.Value) rather than made into Go values, and its
// cancellation tied to ctx without a goroutine of its own: OPA starts one
// per evaluation otherwise, to watch ctx.
func evalValue(ctx context.Context, q rego.PreparedEvalQuery, value ast.Value) (rego.ResultSet, error) {
	cancel := topdown.NewCancel()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, cancel.Cancel)
		defer stop()
	}
	return q.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics), rego.EvalExternalCancel(cancel), asValues)
}

// asValues keeps a result's values as OPA made them.
var asValues = rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t.Value, nil })

// noMetrics keeps OPA from making a metrics set for every evaluation.
var noMetrics = metrics.NoOp()

// DeniedPaths returns the paths of input.Paths that the policy refuses for
// this call (PathsQuery). It fails closed: when the rule cannot be
// evaluated or gives something other than a set of strings, the error
// says why and the caller must treat every path as refused.
func (p *Policy) DeniedPaths(ctx context.Context, input *Input) (map[string]bool, error) {
	value, err := input.value()
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	rs, err := p.paths.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, nil // the policy judges no file on its own
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, fmt.Errorf("%s gave %d results", PathsQuery, len(rs))
	}
	list, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a set of paths", PathsQuery)
	}
	denied := make(map[string]bool, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s holds %v, not a path", PathsQuery, v)
		}
		denied[s] = true
	}
	return denied, nil
}

// Remember returns the allowlist entries an "always" answer (outcome) to
// the call of input is kept as, from RememberQuery. It fails closed: an
// error or a malformed entry remembers nothing.
func (p *Policy) Remember(ctx context.Context, input *Input, outcome events.Outcome) ([]AllowEntry, error) {
	in := *input
	in.Answer = outcome
	value, err := in.value()
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	rs, err := p.remember.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	if err != nil {
		return nil, err
	}
	list, err := setOf(rs, RememberQuery)
	if err != nil {
		return nil, err
	}
	out := make([]AllowEntry, 0, len(list))
	for _, v := range list {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		var e AllowEntry
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("%s holds %s: %v", RememberQuery, data, err)
		}
		switch {
		case e.Scope == "command" && len(e.Argv) > 0 && e.Tool != "":
		case e.Scope == "path" && e.Path != "" && e.Tool != "":
		case e.Scope == "tool" && e.Tool != "":
		case e.Scope == "server" && e.Server != "":
		default:
			return nil, fmt.Errorf("%s holds %s, which is not an allowlist entry", RememberQuery, data)
		}
		out = append(out, e)
	}
	return out, nil
}

// ApproverAllowed asks ApproverQuery whether approver may give outcome as
// the answer to the call of input. It fails closed: anything but true —
// undefined, another value, an error — refuses, and the reason says why
// (the policy's own reasons from ApproverDeniedQuery when it gives some).
func (p *Policy) ApproverAllowed(ctx context.Context, input *Input, approver *Approver, outcome events.Outcome) (bool, string) {
	in := *input
	in.Answer, in.Approver = outcome, approver
	value, err := in.value()
	if err != nil {
		return false, "policy error: input: " + err.Error()
	}
	rs, err := p.approver.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	switch {
	case err != nil:
		return false, "policy error: " + err.Error()
	case len(rs) == 0:
		return false, "the policy set defines no " + ApproverQuery + ", so it accepts no answer"
	}
	if ok, _ := rs[0].Expressions[0].Value.(bool); ok {
		return true, ""
	}
	rs, err = p.refusals.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	if err != nil {
		return false, "policy error: " + err.Error()
	}
	var reasons []string
	if list, err := setOf(rs, ApproverDeniedQuery); err == nil {
		for _, v := range list {
			if s, ok := v.(string); ok {
				reasons = append(reasons, s)
			}
		}
	}
	if len(reasons) == 0 {
		return false, fmt.Sprintf("the policy does not let %s answer this call", approver.ID)
	}
	sort.Strings(reasons)
	return false, strings.Join(reasons, "; ")
}

// ElicitationAllowed asks ElicitationQuery whether the person in front of
// the caller may answer the confirmation request of the call of input.
// Anything but true, an error included, is no: the request then goes to
// the approvers on tool.confirm alone.
func (p *Policy) ElicitationAllowed(ctx context.Context, input *Input) bool {
	value, err := input.value()
	if err != nil {
		return false
	}
	rs, err := p.elicit.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	if err != nil || len(rs) == 0 {
		return false
	}
	ok, _ := rs[0].Expressions[0].Value.(bool)
	return ok
}

// Flagged returns the parts of the call of input the policy points an
// approver at (FlaggedQuery), sorted; nil when the set has no such rule.
func (p *Policy) Flagged(ctx context.Context, input *Input) ([]events.Flag, error) {
	value, err := input.value()
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	rs, err := p.flagged.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	if err != nil {
		return nil, err
	}
	list, err := setOf(rs, FlaggedQuery)
	if err != nil {
		return nil, err
	}
	out := make([]events.Flag, 0, len(list))
	for _, v := range list {
		m, _ := v.(map[string]any)
		text, _ := m["text"].(string)
		why, _ := m["why"].(string)
		if text == "" {
			return nil, fmt.Errorf("%s holds %v, not {text, why}", FlaggedQuery, v)
		}
		out = append(out, events.Flag{Text: text, Why: why})
	}
	slices.SortFunc(out, func(a, b events.Flag) int {
		if c := strings.Compare(a.Text, b.Text); c != 0 {
			return c
		}
		return strings.Compare(a.Why, b.Why)
	})
	return out, nil
}

// ToolDenied returns why caller may not call the tool whatever the
// arguments (ToolDeniedQuery); none when it may, or when the set has no
// such rule. An error means the policy could not say: a caller of it
// that lists tools must leave the tool out.
func (p *Policy) ToolDenied(ctx context.Context, t ToolInput, caller events.Identity) ([]string, error) {
	value := ast.NewObject(
		[2]*ast.Term{k.tool, obj(kv(k.name, t.Name), kv(k.kind, string(t.Kind)), kv(k.source, string(t.Source)), kv(k.server, t.Server),
			[2]*ast.Term{k.trust, ast.InternedTerm(t.Trust)}, [2]*ast.Term{k.readOnly, ast.InternedTerm(t.ReadOnly)})},
		[2]*ast.Term{k.caller, identityTerm(caller)},
	)
	rs, err := p.toolDeny.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	if err != nil {
		return nil, err
	}
	list, err := setOf(rs, ToolDeniedQuery)
	if err != nil {
		return nil, err
	}
	reasons := make([]string, 0, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s holds %v, not a reason", ToolDeniedQuery, v)
		}
		reasons = append(reasons, s)
	}
	sort.Strings(reasons)
	return reasons, nil
}
