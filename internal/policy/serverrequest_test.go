package policy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	policyfiles "github.com/toolbus/toolbus/policy"
)

// TestServerRequestDenied: the default policy lets a trusted server's
// requests reach the caller's client and refuses an untrusted server's
// elicitation; a policy set without the rule lets none through.
func TestServerRequestDenied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	def, err := Compile(ctx, policyfiles.Default())
	if err != nil {
		t.Fatal(err)
	}
	bare, err := Compile(ctx, Files{"p.rego": "package toolbus\n\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"all\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	caller := events.Identity{ID: "facade/agent:claude-code", Role: "agent"}
	params := json.RawMessage(`{"message":"Your token?","requestedSchema":{"type":"object","properties":{"token":{"type":"string"}}}}`)
	for _, tc := range []struct {
		name    string
		pol     *Policy
		method  string
		trusted bool
		want    string // a reason it holds, "" for none
	}{
		{"trusted elicitation", def, events.MethodElicitation, true, ""},
		{"trusted sampling", def, events.MethodSampling, true, ""},
		{"untrusted sampling", def, events.MethodSampling, false, ""},
		{"untrusted elicitation", def, events.MethodElicitation, false, `MCP server "github" is not trusted`},
		{"no rule", bare, events.MethodSampling, true, "defines no " + ServerRequestQuery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := ToolInput{Name: "create_issue", Kind: events.KindOther, Source: events.SourceMCP, Server: "github", Trust: tc.trusted}
			reasons, err := tc.pol.ServerRequestDenied(ctx, tool, caller, tc.method, params)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(reasons) > 0:
				t.Fatalf("got reasons %q, want none", reasons)
			case tc.want != "" && (len(reasons) != 1 || !strings.Contains(reasons[0], tc.want)):
				t.Fatalf("got reasons %q, want one holding %q", reasons, tc.want)
			}
		})
	}
}

// TestServerRequestParamsInInput: the request's params reach the policy
// as the server sent them, so a rule may judge what is asked.
func TestServerRequestParamsInInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pol, err := Compile(ctx, Files{"p.rego": `package toolbus

decision := {"verdict": "ALLOW", "reason": "all"}

server_request_denied contains "asks for a token" if {
	some name, _ in input.request.params.requestedSchema.properties
	contains(name, "token")
}
`})
	if err != nil {
		t.Fatal(err)
	}
	tool := ToolInput{Name: "x", Source: events.SourceMCP, Server: "s", Trust: true}
	asks := json.RawMessage(`{"message":"?","requestedSchema":{"type":"object","properties":{"api_token":{"type":"string"}}}}`)
	if reasons, err := pol.ServerRequestDenied(ctx, tool, events.Identity{ID: "a"}, events.MethodElicitation, asks); err != nil || len(reasons) != 1 {
		t.Fatalf("got %q, %v; want the rule's reason", reasons, err)
	}
	other := json.RawMessage(`{"message":"?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`)
	if reasons, err := pol.ServerRequestDenied(ctx, tool, events.Identity{ID: "a"}, events.MethodElicitation, other); err != nil || len(reasons) != 0 {
		t.Fatalf("got %q, %v; want no reason", reasons, err)
	}
}
