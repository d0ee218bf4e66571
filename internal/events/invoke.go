package events

import (
	"encoding/json"
	"time"
)

// Invocation asks for one tool call. It is sent on SubjectInvoke; the
// Header's Sender is the caller (agent, session, user) the policy judges.
type Invocation struct {
	Header
	// Tool is the catalogue name or an alias.
	Tool string `json:"tool"`
	// Args are the arguments, a JSON object, passed on without re-encoding.
	Args json.RawMessage `json:"args,omitempty"`
	// TimeoutMillis overrides the executor's deadline for this call.
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
	// Workspace names the workspace a call of a workspace-bound tool
	// (Tool.WorkspaceBound) acts on: it runs only on an executor of that
	// workspace. Empty: the one workspace the tool's hosts have; a call
	// that leaves several to choose from is refused, never sent to one.
	Workspace string `json:"workspace,omitempty"`
	// ServerRequests are the requests of an MCP server the caller can put
	// to its own client (ServerRequestMethods: what the client declared,
	// sampling or elicitation). A request the server serving the call
	// makes of its client goes to the caller, as a ServerRequest of kind
	// KindServerRequest on the reply subject, when its method is here and
	// the policy lets it (data.toolbus.server_request_denied); any other
	// is refused at once. A method not among ServerRequestMethods is
	// ignored.
	ServerRequests []string `json:"serverRequests,omitempty"`
	// CallerConfirms says the caller can put a confirmation request to
	// the person in front of it (an MCP client that supports
	// elicitation). When the policy asks for confirmation and lets that
	// person answer for this call (data.toolbus.elicitation_allowed), the
	// executor sends the caller the ConfirmRequest too, as a message of
	// kind KindConfirm on the reply subject, and the caller answers it as
	// any approver does, as RoleAgentUser. It widens nothing by itself:
	// the policy judges the answer like every other (approver_allowed).
	CallerConfirms bool `json:"callerConfirms,omitempty"`
	// Op is what the call does with the tool, when it does not run it
	// (OpRun): an operation of an MCP server's prompt or resource.
	Op Operation `json:"op,omitempty"`
	// Composite is, for a step of a composite tool, the invocation id of
	// the composite's call: it links the step to that call in the trail.
	// Its executor sends the step as a call of the composite's own caller,
	// judged like any other; the field is the sender's claim, and neither
	// the policy nor any check rests on it.
	Composite string `json:"composite,omitempty"`
	// Attempt numbers a retry of a call under the same id: 0 or 1 is
	// the first attempt, 2 the one retry there may be (MaxAttempts). An
	// executor runs attempt 2 only as the same call as the first (the
	// same tool, operation, workspace and arguments, of the same
	// principal) and only when its own policy decision marks the call
	// idempotent; anything else is refused with ErrInvocationIDReused.
	Attempt int `json:"attempt,omitempty"`
}

// MaxAttempts is how many attempts one call may have: the first and one
// retry.
const MaxAttempts = 2

// AttemptOf is the attempt number n is, counting 0 as the first (1).
func AttemptOf(n int) int { return max(n, 1) }

// Operation is what an invocation does with the entry it names beside
// running it. Every operation is a call of the entry: recorded, and judged
// by the policy as the run (a get, a read) is, but for OpUnsubscribe.
type Operation string

// The operations of an invocation.
const (
	// OpRun runs the tool: a get of a prompt, a read of a resource.
	OpRun Operation = ""
	// OpComplete asks for the completions of an argument of the prompt or
	// resource template the invocation names (MCP completion/complete):
	// Args are then the completion's "argument" and "context", as MCP has
	// them, which the policy is shown as the call's arguments; the
	// entry's schema does not apply to them.
	OpComplete Operation = "complete"
	// OpSubscribe subscribes the caller to the updates of a resource
	// (MCP resources/subscribe): Args are {"uri": ...}, as a read's, and
	// the policy judges it as the read. The executor that takes it
	// subscribes its session of the server to the URI and publishes the
	// server's updates on MCPUpdatedSubject.
	OpSubscribe Operation = "subscribe"
	// OpUnsubscribe gives up the caller's subscription to a resource
	// (MCP resources/unsubscribe), Args as OpSubscribe's. It gives up
	// only what its caller holds: the policy is not asked.
	OpUnsubscribe Operation = "unsubscribe"
)

