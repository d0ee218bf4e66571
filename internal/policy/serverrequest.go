package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/toolbus/toolbus/internal/events"
)

// ServerRequestDenied returns why a request an MCP server makes of the
// caller's own client while it serves a call of t may not reach that
// client (ServerRequestQuery): none when it may. It is asked with
// input.tool, input.caller and input.request ({"method", "params"}, the
// params as the server sent them). A policy set without the rule refuses
// every such request, and so does an error: the server is then told its
// request failed, and the caller never sees it.
func (p *Policy) ServerRequestDenied(ctx context.Context, t ToolInput, caller events.Identity, method string, params json.RawMessage) ([]string, error) {
	request := ast.NewObject(kv(ast.InternedTerm("method"), method))
	if len(params) > 0 {
		var v any
		if err := json.Unmarshal(params, &v); err != nil {
			return nil, fmt.Errorf("request params: %w", err)
		}
		pv, err := ast.InterfaceToValue(v)
		if err != nil {
			return nil, fmt.Errorf("request params: %w", err)
		}
		request.Insert(ast.InternedTerm("params"), ast.NewTerm(pv))
	}
	value := ast.NewObject(
		[2]*ast.Term{k.tool, obj(kv(k.name, t.Name), kv(k.kind, string(t.Kind)), kv(k.source, string(t.Source)), kv(k.server, t.Server),
			[2]*ast.Term{k.trust, ast.InternedTerm(t.Trust)}, [2]*ast.Term{k.readOnly, ast.InternedTerm(t.ReadOnly)})},
		[2]*ast.Term{k.caller, identityTerm(caller)},
		[2]*ast.Term{ast.InternedTerm("request"), ast.NewTerm(request)},
	)
	rs, err := p.srvReq.Eval(ctx, rego.EvalParsedInput(value), rego.EvalMetrics(noMetrics))
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return []string{"the policy set defines no " + ServerRequestQuery + ", so it lets no server's request through"}, nil
	}
	list, err := setOf(rs, ServerRequestQuery)
	if err != nil {
		return nil, err
	}
	reasons := make([]string, 0, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s holds %v, not a reason", ServerRequestQuery, v)
		}
		reasons = append(reasons, s)
	}
	sort.Strings(reasons)
	return reasons, nil
}
