// Package tool is the contract between the executor and whatever hosts a
// tool: the built-in set, command discovery, an MCP server. The executor
// validates the arguments against the tool's schema and asks the policy
// before it calls Run.
package tool

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// Tool is a runnable tool.
type Tool interface {
	// Spec is the tool's declaration, as registered.
	Spec() events.ToolSpec
	// Run executes a call whose arguments already passed validation. A
	// failure of the tool's own making (file not found, command failed) is
	// an Output with Err set; an error return means the tool could not be
	// run at all.
	Run(ctx context.Context, call *Call) (*Output, error)
}

// Call is one invocation, as a tool sees it.
type Call struct {
	// ID is the invocation id.
	ID string
	// Args are the validated arguments, a JSON object.
	Args json.RawMessage
	// Progress, when not nil, receives output as the tool produces it. It
	// returns false once it wants no more (live output is bounded), and a
	// tool then stops calling it, sparing the copies.
	Progress func(chunk string) (more bool)
	// MaxOutput is how many bytes of output the call may keep (0: the
	// tool's own default); a tool that prints more keeps the first
	// MaxOutput and says so.
	MaxOutput int64
	// Refused, when not nil, asks the policy about files the tool picked
	// itself (a search over a tree, a glob of files to read), which the
	// policy could not see in the arguments: it returns those of paths
	// (absolute) that the call may not touch. An error means the policy
	// could not judge them, and none may be touched.
	Refused func(paths []string) (map[string]bool, error)
	// Opened, when not nil, checks a file the tool opened, or is about to
	// create, against what the policy was shown for this call, before the
	// tool reads or writes a byte of it: an error means it is not a file
	// the policy judged (the name became a link, another file was renamed
	// onto it, or it was hard-linked since) and the tool must not use it.
	Opened func(f File) error
	// Ask, when not nil, puts a request the MCP server serving the call
	// makes of its client (method events.MethodSampling or
	// events.MethodElicitation, params as the server sent them) to the
	// caller's own client, and returns the client's result as it gave
	// it, or the error the request failed with: an *events.RPCError when
	// the client, the policy or a bound refused it. It returns by ctx's
	// end. Nil: the caller can answer no request, and a server's request
	// is refused at once.
	Ask func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	// ServerRequests are the methods Ask may be given: those the
	// caller's client declared (events.Invocation.ServerRequests).
	ServerRequests []string
	// Log, when not nil, receives the log messages of the MCP server that
	// serves the call (its notifications/message params, as sent), for
	// the caller alone.
	Log func(params json.RawMessage)
	// Op is the call's operation (events.Invocation.Op), which an
	// Operator runs in place of Run: OpComplete's Args are MCP's
	// completion params, OpSubscribe's and OpUnsubscribe's the URI.
	Op events.Operation
	// Caller is who sent the call, as the executor checked it: a
	// subscription is the caller's own, to hold and to give up, and an
	// MCP server's tools keep a session per caller whose requests can be
	// asked, so that a request that names no call still names its caller.
	Caller events.Identity
	// Invoke, when not nil, sends step number step of a composite tool
	// (events.KindComposite): a call of tool with args, as a call of this
	// call's own caller, over the bus, where the executor that takes it
	// binds it to the caller's principal and judges it as any call of
	// that caller. It returns the step's result, its failures (denied,
	// invalid, timed out) included; an error means it could not be sent.
	// Set for composite tools only.
	Invoke func(ctx context.Context, step int, tool string, args json.RawMessage) (*events.Result, error)
}

// Operator is implemented by the tools that take operations beside a
// run: an MCP server's prompts (completions of their arguments) and
// resources (completions of a template's variables, subscriptions).
// Operate runs a call whose Op is set, and fails it (an Output with Err)
// for an operation the tool does not take.
type Operator interface {
	Operate(ctx context.Context, call *Call) (*Output, error)
}

// DefaultMaxOutput is how many bytes of output a call keeps when it does
// not say (Call.MaxOutput): what the shell kept of each stream in memory
// before output went to a Spool, now for the whole call, so that what a
// call can put in the output store stays a small share of it.
const DefaultMaxOutput = 64 << 20

// File is what a path leads to on disk, as seen when the policy judged a
// call or when a tool opened it.
type File struct {
	// Real is the path with symbolic links followed: where a file to be
	// created will be, or where a named file was found.
	Real string
	// ID identifies the file found; zero when there was none.
	ID FileID
	// Links is how many names a regular file has (1 unless it is hard
	// linked); 0 for anything else.
	Links uint64
}