// Valid reports whether o is one of the operations.
func (o Operation) Valid() bool {
	switch o {
	case OpRun, OpComplete, OpSubscribe, OpUnsubscribe:
		return true
	}
	return false
}

// EnvelopeType implements Envelope.
func (*Invocation) EnvelopeType() string { return "tool.invocation" }

// Validate implements Envelope.
func (i *Invocation) Validate() error {
	typ := i.EnvelopeType()
	if err := i.header().validate(); err != nil {
		return err
	}
	switch {
	case i.Tool == "":
		return invalid(typ, "tool is empty")
	case len(i.Args) > 0 && !isJSONObject(i.Args):
		return invalid(typ, "args is not a JSON object")
	case i.TimeoutMillis < 0:
		return invalid(typ, "timeoutMillis is negative")
	case !i.Op.Valid():
		return invalid(typ, "unknown op %q", i.Op)
	case i.Attempt < 0:
		return invalid(typ, "attempt is negative")
	}
	return nil
}

// Verdict is a policy's answer (Gemini CLI PolicyDecision).
type Verdict string

// The three verdicts. Anything else is treated as DENY.
const (
	Allow   Verdict = "ALLOW"
	Deny    Verdict = "DENY"
	AskUser Verdict = "ASK_USER"
)

// Valid reports whether v is one of the three verdicts.
func (v Verdict) Valid() bool { return v == Allow || v == Deny || v == AskUser }

// Decision records what the policy said about an invocation and what it
// was shown, published on SubjectDecision for every call the policy
// judged, before the call goes on: an ASK_USER call then waits for a
// person, and the trail shows why before the result does. Every result
// carries its decision too (Result.Policy), a hook's change included.
//
// Input makes the decision reproducible from the record (toolbus audit
// whatif, toolbus policy explain): the policy input document as evaluated,
// without its arguments, which are the invocation's, or Args when an
// approver modified them. policy.Recorded says what the other fields are.
type Decision struct {
	Header
	InvocationID string  `json:"invocationId"`
	Tool         string  `json:"tool"`
	Verdict      Verdict `json:"verdict"`
	Reason       string  `json:"reason"`
	// PolicyRevision identifies the policy set that decided.
	PolicyRevision string `json:"policyRevision"`
	// Cached is set when the executor reused the decision of an identical
	// input.
	Cached bool `json:"cached,omitempty"`
	// Input is the policy input document, JSON, without "args" and
	// "session".
	Input json.RawMessage `json:"input,omitempty"`
	// Session is the input's "session": the counts of the caller the
	// loop guards judged the call by, when the policy reads them. It is
	// apart from Input as it changes with every call, where Input
	// repeats for a decision reused (Cached).
	Session *SessionCounts `json:"session,omitempty"`
	// Args are the arguments judged, when they are not the invocation's.
	Args json.RawMessage `json:"args,omitempty"`
	// ShellLine, BashChecked and InputLossy: see policy.Recorded.
	ShellLine   string `json:"shellLine,omitempty"`
	BashChecked bool   `json:"bashChecked,omitempty"`
	InputLossy  bool   `json:"inputLossy,omitempty"`
	// Idempotent is the policy's word that running the call again does
	// no harm (data.toolbus.idempotent): what lets it be retried.
	Idempotent bool `json:"idempotent,omitempty"`
	// Attempt is the invocation's attempt (Invocation.Attempt), when it
	// is a retry.
	Attempt int `json:"attempt,omitempty"`
}

