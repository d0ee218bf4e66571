package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/toolbus/toolbus/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/envelopes.txtar from the examples")

var (
	when   = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	agent  = Identity{ID: "agent:gemini-cli", Role: "agent", Agent: "gemini-cli", Session: "s-42", User: "ada", Host: "dev-1"}
	schema = json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}`)
)

func hdr(id string, who Identity) Header { return Header{ID: id, Time: when, Sender: who} }

// examples holds one filled-in value of every envelope, keyed by the file
// name it has in the golden archive.
func examples() map[string]Envelope {
	registry := Identity{ID: "registry@dev-1", Role: "registry", Host: "dev-1"}
	return map[string]Envelope{
		"register_request.json": &RegisterRequest{Header: hdr("req-1", Identity{ID: "executor@dev-1", Role: "provider", Host: "dev-1"}),
			Provider: "executor@dev-1", Source: SourceMCP, Server: "github", Trust: true, Replace: true,
			Batch: &Batch{ID: "b-1", Seq: 0, Last: true},
			Tools: []ToolSpec{{Name: "create_issue", Description: "Create an issue.", Kind: KindEdit, Parameters: schema,
				Annotations: json.RawMessage(`{"destructiveHint":false}`)}}},
		"register_reply.json": &RegisterReply{Header: hdr("rep-1", registry), RequestID: "req-1",
			Tools:   []ToolOutcome{{Requested: "create_issue", Name: "github__create_issue", Warning: `name "create_issue" is taken; registered as "github__create_issue"`}},
			Removed: []string{"github__old"}},
		"remove_request.json":  &RemoveRequest{Header: hdr("req-2", Identity{ID: "cli@dev-1", Role: "cli"}), Sources: []Source{SourceDiscovered, SourceMCP}},
		"toggle_request.json":  &ToggleRequest{Header: hdr("req-3", Identity{ID: "cli@dev-1", Role: "cli"}), Enable: false, Kinds: []Kind{KindExecute}, Categories: []string{"web"}},
		"change_reply.json":    &ChangeReply{Header: hdr("rep-3", registry), RequestID: "req-3", Changes: []Change{{Op: OpDeactivated, Name: "run_shell_command"}}, Unknown: []string{"nope"}},
		"catalog_changed.json": &CatalogChanged{Header: hdr("ev-1", registry), Cause: "req-1", Changes: []Change{{Op: OpAdded, Name: "github__create_issue"}}},
		"invocation.json":      &Invocation{Header: hdr("inv-1", agent), Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`), TimeoutMillis: 120000},
		"invocation_server_requests.json": &Invocation{Header: hdr("inv-7", agent), Tool: "github__create_issue", Args: json.RawMessage(`{"title":"x"}`),
			ServerRequests: []string{MethodSampling, MethodElicitation}},
		// A subscription to a resource of an MCP server: a call of its
		// entry, with the URI a read would have.
		"invocation_subscribe.json": &Invocation{Header: hdr("inv-7", agent), Tool: "resource.day", Args: json.RawMessage(`{"uri":"notes://day/7"}`), Op: OpSubscribe},
		// The one retry of a lost read: the same id, tool and arguments,
		// attempt 2, with a longer deadline.
		"invocation_retry.json": &Invocation{Header: hdr("inv-1", agent), Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`), TimeoutMillis: 240000, Attempt: 2},
		"result_retry.json": &Result{Header: Header{ID: "res-8", Time: when, Sender: Identity{ID: "executor@dev-2", Role: "executor"}, Principal: "agent-gemini"}, InvocationID: "inv-1", Tool: "read_file",
			LLMContent: "hello", ReturnDisplay: "hello", Policy: &PolicyVerdict{Verdict: Allow, Reason: "read tools are allowed", Revision: "sha256:0f3a", Idempotent: true}, Attempt: 2,
			Decision: &Decision{Header: Header{V: Version, Type: "tool.decision", ID: "dec-8", Time: when, Sender: Identity{ID: "executor@dev-2", Role: "executor"}, Principal: "agent-gemini"}, InvocationID: "inv-1", Tool: "read_file",
				Verdict: Allow, Reason: "read tools are allowed", PolicyRevision: "sha256:0f3a", Idempotent: true, Attempt: 2}},
		"step_retried.json": &Step{Header: hdr("st-2", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-1", Tool: "github__get_issue", Step: StepRetried,
			Detail: `MCP tool "get_issue" of server "github" failed: the server went away during the call`, Attempt: 2},
		"cancel_gave_up_retry.json":      &CancelRequest{Header: hdr("cx-3", agent), InvocationID: "inv-1", Reason: "no executor runs the call", GaveUp: true, Attempt: 2},
		"invocation_composite_step.json": &Invocation{Header: hdr("inv-8.1", agent), Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`), Composite: "inv-8"},
		"mcp_resource_updated.json":      &MCPResourceUpdated{Header: hdr("up-1", Identity{ID: "executor@dev-1", Role: "executor"}), Executor: "executor@dev-1", Server: "notes", URI: "notes://day/7"},
		"result_recorded.json": &Result{Header: Header{ID: "res-9", Time: when, Sender: Identity{ID: "executor@dev-1", Role: "executor"}, Principal: "agent-gemini"}, InvocationID: "inv-1", Tool: "read_file",
			LLMContent: "hello", ReturnDisplay: "hello", Policy: &PolicyVerdict{Verdict: Allow, Reason: "read tools are allowed", Revision: "sha256:0f3a"},
			Decision: &Decision{Header: Header{V: Version, Type: "tool.decision", ID: "dec-9", Time: when, Sender: Identity{ID: "executor@dev-1", Role: "executor"}, Principal: "agent-gemini"}, InvocationID: "inv-1", Tool: "read_file",
				Verdict: Allow, Reason: "read tools are allowed", PolicyRevision: "sha256:0f3a", Input: json.RawMessage(`{"paths":["/w/README.md"]}`)}},
		"decision.json": &Decision{Header: hdr("dec-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-1", Tool: "read_file", Verdict: Allow, Reason: "read kind is allowed", PolicyRevision: "sha256:0f3a",
			Input: json.RawMessage(`{"allowlist":[],"caller":{"id":"agent:claude@dev-1"},"env":{"home":"/home/ada","workspace":"/w"},"paths":["/w/README.md"],"tool":{"kind":"read","name":"read_file","source":"builtin"}}`)},
		"confirm_request.json": &ConfirmRequest{Header: hdr("cr-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-2", Tool: "run_shell_command", Kind: KindExecute,
			Caller: agent, Args: json.RawMessage(`{"command":"make test"}`), Reason: "execute kind asks the user", Command: "make test", DeadlineMillis: 300000},
		"confirm_answer.json": &ConfirmAnswer{Header: hdr("ca-1", Identity{ID: "approver:ada", Role: "approver", User: "ada"}), InvocationID: "inv-2", Outcome: ModifyWithEditor, Args: json.RawMessage(`{"command":"make test-short"}`)},
		"confirm_request_shell.json": &ConfirmRequest{Header: hdr("cr-2", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-4", Tool: "run_shell_command", Kind: KindExecute,
			Caller: agent, Args: json.RawMessage(`{"command":"git status && make"}`), Reason: "execute tools ask the user", Command: "git status && make",
			Flagged: []Flag{{Text: "make", Why: "not on the allowlist"}}, Always: []AlwaysOption{{Outcome: ProceedAlways, Remembers: "the command make"}},
			DeadlineMillis: 300000, AnswerTo: "_INBOX.x1"},
		"confirm_cancel.json":    &ConfirmAnswer{Header: hdr("ca-2", Identity{ID: "approver:ada", Role: "approver", User: "ada"}), InvocationID: "inv-4", Outcome: Cancel, Message: "use make test instead"},
		"confirm_dismissed.json": &ConfirmDismissed{Header: hdr("cd-1", AgentUser(agent)), InvocationID: "inv-2", Why: "dismissed the question"},
		"confirm_ack.json":       &ConfirmAck{Header: hdr("ack-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-4", Reason: "approver:bob may not answer: nobody may approve a call they made"},
		"confirm_rejected.json":  &ConfirmRejected{Header: hdr("rj-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-4", Answer: ConfirmAnswer{Header: hdr("ca-3", agent), InvocationID: "inv-4", Outcome: ProceedOnce}, Reason: "nobody may approve a call they made"},
		"confirm_closed.json":    &ConfirmClosed{Header: hdr("cc-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-5", ErrorType: ErrConfirmationTimeout, Reason: "No approver answered within 5m0s, so the call is denied.", AnswerTo: "toolbus.answer.q3Vb0hS1nYxJk2dQ7sLw9A"},
		"confirm_waiting.json": &ConfirmWaiting{Header: hdr("cw-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-2", Tool: "write_file", Reason: "edits ask the user",
			DeadlineMillis: 300000, Hint: "open the console at http://127.0.0.1:7878/ or run `toolbus confirm`"},
		"queued.json": &Queued{Header: hdr("qu-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-8", Tool: "run_shell_command",
			Limit: "execute calls at once", Position: 2, DeadlineMillis: 120000},
		"result_rate_limited.json": &Result{Header: Header{ID: "res-4", Time: when, Sender: Identity{ID: "executor@dev-1", Role: "executor"}, Principal: "agent-7"}, InvocationID: "inv-9", Tool: "run_shell_command",
			LLMContent: "Refused by the limit \"execute calls a minute\": at most 60 calls per 1m0s; the call was not run. Retry after 12.5s.", ReturnDisplay: "Refused by the limit \"execute calls a minute\": at most 60 calls per 1m0s; the call was not run. Retry after 12.5s.",
			Error:  &ToolError{Type: ErrRateLimited, Message: "Refused by the limit \"execute calls a minute\": at most 60 calls per 1m0s; the call was not run. Retry after 12.5s.", RetryAfterMillis: 12500},
			Policy: &PolicyVerdict{Verdict: Allow, Reason: "execute tools ask the user", Revision: "sha256:0f3a"}},
		"server_request.json": &ServerRequest{Header: hdr("sr-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-7", Server: "github",
			Method: MethodElicitation, Params: json.RawMessage(`{"message":"Which repository?","requestedSchema":{"type":"object","properties":{"repo":{"type":"string"}}}}`),
			AnswerTo: "toolbus.answer.Zk1vQm9yVjJ4Y3dUbXpLcA", DeadlineMillis: 27000},
		"server_answer.json": &ServerAnswer{Header: hdr("sa-1", agent), InvocationID: "inv-7", Result: json.RawMessage(`{"action":"accept","content":{"repo":"toolbus/toolbus"}}`)},
		"server_answer_error.json": &ServerAnswer{Header: hdr("sa-2", agent), InvocationID: "inv-7",
			Error: &RPCError{Code: -1, Message: "the user rejected the sampling request"}},
		"hook_run.json": &HookRun{Header: hdr("hk-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-2", Tool: "run_shell_command",
			Event: HookPre, AgentEvent: "PreToolUse", Hook: ".claude/hooks/no-curl.sh", Command: ".claude/hooks/no-curl.sh", File: ".claude/settings.json",
			Outcome: HookDeny, Message: "curl is not allowed here", ExitCode: new(2), DurationMillis: 4},
		"hook_run_timed_out.json": &HookRun{Header: hdr("hk-2", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-1", Tool: "read_file",
			Event: HookPost, AgentEvent: "AfterTool", Hook: "audit-log", Command: "node audit.js", File: ".gemini/settings.json",
			Outcome: HookTimedOut, Message: "did not finish within 1m0s and was killed", DurationMillis: 61002},
		"audit_checkpoint.json": &AuditCheckpoint{Header: hdr("ck-1", Identity{ID: "bus@dev-1", Role: "bus"}), Index: 1, From: 1, To: 5000, Count: 5000,
			Digest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Previous: "", Key: "3b1f0c2d9e8a7b6c", Signature: "c2lnbmF0dXJl"},
		"step.json":           &Step{Header: hdr("st-1", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-1", Tool: "read_file", Step: "validated"},
		"output_request.json": &OutputRequest{Header: hdr("out-1", agent), Name: "inv-3.part0"},
		"revoke_request.json": &RevokeRequest{Header: hdr("rv-1", Identity{ID: "approver:ada", Role: "approver", User: "ada"}), Keys: []string{"4f1c2a9be07d3e5a61c08b2f"}},
		"revoke_reply.json":   &RevokeReply{Header: hdr("rv-2", Identity{ID: "executor@dev-1", Role: "executor"}), RequestID: "rv-1", Revoked: []string{"4f1c2a9be07d3e5a61c08b2f"}, Unknown: []string{"0000"}},
		"cancel.json":         &CancelRequest{Header: hdr("cx-1", Identity{ID: "cli@dev-1", Role: "cli"}), InvocationID: "inv-2", Reason: "taking too long"},
		// A caller that stopped waiting: it publishes the call's terminal
		// result itself, and the executor's result comes Late.
		"cancel_gave_up.json": &CancelRequest{Header: hdr("cx-2", agent), InvocationID: "inv-3", Reason: "the caller stopped waiting: context deadline exceeded", GaveUp: true},
		"result_late.json": &Result{Header: hdr("res-2", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-3", Tool: "read_file",
			LLMContent:    "[Output truncated: showing 40000 of 20000000 characters. The whole output could not be kept: the object store TOOLBUS_OUTPUTS is full (maximum bytes exceeded); older outputs make room as they expire.]",
			ReturnDisplay: "Read 2000 lines from big.txt", Truncated: true, Late: true},
		// An MCP tool's result kept as its server sent it: block by
		// block, a link as a link, structuredContent and _meta.
		"result_mcp.json": &Result{Header: hdr("res-3", Identity{ID: "executor@dev-1", Role: "executor"}), InvocationID: "inv-6", Tool: "weather",
			LLMContent: "Sunny.\nResource Link: Forecast at https://wx.test/f\n\n[From hook \"audit\" (AfterTool):]\nseen", ReturnDisplay: "Sunny.",
			Parts: []Part{
				{Type: PartText, Text: "Sunny.", Annotations: json.RawMessage(`{"audience":["user"],"priority":0.7}`)},
				{Type: PartImage, MIMEType: "image/png", Data: "iVBORw0KGgo=", Size: 12, Meta: json.RawMessage(`{"wx.test/map":true}`)},
				{Type: PartLink, URI: "https://wx.test/f", Name: "forecast", Title: "Forecast", MIMEType: "text/html", ResourceSize: new(int64(2048))},
				{Type: PartResource, URI: "file:///log.txt", MIMEType: "text/plain", Ref: "TOOLBUS_OUTPUTS/inv-6.part3", RefText: true, Size: 400000},
			},
			PartsWhole: true, PartsText: 51, StructuredContent: json.RawMessage(`{"temp":21.5,"sky":"clear"}`), Meta: json.RawMessage(`{"wx.test/trace":"abc"}`)},
		"result.json": &Result{Header: Header{ID: "res-1", Time: when, Sender: Identity{ID: "executor@dev-1", Role: "executor"}, Principal: "agent-7"}, InvocationID: "inv-2", Tool: "run_shell_command",
			LLMContent: "Command denied.", ReturnDisplay: "Command denied.", Error: &ToolError{Type: ErrPolicyDenied, Message: "rm -rf / is a dangerous command"},
			Policy: &PolicyVerdict{Verdict: Deny, Reason: "rm -rf / is a dangerous command", Revision: "sha256:0f3a"}},
	}
}

func exampleTool() *Tool {
	return &Tool{V: Version, Name: "github__create_issue", DisplayName: "create_issue (github MCP Server)", Description: "Create an issue.",
		Kind: KindOther, Category: "mcp", Source: SourceMCP, Server: "github", ServerToolName: "create_issue", Trust: true,
		Active: true, ExportName: "github__create_issue", Parameters: schema, Hosts: []string{"executor@dev-1"}, Seq: 7, UpdatedAt: when}
}

func TestGoldenEnvelopes(t *testing.T) {
	t.Parallel()
	const path = "testdata/envelopes.txtar"
	ex := examples()
	var files []txtar.File
	for name, e := range ex {
		data, err := Encode(e)
		if err != nil {
			t.Fatalf("%s: Encode: %v", name, err)
		}
		files = append(files, txtar.File{Name: name, Data: indent(t, data)})
	}
	data, err := json.Marshal(exampleTool())
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, txtar.File{Name: "catalog_tool.json", Data: indent(t, data)})
	sortFiles(files)
	ar := testkit.Golden(t, path, "Golden wire forms of every toolbus envelope and of a catalogue entry.\nRegenerate with: go test ./internal/events -run TestGoldenEnvelopes -update\n", *update, files)
	// Every golden envelope decodes back to the value it came from.
	for name, e := range ex {
		golden := find(ar, name)
		got, err := decodeAs(e, golden)
		if err != nil {
			t.Errorf("%s: decode golden: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(normalise(t, got), normalise(t, e)) {
			t.Errorf("%s: round trip changed the value:\ngot  %+v\nwant %+v", name, got, e)
		}
	}
	tool, err := DecodeTool(find(ar, "catalog_tool.json"))
	if err != nil {
		t.Fatalf("catalog_tool.json: %v", err)
	}
	if tool.Name != "github__create_issue" || tool.Server != "github" || !tool.Active {
		t.Errorf("catalog_tool.json decoded to %+v", tool)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	valid, err := Encode(&Invocation{Header: hdr("inv-9", agent), Tool: "read_file", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   string
		want error
		says string
	}{
		{"not json", `{"v":1,`, ErrMalformed, "unexpected EOF"},
		{"array", `[1,2]`, ErrMalformed, "not a JSON object"},
		{"no version", `{"type":"tool.invocation"}`, ErrMalformed, `no "v" field`},
		{"future version", `{"v":2,"type":"tool.invocation"}`, ErrVersion, "got v=2"},
		{"no type", `{"v":1}`, ErrMalformed, `no "type" field`},
		{"other type", `{"v":1,"type":"tool.result"}`, ErrType, `got "tool.result", want "tool.invocation"`},
		{"field of wrong type", `{"v":1,"type":"tool.invocation","id":"x","sender":{"id":"a"},"tool":7}`, ErrMalformed, `unmarshal JSON number into Go string within "/tool"`}, // the library varies "cannot" and "unable to" on purpose
		{"no sender", `{"v":1,"type":"tool.invocation","id":"x","tool":"t"}`, ErrInvalid, "sender.id is empty"},
		{"no tool", `{"v":1,"type":"tool.invocation","id":"x","sender":{"id":"a"}}`, ErrInvalid, "tool is empty"},
		{"args not object", `{"v":1,"type":"tool.invocation","id":"x","sender":{"id":"a"},"tool":"t","args":[1]}`, ErrInvalid, "args is not a JSON object"},
		{"unknown op", `{"v":1,"type":"tool.invocation","id":"x","sender":{"id":"a"},"tool":"t","op":"delete"}`, ErrInvalid, `unknown op "delete"`},
		{"negative attempt", `{"v":1,"type":"tool.invocation","id":"x","sender":{"id":"a"},"tool":"t","attempt":-1}`, ErrInvalid, "attempt is negative"},
		{"valid", string(valid), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode[Invocation]([]byte(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("got error %v, want %v", err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %q does not say %q", err, tt.says)
			}
		})
	}
}

func TestRegisterRequestValidate(t *testing.T) {
	t.Parallel()
	base := func() *RegisterRequest {
		return &RegisterRequest{Header: hdr("r", agent), Provider: "p", Source: SourceBuiltin}
	}
	tests := []struct {
		name   string
		mutate func(*RegisterRequest)
		says   string
	}{
		{"ok", func(*RegisterRequest) {}, ""},
		{"no provider", func(r *RegisterRequest) { r.Provider = "" }, "provider is empty"},
		{"bad source", func(r *RegisterRequest) { r.Source = "plugin" }, `unknown source "plugin"`},
		{"mcp without server", func(r *RegisterRequest) { r.Source = SourceMCP }, "needs a server name"},
		{"server for builtin", func(r *RegisterRequest) { r.Server = "x" }, `server "x" given for source builtin`},
		{"batch without id", func(r *RegisterRequest) { r.Batch = &Batch{} }, "batch needs an id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.mutate(r)
			_, err := Encode(r)
			if tt.says == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("got %v, want ErrInvalid saying %q", err, tt.says)
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder of untrusted input: none
// may panic, and whatever decodes must re-encode and decode to itself.
func FuzzDecode(f *testing.F) {
	for _, e := range examples() {
		data, err := Encode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	tool, _ := json.Marshal(exampleTool())
	f.Add(tool)
	f.Add([]byte(`{"v":1,"type":"tool.invocation","id":"x","sender":{"id":"a"},"tool":"t","args":{"a":[1,{"b":null}]}}`))
	f.Add([]byte(`{"v":1e400}`))
	for _, e := range []Envelope{
		&ShadowDecision{Header: hdr("s-1", Identity{ID: "executor@dev-1"}), InvocationID: "call-1", Tool: "read_file", Principal: "agent",
			Live:   PolicyVerdict{Verdict: Allow, Reason: "reads are allowed", Revision: "sha256:0123456789abcdef"},
			Shadow: PolicyVerdict{Verdict: Deny, Reason: "reads are frozen", Revision: "sha256:fedcba9876543210"}, InputDigest: strings.Repeat("ab", 32)},
		&ShadowStats{Header: hdr("s-2", Identity{ID: "executor@dev-1"}), Revision: "sha256:fedcba9876543210", Judged: 100, Disagreed: 3, Dropped: 1},
	} {
		data, err := Encode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(e Envelope, err error) {
			if err != nil {
				return
			}
			again, err := Encode(e)
			if err != nil {
				t.Fatalf("decoded %T does not re-encode: %v", e, err)
			}
			if _, err := decodeAs(e, again); err != nil {
				t.Fatalf("re-encoded %T does not decode: %v\n%s", e, err, again)
			}
		}
		check(Decode[RegisterRequest](data))
		check(Decode[RegisterReply](data))
		check(Decode[RemoveRequest](data))
		check(Decode[ToggleRequest](data))
		check(Decode[ChangeReply](data))
		check(Decode[CatalogChanged](data))
		check(Decode[AuditCheckpoint](data))
		check(Decode[Invocation](data))
		check(Decode[Decision](data))
		check(Decode[ConfirmRequest](data))
		check(Decode[ConfirmAnswer](data))
		check(Decode[ConfirmAck](data))
		check(Decode[ConfirmDismissed](data))
		check(Decode[ConfirmRejected](data))
		check(Decode[ConfirmClosed](data))
		check(Decode[ConfirmWaiting](data))
		check(Decode[Queued](data))
		check(Decode[ServerRequest](data))
		check(Decode[ServerAnswer](data))
		check(Decode[Result](data))
		check(Decode[Step](data))
		check(Decode[BatchInvocation](data))
		check(Decode[BatchResult](data))
		check(Decode[PolicyEvent](data))
		check(Decode[ShadowDecision](data))
		check(Decode[ShadowStats](data))
		check(Decode[CancelRequest](data))
		check(Decode[HookRun](data))
		check(Decode[OutputRequest](data))
		check(Decode[RevokeRequest](data))
		check(Decode[RevokeReply](data))
		if tool, err := DecodeTool(data); err == nil {
			again, err := json.Marshal(tool)
			if err != nil {
				t.Fatalf("decoded tool does not re-encode: %v", err)
			}
			if _, err := DecodeTool(again); err != nil {
				t.Fatalf("re-encoded tool does not decode: %v\n%s", err, again)
			}
		}
	})
}

func decodeAs(e Envelope, data []byte) (Envelope, error) {
	switch e.(type) {
	case *RegisterRequest:
		return Decode[RegisterRequest](data)
	case *RegisterReply:
		return Decode[RegisterReply](data)
	case *RemoveRequest:
		return Decode[RemoveRequest](data)
	case *ToggleRequest:
		return Decode[ToggleRequest](data)
	case *ChangeReply:
		return Decode[ChangeReply](data)
	case *CatalogChanged:
		return Decode[CatalogChanged](data)
	case *Invocation:
		return Decode[Invocation](data)
	case *Decision:
		return Decode[Decision](data)
	case *ConfirmRequest:
		return Decode[ConfirmRequest](data)
	case *ConfirmAnswer:
		return Decode[ConfirmAnswer](data)
	case *ConfirmAck:
		return Decode[ConfirmAck](data)
	case *ConfirmDismissed:
		return Decode[ConfirmDismissed](data)
	case *ConfirmRejected:
		return Decode[ConfirmRejected](data)
	case *ConfirmClosed:
		return Decode[ConfirmClosed](data)
	case *ConfirmWaiting:
		return Decode[ConfirmWaiting](data)
	case *Queued:
		return Decode[Queued](data)
	case *ServerRequest:
		return Decode[ServerRequest](data)
	case *ServerAnswer:
		return Decode[ServerAnswer](data)
	case *Result:
		return Decode[Result](data)
	case *Step:
		return Decode[Step](data)
	case *BatchInvocation:
		return Decode[BatchInvocation](data)
	case *BatchResult:
		return Decode[BatchResult](data)
	case *PolicyEvent:
		return Decode[PolicyEvent](data)
	case *ShadowDecision:
		return Decode[ShadowDecision](data)
	case *ShadowStats:
		return Decode[ShadowStats](data)
	case *CancelRequest:
		return Decode[CancelRequest](data)
	case *AuditCheckpoint:
		return Decode[AuditCheckpoint](data)
	case *HookRun:
		return Decode[HookRun](data)
	case *OutputRequest:
		return Decode[OutputRequest](data)
	case *RevokeRequest:
		return Decode[RevokeRequest](data)
	case *RevokeReply:
		return Decode[RevokeReply](data)
	case *MCPResourceUpdated:
		return Decode[MCPResourceUpdated](data)
	}
	panic("decodeAs: unknown envelope")
}

func indent(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, data, "", "  "); err != nil {
		t.Fatal(err)
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// normalise compares envelopes by their JSON form, where a RawMessage's
// whitespace does not matter.
func normalise(t *testing.T, e Envelope) any {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func find(ar *txtar.Archive, name string) []byte {
	for _, f := range ar.Files {
		if f.Name == name {
			return f.Data
		}
	}
	return nil
}

func sortFiles(files []txtar.File) {
	for i := 1; i < len(files); i++ {
		for j := i; j > 0 && files[j].Name < files[j-1].Name; j-- {
			files[j], files[j-1] = files[j-1], files[j]
		}
	}
}

func TestHookRunValidate(t *testing.T) {
	t.Parallel()
	base := func() *HookRun {
		return &HookRun{Header: hdr("h", agent), InvocationID: "inv", Tool: "read_file", Event: HookPre, Hook: "check", Outcome: HookNone}
	}
	tests := []struct {
		name   string
		mutate func(*HookRun)
		says   string
	}{
		{"ok", func(*HookRun) {}, ""},
		{"exit code 0 kept", func(h *HookRun) { h.ExitCode = new(0) }, ""},
		{"no invocation", func(h *HookRun) { h.InvocationID = "" }, "invocationId is empty"},
		{"bad event", func(h *HookRun) { h.Event = "PreToolUse" }, `event "PreToolUse" is neither`},
		{"no hook", func(h *HookRun) { h.Hook = "" }, "hook is empty"},
		{"bad outcome", func(h *HookRun) { h.Outcome = "approve" }, `unknown outcome "approve"`},
		{"negative duration", func(h *HookRun) { h.DurationMillis = -1 }, "durationMillis is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := base()
			tt.mutate(h)
			data, err := Encode(h)
			if tt.says == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				back, err := Decode[HookRun](data)
				if err != nil || (h.ExitCode != nil) != (back.ExitCode != nil) {
					t.Fatalf("round trip: %+v %v", back, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("got %v, want ErrInvalid saying %q", err, tt.says)
			}
		})
	}
}

// A checkpoint's index is signed; one without an index keeps the text it
// was signed with before checkpoints were numbered, so old checkpoints
// still verify; a numbered checkpoint past the first must follow one.
func TestAuditCheckpointIndex(t *testing.T) {
	t.Parallel()
	cp := &AuditCheckpoint{Header: hdr("ck", Identity{ID: "bus@dev-1", Role: "bus"}), From: 1, To: 3, Count: 3,
		Digest: strings.Repeat("a", 64), Key: "k", Signature: "s"}
	const v1 = "toolbus audit checkpoint v1\nbus@dev-1\n2026-11-22T10:00:00.000000000Z\n1\n3\n3\n" +
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n\nk\n"
	if got := string(cp.SignedText()); got != v1 {
		t.Errorf("the text of a checkpoint without an index changed:\n%q\nwant\n%q", got, v1)
	}
	cp.Index = 1
	if got := string(cp.SignedText()); !strings.HasPrefix(got, "toolbus audit checkpoint v2\n") || !strings.HasSuffix(got, "\nk\n1\n") {
		t.Errorf("a numbered checkpoint's text: %q", got)
	}
	if err := cp.Validate(); err != nil {
		t.Errorf("the first checkpoint: %v", err)
	}
	cp.Index = 2
	if err := cp.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "follows none") {
		t.Errorf("checkpoint 2 with no previous: %v", err)
	}
	cp.Previous = strings.Repeat("b", 64)
	if err := cp.Validate(); err != nil {
		t.Errorf("checkpoint 2: %v", err)
	}
}

// EncodeRegister against Encode: one envelope is byte for byte what Encode
// makes; chunks each fit the limit, decode as requests of one batch, and
// hold every tool once, in order.
func TestEncodeRegisterChunks(t *testing.T) {
	t.Parallel()
	req := &RegisterRequest{Header: Header{Sender: Identity{ID: "p"}}, Provider: "p", Source: SourceDiscovered, Replace: true}
	for i := range 500 {
		req.Tools = append(req.Tools, ToolSpec{Name: fmt.Sprintf("t%03d", i), Description: strings.Repeat("<d>\u2028", i%40),
			Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)})
	}
	whole, err := EncodeRegister(req, 1<<30, "b")
	if err != nil || len(whole) != 1 {
		t.Fatalf("%v, %d envelopes", err, len(whole))
	}
	want, err := Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole[0], want) {
		t.Fatalf("one envelope differs from Encode's:\n%s\n%s", whole[0][:200], want[:200])
	}
	const limit = 20_000
	chunks, err := EncodeRegister(req, limit, "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks", len(chunks))
	}
	var got []ToolSpec
	ids := make(map[string]bool)
	for i, c := range chunks {
		if len(c) > limit {
			t.Errorf("chunk %d has %d bytes", i, len(c))
		}
		r, err := Decode[RegisterRequest](c)
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if r.Batch == nil || r.Batch.ID != "b" || r.Batch.Seq != i || r.Batch.Last != (i == len(chunks)-1) || r.Provider != "p" || !r.Replace {
			t.Errorf("chunk %d: %+v %+v", i, r.Header, r.Batch)
		}
		ids[r.ID] = true
		got = append(got, r.Tools...)
	}
	if len(ids) != len(chunks) {
		t.Errorf("%d ids for %d chunks", len(ids), len(chunks))
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(req.Tools)
	if !bytes.Equal(a, b) {
		t.Error("the chunks' tools are not the request's")
	}
	req.Tools = append(req.Tools, ToolSpec{Name: "huge", Description: strings.Repeat("x", limit)})
	if _, err := EncodeRegister(req, limit, "b"); err == nil || !strings.Contains(err.Error(), `"huge"`) {
		t.Errorf("a tool larger than the limit: %v", err)
	}
}

// An answer's Person is a name on one line: what an answerer claims lands
// in the audit trail and on approvers' screens.
func TestConfirmAnswerPerson(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ person, says string }{
		{"", ""},
		{"Ada Lovelace (console token 3f2a9c1b)", ""},
		{"Ada\nexecutor@dev-1 answered proceed_always", "does not print"},
		{"Ada\x1b[2J", "does not print"},
		{strings.Repeat("a", MaxPerson+1), "at most 200"},
	} {
		a := &ConfirmAnswer{Header: hdr("ca", agent), InvocationID: "inv", Outcome: ProceedOnce, Person: tt.person}
		_, err := Encode(a)
		if (err == nil) != (tt.says == "") || (err != nil && !strings.Contains(err.Error(), tt.says)) {
			t.Errorf("person %q: %v, want %q", tt.person, err, tt.says)
		}
	}
}

// TestWithDecisionWritesWhatEncodeWrites: the audit stream's copy of a
// result, made by folding the encoded decision into the encoded result
// the caller got, is byte for byte what encoding the result with its
// decision gives, and decodes to it.
func TestWithDecisionWritesWhatEncodeWrites(t *testing.T) {
	for _, late := range []bool{false, true} {
		res := examples()["result_recorded.json"].(*Result)
		res.Late = late
		whole, err := Encode(res)
		if err != nil {
			t.Fatal(err)
		}
		d := res.Decision
		res.Decision = nil
		plain, err := Encode(res)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		before := string(plain)
		folded := WithDecision(plain, dec)
		if string(folded) != string(whole) {
			t.Errorf("folded:\n%s\nencoded:\n%s", folded, whole)
		}
		if string(plain) != before {
			t.Error("WithDecision changed the caller's bytes")
		}
		back, err := Decode[Result](folded)
		if err != nil || back.Decision == nil || back.Decision.Reason != d.Reason || string(back.Decision.Input) != string(d.Input) {
			t.Errorf("decoded %+v, %v", back, err)
		}
	}
	// A decision about another call is no part of this result.
	res := examples()["result_recorded.json"].(*Result)
	res.Decision.InvocationID = "inv-2"
	if _, err := Encode(res); err == nil {
		t.Error("a result carrying another invocation's decision encodes")
	}
}