// FileID is a file's device and inode number: two paths with the same ID
// lead to the same file.
type FileID struct{ Dev, Ino uint64 }

// Output is what a tool returns (seed 003 ToolResult).
type Output struct {
	LLMContent    string
	ReturnDisplay string
	// Parts are the output's typed parts that are not text (an MCP
	// tool's images, audio, embedded resources); with PartsWhole, its
	// whole content, text included (events.Result.PartsWhole), of which
	// LLMContent is the text.
	Parts      []events.Part
	PartsWhole bool
	// Structured is an MCP tool's structuredContent and Meta its
	// result's _meta, as the server sent them.
	Structured json.RawMessage
	Meta       json.RawMessage
	// MCPResult is an MCP server's result as it sent it, for a prompt's
	// get or a resource's read (events.Result.MCPResult).
	MCPResult json.RawMessage
	Err       *events.ToolError
	// ServerLost says the server that ran the call failed in transport
	// or went away mid-call (an MCP server's session ended): the call
	// may or may not have taken effect there. With Err set.
	ServerLost bool
	// ExitCode is the exit status of the command the tool ran to its
	// end (events.Result.ExitCode).
	ExitCode *int
	// Whole, when set, holds the whole llmContent of an output too large
	// for memory, and LLMContent only its head. The executor owns it from
	// the moment Run returns: it stores it and closes it.
	Whole *Spool
}

// Failed is an Output for a tool-level failure.
func Failed(t events.ErrorType, msg string) *Output {
	return &Output{LLMContent: msg, ReturnDisplay: msg, Err: &events.ToolError{Type: t, Message: msg}}
}

// Text is an Output whose model and display content are the same.
func Text(s string) *Output { return &Output{LLMContent: s, ReturnDisplay: s} }

// Validator is implemented by tools with checks beyond their schema (seed
// 002 validateToolParamValues): the error says what is wrong.
type Validator interface {
	ValidateArgs(args json.RawMessage) error
}

// PathNamer is implemented by tools that touch files: the absolute paths a
// call names, for the policy. args are the call's validated arguments,
// decoded (numbers as json.Number).
type PathNamer interface {
	Paths(args map[string]any) []string
}

// Commander is implemented by shell tools: the command line a call runs
// and the directory it runs in, for the policy and for approvers.
type Commander interface {
	Command(args json.RawMessage) (line, dir string)
}

// LinkResolver is implemented by tools confined to a directory: what path
// leads to inside it, the file's Real path with symbolic links followed,
// its identity and its number of names. The policy is shown both paths, so
// that a link named notes.txt that leads to .env is judged as .env too,
// and which files have other names; the identity is what Call.Opened
// checks an opened file against.
type LinkResolver interface {
	Look(path string) (File, error)
}

// Func makes a Tool of a declaration and a function.
func Func(spec events.ToolSpec, run func(ctx context.Context, call *Call) (*Output, error)) Tool {
	return funcTool{spec, run}
}

type funcTool struct {
	spec events.ToolSpec
	run  func(ctx context.Context, call *Call) (*Output, error)
}

func (f funcTool) Spec() events.ToolSpec                                { return f.spec }
func (f funcTool) Run(ctx context.Context, call *Call) (*Output, error) { return f.run(ctx, call) }

// Differ is implemented by edit tools: the unified diff a call would make,
// for the approver to see before it happens. The call's Opened checks the
// file read for it, as it does for Run.
type Differ interface {
	Diff(call *Call) (string, error)
}

// Origin is implemented by tools that are not built in (an MCP server's,
// a discovery command's): where the tool comes from, as the executor that
// hosts it registers it and shows it to the policy. A tool without it is
// built in.
type Origin interface {
	Origin() (source events.Source, server string, trust bool)
}

// Restarter is implemented by tools whose server is restarted when it
// fails (an MCP server's tools): AwaitRestart waits until the server
// serves calls again, on a session that has not ended, or ctx ends.
type Restarter interface {
	AwaitRestart(ctx context.Context) error
}

// Timeouter is implemented by tools that bring their own deadline (an MCP
// server's timeout setting): it replaces the executor's default, and a
// call's own timeoutMillis and the executor's per-tool and per-server
// settings still override it.
type Timeouter interface {
	Timeout() time.Duration
}