// EnvelopeType implements Envelope.
func (*Decision) EnvelopeType() string { return "tool.decision" }

// SessionCounts is what the fleet counted of the caller of a call, this
// call included: keyed by the proven principal (without identities, by
// the id the caller claims) and, for Calls, the session's name.
type SessionCounts struct {
	// Calls is how many calls the session made; for a caller that names
	// no session, how many it made without one.
	Calls int64 `json:"calls"`
	// Repeats is how many calls the caller made in the last minutes that
	// were this call (the same tool with the same arguments), in any
	// session or none.
	Repeats int64 `json:"repeats"`
}

// Validate implements Envelope.
func (d *Decision) Validate() error {
	typ := d.EnvelopeType()
	if err := d.header().validate(); err != nil {
		return err
	}
	switch {
	case d.InvocationID == "":
		return invalid(typ, "invocationId is empty")
	case !d.Verdict.Valid():
		return invalid(typ, "unknown verdict %q", d.Verdict)
	}
	return nil
}

// ErrorType classifies a failed invocation (Gemini CLI ToolErrorType).
type ErrorType string

// Error types of a Result.
const (
	ErrToolNotFound        ErrorType = "TOOL_NOT_FOUND"
	ErrInvalidParams       ErrorType = "INVALID_TOOL_PARAMS"
	ErrPolicyDenied        ErrorType = "POLICY_DENIED"
	ErrUserCancelled       ErrorType = "USER_CANCELLED"
	ErrConfirmationTimeout ErrorType = "CONFIRMATION_TIMEOUT"
	ErrExecutionFailed     ErrorType = "EXECUTION_FAILED"
	ErrTimeout             ErrorType = "TIMEOUT"
	ErrCancelled           ErrorType = "CANCELLED"
	ErrExecutorLost        ErrorType = "EXECUTOR_LOST"
	// ErrInvocationIDReused is the executor's refusal of a call whose
	// id its principal used before, for another call or for this one
	// sent again: an id names one call of a principal, for good.
	ErrInvocationIDReused ErrorType = "INVOCATION_ID_REUSED"
	// ErrTooManyPending is the executor's refusal of a call that would
	// ask a person while its principal already has as many calls
	// waiting for an answer as one principal may.
	ErrTooManyPending ErrorType = "TOO_MANY_PENDING_CONFIRMATIONS"
	// ErrRateLimited is the executor's refusal of a call whose principal
	// had more recorded in the audit trail, lately, than one principal
	// may: the call is neither run nor recorded. Retry later. It also
	// ends a call over a rate the policy set (calls or bytes of arguments
	// per interval, data.toolbus.limits): the call was not run, and
	// ToolError.RetryAfterMillis says when the interval ends.
	ErrRateLimited ErrorType = "RATE_LIMITED"
	// ErrConcurrencyLimited ends a call over a limit of calls at once the
	// policy set: as many run already, and the limit has no queue, or its
	// queue is full, or the call waited in it as long as it may. The call
	// was not run; ToolError.RetryAfterMillis says when to try again.
	ErrConcurrencyLimited ErrorType = "CONCURRENCY_LIMITED"
	// ErrAuditFull is the fleet's refusal of a call while the audit
	// stream is near its size cap, or refused the call's invocation
	// record: the trail keeps what it holds for its whole retention and
	// makes no room, so a call it could not record is not run. It ends
	// once records age out or an operator raises the cap.
	ErrAuditFull ErrorType = "AUDIT_FULL"

	// Failures of the built-in tools (Gemini CLI's names).
	ErrFileNotFound           ErrorType = "FILE_NOT_FOUND"
	ErrFileTooLarge           ErrorType = "FILE_TOO_LARGE"
	ErrPathNotInWorkspace     ErrorType = "PATH_NOT_IN_WORKSPACE"
	ErrEditNoOccurrence       ErrorType = "EDIT_NO_OCCURRENCE_FOUND"
	ErrEditOccurrenceMismatch ErrorType = "EDIT_EXPECTED_OCCURRENCE_MISMATCH"
	ErrShellFailed            ErrorType = "SHELL_EXECUTE_ERROR"

	// ErrMCPToolError is an MCP tool's result with isError set: the
	// server ran the call and says it failed (Gemini CLI's
	// MCP_TOOL_ERROR); the message is the server's text.
	ErrMCPToolError ErrorType = "MCP_TOOL_ERROR"

	// ErrDiscoveredToolExecution is a discovered tool's call that failed
	// (Gemini CLI's DISCOVERED_TOOL_EXECUTION_ERROR): the call command
	// could not start, exited non-zero, was killed by a signal or wrote
	// to stderr; the message is the Stdout/Stderr/Error/Exit Code/Signal
	// block.
	ErrDiscoveredToolExecution ErrorType = "DISCOVERED_TOOL_EXECUTION_ERROR"
)

