package hooks

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// Input is the call a hook is told about.
type Input struct {
	Event Event
	Tool  Tool
	// Args are the call's arguments, a JSON object, as they will run.
	Args json.RawMessage
	// Response is the result, for post hooks.
	Response *Response
	// InvocationID, Caller and Workspace are toolbus's own: which call,
	// who made it (a claim, as everywhere), and the workspace root the
	// hook runs in.
	InvocationID string
	Caller       events.Identity
	Workspace    string
	// TraceParent is the call's trace context (W3C traceparent), "" when
	// the call has none: the hook's own spans are the call's children. The
	// hook's TRACEPARENT says the same.
	TraceParent string
}

// Response is the result a post hook is shown.
type Response struct {
	LLMContent    string            `json:"llmContent"`
	ReturnDisplay string            `json:"returnDisplay"`
	Error         *events.ToolError `json:"error,omitempty"`
	// Success is Claude Code's tool_response.success.
	Success bool `json:"success"`
}

// toolbusFields are what a hook of either dialect finds under "toolbus".
type toolbusFields struct {
	InvocationID string          `json:"invocation_id"`
	Event        string          `json:"event"`
	Tool         string          `json:"tool"`
	Source       events.Source   `json:"source"`
	Server       string          `json:"server,omitempty"`
	Caller       events.Identity `json:"caller"`
	Workspace    string          `json:"workspace"`
	TraceParent  string          `json:"traceparent,omitempty"`
}

// claudeInput is a Claude Code hook's stdin.
type claudeInput struct {
	SessionID      string          `json:"session_id"`
	TranscriptPath string          `json:"transcript_path"`
	Cwd            string          `json:"cwd"`
	PermissionMode string          `json:"permission_mode"`
	HookEventName  string          `json:"hook_event_name"`
	ToolName       string          `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	ToolUseID      string          `json:"tool_use_id"`
	ToolResponse   *Response       `json:"tool_response,omitempty"`
	Toolbus        toolbusFields   `json:"toolbus"`
}

// geminiInput is a Gemini CLI hook's stdin.
type geminiInput struct {
	SessionID      string          `json:"session_id"`
	TranscriptPath string          `json:"transcript_path"`
	Cwd            string          `json:"cwd"`
	HookEventName  string          `json:"hook_event_name"`
	Timestamp      string          `json:"timestamp"`
	ToolName       string          `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	MCPContext     *mcpContext     `json:"mcp_context,omitempty"`
	ToolResponse   *Response       `json:"tool_response,omitempty"`
	Toolbus        toolbusFields   `json:"toolbus"`
}

type mcpContext struct {
	ServerName string `json:"server_name"`
	ToolName   string `json:"tool_name"`
}

// encodeInput is in's JSON as a hook of dialect d reads it on stdin.
func encodeInput(d Dialect, in *Input) ([]byte, error) {
	args := in.Args
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	session := in.Caller.Session
	if session == "" {
		session = in.Caller.ID
	}
	tb := toolbusFields{InvocationID: in.InvocationID, Event: in.Event.String(), Tool: in.Tool.Name, Source: in.Tool.Source,
		Server: in.Tool.Server, Caller: in.Caller, Workspace: in.Workspace, TraceParent: in.TraceParent}
	var resp *Response
	if in.Event == Post {
		resp = in.Response
		if resp == nil {
			resp = &Response{}
		}
	}
	if d == GeminiCLI {
		g := geminiInput{SessionID: session, Cwd: in.Workspace, HookEventName: d.EventName(in.Event),
			Timestamp: time.Now().UTC().Format(time.RFC3339Nano), ToolName: in.Tool.nameFor(d), ToolInput: args,
			ToolResponse: resp, Toolbus: tb}
		if in.Tool.Source == events.SourceMCP {
			own := in.Tool.Own
			if own == "" {
				own = in.Tool.Name
			}
			g.MCPContext = &mcpContext{ServerName: in.Tool.Server, ToolName: own}
		}
		return json.Marshal(&g)
	}
	return json.Marshal(&claudeInput{SessionID: session, Cwd: in.Workspace, PermissionMode: "default",
		HookEventName: d.EventName(in.Event), ToolName: in.Tool.nameFor(d), ToolInput: args, ToolUseID: in.InvocationID,
		ToolResponse: resp, Toolbus: tb})
}