// ToolError is the error part of a failed Result.
type ToolError struct {
	Type    ErrorType `json:"type"`
	Message string    `json:"message"`
	// MCPCode is the JSON-RPC error code an MCP server answered a prompt's
	// get or a resource's read with (-32002: no such resource), which the
	// facade gives its client as is.
	MCPCode int `json:"mcpCode,omitempty"`
	// RetryAfterMillis, on RATE_LIMITED and CONCURRENCY_LIMITED, is how
	// long the caller should wait before it sends the call again.
	RetryAfterMillis int64 `json:"retryAfterMillis,omitempty"`
}

// Result is the one terminal answer to an Invocation (seed 003 ToolResult).
type Result struct {
	Header
	InvocationID string `json:"invocationId"`
	Tool         string `json:"tool"`
	// LLMContent is what goes back to the model; ReturnDisplay is what a
	// person is shown.
	LLMContent    string `json:"llmContent"`
	ReturnDisplay string `json:"returnDisplay"`
	// Parts are what goes back to the model beside LLMContent that is not
	// text: the images, audio and embedded resources of an MCP result,
	// kept as typed parts, in the order the tool gave them. LLMContent
	// holds the text parts, joined, and resource links as text.
	//
	// With PartsWhole, Parts are the whole content the tool gave, text
	// blocks and resource links included, each as it came (annotations,
	// _meta), in its order; none for an empty content. LLMContent is then
	// made of them for a reader of text alone, and its first PartsText
	// bytes are that; what follows was added on the way (notes, hooks'
	// feedback). A result of one plain text block, as most are, has
	// neither: LLMContent is that text.
	Parts      []Part `json:"parts,omitempty"`
	PartsWhole bool   `json:"partsWhole,omitempty"`
	PartsText  int    `json:"partsText,omitempty"`
	// StructuredContent is the JSON value an MCP tool returned as
	// structuredContent, as it sent it. One larger than the output limit
	// is kept in the object store instead, where StructuredRef names it
	// (LLMContent says so); it is never cut.
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	StructuredRef     string          `json:"structuredRef,omitempty"`
	// Meta is the _meta object of an MCP tool's result, as it sent it.
	Meta json.RawMessage `json:"meta,omitempty"`
	// MCPResult is, for a prompt's get or a resource's read, the MCP
	// server's result as it sent it (a GetPromptResult or a
	// ReadResourceResult); LLMContent then holds it as text.
	MCPResult json.RawMessage `json:"mcpResult,omitempty"`
	// Error is set on failure.
	Error *ToolError `json:"error,omitempty"`
	// ExitCode is, for a tool that ran a command to its end
	// (run_shell_command), the command's exit status as a shell reports
	// it: 128 + N when signal N ended it. A non-zero status is not an
	// Error: the tool did its work, and the model reads the status.
	ExitCode *int `json:"exitCode,omitempty"`
	// Truncated is set when LLMContent was capped; OutputRef then names the
	// object-store entry with the whole output.
	Truncated bool   `json:"truncated,omitempty"`
	OutputRef string `json:"outputRef,omitempty"`
	// Policy is the last policy decision the call got, when it got that
	// far, a hook's change included.
	Policy *PolicyVerdict `json:"policy,omitempty"`
	// Attempt is the invocation's attempt (Invocation.Attempt), when it
	// is a retry: the audit joins a call's attempts by principal, id
	// and attempt.
	Attempt int `json:"attempt,omitempty"`
	// Late is set on a result an executor sent after the caller gave up
	// on the call (a CancelRequest with GaveUp): the caller's own result
	// (TIMEOUT, CANCELLED or EXECUTOR_LOST) is the terminal one, and this
	// one is kept for the record only. Every invocation has exactly one
	// result without Late.
	Late bool `json:"late,omitempty"`
	// Decision is, in the audit stream's copy of the result only, the
	// decision event of a call that ended before its decision was
	// published on its own (SubjectDecision): one that did not wait for a
	// person and ended within a heartbeat. Folded in, it costs the stream
	// one message less per call. The caller's copy never carries it. It is
	// the last field, so that WithDecision writes what Encode would.
	Decision *Decision `json:"decision,omitempty"`
}

// PolicyVerdict is a policy decision as a Result records it.
type PolicyVerdict struct {
	Verdict  Verdict `json:"verdict"`
	Reason   string  `json:"reason"`
	Revision string  `json:"revision"`
	// Cached is set when the decision was reused for an identical input.
	Cached bool `json:"cached,omitempty"`
	// Idempotent: the policy marks the call idempotent (Decision).
	Idempotent bool `json:"idempotent,omitempty"`
}

// EnvelopeType implements Envelope.
func (*Result) EnvelopeType() string { return "tool.result" }

// Validate implements Envelope.
func (r *Result) Validate() error {
	typ := r.EnvelopeType()
	if err := r.header().validate(); err != nil {
		return err
	}
	switch {
	case r.InvocationID == "":
		return invalid(typ, "invocationId is empty")
	case r.Error != nil && r.Error.Type == "":
		return invalid(typ, "error without a type")
	}
	for i := range r.Parts {
		if err := r.Parts[i].Validate(); err != nil {
			return invalid(typ, "part %d: %v", i, err)
		}
	}
	if len(r.Meta) > 0 && !isJSONObject(r.Meta) {
		return invalid(typ, "meta is not a JSON object")
	}
	if d := r.Decision; d != nil {
		if d.V != Version || d.Type != d.EnvelopeType() {
			return invalid(typ, "decision: not a %s envelope of v=%d", d.EnvelopeType(), Version)
		}
		if err := d.Validate(); err != nil {
			return invalid(typ, "decision: %v", err)
		}
		if d.InvocationID != r.InvocationID {
			return invalid(typ, "decision of invocation %q in the result of %q", d.InvocationID, r.InvocationID)
		}
	}
	return nil
}

// WithDecision is the encoded result data with the encoded decision
// event folded in as its "decision" field: the audit stream's copy of a
// result whose decision was not published on its own. data must be the
// encoding of a Result without one (Encode's output, a JSON object), and
// decision that of a Decision of the same invocation. It appends to a
// copy: data, sent to the caller as it is, stays as it was.
func WithDecision(data, decision []byte) []byte {
	out := make([]byte, 0, len(data)+len(decision)+len(`,"decision":`))
	out = append(out, data[:len(data)-1]...)
	out = append(out, `,"decision":`...)
	out = append(out, decision...)
	return append(out, '}')
}

// Step records an invocation passing a stage of the pipeline: resolved,
// validated, confirmed, started, finished.
type Step struct {
	Header
	InvocationID string `json:"invocationId"`
	Tool         string `json:"tool"`
	Step         string `json:"step"`
	Detail       string `json:"detail,omitempty"`
	// Attempt is the attempt the step begins, for StepRetried.
	Attempt int `json:"attempt,omitempty"`
}

// StepRetried is the step of an executor that tries a call again under
// its id, as the attempt the step names: the MCP server serving the call
// failed in transport or restarted mid-call, and the call is idempotent.
const StepRetried = "retried"

// EnvelopeType implements Envelope.
func (*Step) EnvelopeType() string { return "tool.step" }

// Validate implements Envelope.
func (s *Step) Validate() error {
	if err := s.header().validate(); err != nil {
		return err
	}
	if s.InvocationID == "" || s.Step == "" {
		return invalid(s.EnvelopeType(), "invocationId and step are required")
	}
	return nil
}

// CancelRequest asks for an invocation to be cancelled.
type CancelRequest struct {
	Header
	InvocationID string `json:"invocationId"`
	Reason       string `json:"reason,omitempty"`
	// GaveUp says the sender is the call's caller and has stopped
	// waiting. Sent as a request, the executors answer who records the
	// call's terminal result (GaveUpSent: the executor, whose result is
	// on its way; GaveUpLate: the caller, and what the executor still
	// sends is Late). An executor that has not seen the call yet answers
	// ClaimUnknown and refuses the call when it comes.
	GaveUp bool `json:"gaveUp,omitempty"`
	// Attempt is the attempt of the call given up (Invocation.Attempt),
	// when it is a retry: giving up one attempt does not refuse the
	// next.
	Attempt int `json:"attempt,omitempty"`
}

// EnvelopeType implements Envelope.
func (*CancelRequest) EnvelopeType() string { return "tool.cancel" }

// Validate implements Envelope.
func (c *CancelRequest) Validate() error {
	return c.header().validateAbout(c.EnvelopeType(), c.InvocationID)
}

// PolicyEvent reports a policy set moving through the fleet: pushed to the
// bus, applied by an executor, or rejected by one (the old set stays).
type PolicyEvent struct {
	Header
	Status   string `json:"status"` // pushed, applied, rejected, shadowed (a candidate put in shadow)
	Revision string `json:"revision"`
	// Source is where the set came from: "bucket" or a directory.
	Source string `json:"source"`
	Error  string `json:"error,omitempty"`
	// Of a push: the set's full SHA-256 (hex; the revision is its first
	// 16 digits), its signer's public key and signature (base64) over
	// it, which an auditor checks (toolbus audit verify), the share it
	// was pushed to and the pusher's message. A rollback is a push of
	// the revision it returns to.
	Digest    string `json:"digest,omitempty"`
	Signer    string `json:"signer,omitempty"`
	Signature string `json:"signature,omitempty"`
	Share     string `json:"share,omitempty"`
	Message   string `json:"message,omitempty"`
}

// EnvelopeType implements Envelope.
func (*PolicyEvent) EnvelopeType() string { return "tool.policy" }

// Validate implements Envelope.
func (p *PolicyEvent) Validate() error {
	if err := p.header().validate(); err != nil {
		return err
	}
	switch p.Status {
	case "pushed", "applied", "rejected", "shadowed":
	default:
		return invalid(p.EnvelopeType(), "unknown status %q", p.Status)
	}
	return nil
}

// BatchCall is one call of a BatchInvocation. A string argument whose
// whole value is "$previous" or "$stepN" (N counting from 0) is replaced by
// that earlier call's llmContent before the call runs (seed 004).
type BatchCall struct {
	Tool          string          `json:"tool"`
	Args          json.RawMessage `json:"args,omitempty"`
	TimeoutMillis int64           `json:"timeoutMillis,omitempty"`
}

// MaxBatchCalls bounds the calls of one BatchInvocation, so that the
// batch's results, each cut down if need be, fit in one message.
const MaxBatchCalls = 256

// BatchInvocation carries several calls in one request, on
// SubjectInvokeBatch (seed 004 executeParallel / executeSequence): calls
// of concurrency-safe tools next to each other run in parallel, the rest
// in order. With AbortOnError, a failed call stops the calls after it.
type BatchInvocation struct {
	Header
	Calls        []BatchCall `json:"calls"`
	AbortOnError bool        `json:"abortOnError,omitempty"`
}

// EnvelopeType implements Envelope.
func (*BatchInvocation) EnvelopeType() string { return "tool.invocation.batch" }

// Validate implements Envelope.
func (b *BatchInvocation) Validate() error {
	typ := b.EnvelopeType()
	if err := b.header().validate(); err != nil {
		return err
	}
	if len(b.Calls) == 0 {
		return invalid(typ, "no calls")
	}
	if len(b.Calls) > MaxBatchCalls {
		return invalid(typ, "%d calls; a batch holds at most %d", len(b.Calls), MaxBatchCalls)
	}
	for i, c := range b.Calls {
		if c.Tool == "" {
			return invalid(typ, "call %d has no tool", i)
		}
		if len(c.Args) > 0 && !isJSONObject(c.Args) {
			return invalid(typ, "call %d: args is not a JSON object", i)
		}
	}
	return nil
}

// BatchResult answers a BatchInvocation: one Result per call, in order.
type BatchResult struct {
	Header
	BatchID string   `json:"batchId"`
	Results []Result `json:"results"`
}

// EnvelopeType implements Envelope.
func (*BatchResult) EnvelopeType() string { return "tool.result.batch" }

// Validate implements Envelope.
func (b *BatchResult) Validate() error {
	if err := b.header().validate(); err != nil {
		return err
	}
	if b.BatchID == "" {
		return invalid(b.EnvelopeType(), "batchId is empty")
	}
	return nil
}

// ShadowDecision is a decision of the candidate policy in shadow that
// differs from the one the policy in force made on the same call, in its
// verdict or in its reason (the rule behind it). The call ran as the
// policy in force decided; this records what would have changed.
type ShadowDecision struct {
	Header
	// InvocationID is the caller's id of the call; the Header's Call
	// is its id in the trail.
	InvocationID string `json:"invocationId"`
	Tool         string `json:"tool"`
	// Principal is the caller the bus vouched for.
	Principal string        `json:"principal"`
	Live      PolicyVerdict `json:"live"`
	Shadow    PolicyVerdict `json:"shadow"`
	// InputDigest is the SHA-256 (hex) of the input both judged, as the
	// call's decision records it.
	InputDigest string `json:"inputDigest,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ShadowDecision) EnvelopeType() string { return "tool.shadow" }

// Validate implements Envelope.
func (s *ShadowDecision) Validate() error {
	if err := s.header().validate(); err != nil {
		return err
	}
	switch {
	case s.InvocationID == "":
		return invalid(s.EnvelopeType(), "no invocationId")
	case !s.Live.Verdict.Valid() || !s.Shadow.Verdict.Valid():
		return invalid(s.EnvelopeType(), "verdicts %q and %q", s.Live.Verdict, s.Shadow.Verdict)
	}
	return nil
}

// ShadowStats are an executor's counts for the candidate in shadow since
// it started evaluating it: the calls judged, those judged otherwise
// than by the policy in force, and those dropped because its queue was
// full.
type ShadowStats struct {
	Header
	Revision  string    `json:"revision"`
	Since     time.Time `json:"since"`
	Judged    uint64    `json:"judged"`
	Disagreed uint64    `json:"disagreed"`
	Dropped   uint64    `json:"dropped"`
	Failed    uint64    `json:"failed"`
}

// EnvelopeType implements Envelope.
func (*ShadowStats) EnvelopeType() string { return "tool.shadow.stats" }

// Validate implements Envelope.
func (s *ShadowStats) Validate() error {
	if err := s.header().validate(); err != nil {
		return err
	}
	if s.Revision == "" {
		return invalid(s.EnvelopeType(), "no revision")
	}
	return nil
}
