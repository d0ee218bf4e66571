// Package events is the wire contract every toolbus part shares: the NATS
// subjects, the versioned JSON envelopes sent on them, and the catalogue
// entries kept in the bus. Nothing outside this package defines a subject or
// an envelope shape.
package events

import (
	"encoding/base64"
	"strings"
)

// Subjects. Every subject under "tool.>" is captured by the audit stream, so a
// replay of the stream is a replay of everything that happened.
//
// Requests are not sent on them. A request for the subjects marked
// "(request)" below goes to Request(subject), outside the stream, and the
// part that answers it records it on subject itself (bus.Recorder): the
// stream acknowledges what it stores, so a record that is not stored,
// because a node was lost or the stream was electing a leader, is sent
// again until it is, and a requester hears only its responder. Records
// and events are sent by the parts of the fleet, never by a requester.
const (
	// SubjectAll matches every toolbus subject; the audit stream captures it.
	SubjectAll = "tool.>"

	// SubjectRegister carries RegisterRequest (request, answered with a
	// RegisterReply by the registry service).
	SubjectRegister = "tool.register"
	// SubjectRegistryRemove carries RemoveRequest (request, ChangeReply).
	SubjectRegistryRemove = "tool.registry.remove"
	// SubjectRegistryToggle carries ToggleRequest (request, ChangeReply).
	SubjectRegistryToggle = "tool.registry.toggle"
	// SubjectCatalogChanged carries CatalogChanged events, one per accepted
	// request that changed the catalogue.
	SubjectCatalogChanged = "tool.catalog.changed"

	// SubjectInvoke + "." + principal carries Invocation (request,
	// answered with a Result; see InvokeSubject).
	SubjectInvoke = "tool.invoke"
	// SubjectInvokeBatch + "." + principal carries BatchInvocation
	// (request, answered with a BatchResult).
	SubjectInvokeBatch = "tool.invoke.batch"
	// SubjectDecision carries Decision events: what the policy said about an
	// invocation.
	SubjectDecision = "tool.decision"
	// SubjectConfirm carries ConfirmRequest, an event: answers go to
	// AnswerSubject of its AnswerTo.
	// It is below tool.confirm with the outcomes, so that one consumer
	// filter (SubjectConfirmAll) reads the whole confirmation story and
	// a fleet can let approvers read that, and nothing else, of the audit
	// stream.
	SubjectConfirm = "tool.confirm.request"
	// SubjectConfirmLegacy is where confirmation requests were published
	// before: audit reads of older streams still take them in.
	SubjectConfirmLegacy = "tool.confirm"
	// SubjectResult carries the terminal Result of every invocation as an
	// event, whether or not the caller is still waiting for it.
	SubjectResult = "tool.result"
	// SubjectStep carries Step events: an invocation passing a stage.
	SubjectStep = "tool.step"
	// SubjectHook carries HookRun events: a user hook run around an
	// invocation, and what it answered.
	SubjectHook = "tool.hook"
	// SubjectConfirmAnswered carries the ConfirmAnswer an executor acted on.
	SubjectConfirmAnswered = "tool.confirm.answered"
	// SubjectConfirmRejected carries ConfirmRejected: an answer the
	// executor did not act on (the policy refused the approver).
	SubjectConfirmRejected = "tool.confirm.rejected"
	// SubjectConfirmClosed carries ConfirmClosed: a request that ended
	// with no accepted answer.
	SubjectConfirmClosed = "tool.confirm.closed"
	// SubjectConfirmAll matches the requests and the answered, rejected
	// and closed events, which approvers follow.
	SubjectConfirmAll = "tool.confirm.>"
	// SubjectCancel carries CancelRequest (request; see CancelSubject):
	// every executor hears it, the one running the invocation cancels it
	// and records it.
	SubjectCancel = "tool.cancel"
	// SubjectPolicyPrefix + status (pushed, applied, rejected) carries
	// PolicyEvent.
	SubjectPolicyPrefix = "tool.policy."
	// SubjectShadow carries ShadowDecision: where the candidate policy in
	// shadow decided a call otherwise than the policy in force.
	SubjectShadow = "tool.shadow"
	// SubjectShadowStats carries ShadowStats: an executor's counts of the
	// calls the candidate judged, and of those it could not.
	SubjectShadowStats = "tool.shadow.stats"
	// SubjectAuditCheckpoint carries AuditCheckpoint: a signed digest of
	// a range of the audit stream.
	SubjectAuditCheckpoint = "tool.audit.checkpoint"
	// SubjectProgressPrefix + invocation id carries a call's output as the
	// tool produces it.
	SubjectProgressPrefix = "tool.progress."
)

// RequestPrefix + a subject of the audit stream is where a request to be
// recorded on that subject is sent.
const RequestPrefix = "toolbus.request."

// Request is where a request recorded on subject is sent.
func Request(subject string) string { return RequestPrefix + subject }

// Recorded is the subject of the audit stream where a request sent on
// subject is recorded, and false when subject is not a request's.
func Recorded(subject string) (string, bool) { return strings.CutPrefix(subject, RequestPrefix) }

// ExecSubjectPrefix + an encoded executor id is where an executor takes
// invocations forwarded to it by another. It is outside tool.>, so the
// audit stream does not store invocations twice and a request to an
// executor that is gone fails at once with "no responders".
const ExecSubjectPrefix = "toolbus.exec."

// ExecSubject is where executor id takes forwarded invocations. The id
// is encoded, since an executor id may hold dots and wildcards.
func ExecSubject(id string) string {
	return ExecSubjectPrefix + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// ClaimSubject is where executor id answers whether it runs a call.
func ClaimSubject(id string) string {
	return ClaimSubjectPrefix + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// ClaimAllSubject is where a caller that has heard nothing of its call for a
// while asks every executor whether it still runs it; ClaimSubject(id)
// asks one executor (the one its heartbeats named). The request is the invocation id; an executor answers
// ClaimRunning when it runs it, ClaimBehind when it does not but has
// invocations it has not looked at yet (the call may be among them: a
// caller's invocation and its claim reach the executor in order, but the
// claim may be handled first), else ClaimUnknown, with ExecutorHeader
// naming itself. Like ExecSubjectPrefix it is outside tool.>: an
// executor that is gone gives "no responders" at once, and claims are not
// audited.
const (
	ClaimAllSubject    = "toolbus.claim"
	ClaimSubjectPrefix = "toolbus.claim."
	ClaimRunning       = "running"
	ClaimBehind        = "behind"
	ClaimUnknown       = "unknown"
)

// Answers of an executor to a CancelRequest with GaveUp sent as a
// request, which settle who records the call's terminal result:
// GaveUpSent, the executor (the result is sent already, or it coordinates
// the batch and sends its calls' results), so the caller publishes none of
// its own; GaveUpLate, the caller, and the executor that runs the call
// marks what it still sends Late; ClaimUnknown, the executor has not seen
// the call, and will refuse it if it comes.
const (
	GaveUpSent = "sent"
	GaveUpLate = "late"
)

// Header names of the invoke protocol. Messages an executor sends to an
// invocation's reply subject are a Result unless KindHeader says otherwise.
const (
	KindHeader    = "Toolbus-Kind"
	KindHeartbeat = "heartbeat"
	KindProgress  = "progress"
	// KindConfirm carries a ConfirmRequest that the caller may put to its
	// own user (Invocation.CallerConfirms).
	KindConfirm = "confirm"
	// KindWaiting carries a ConfirmWaiting: the call waits for a
	// person's answer, until when, and where one gives it.
	KindWaiting = "waiting"
	// KindQueued carries a Queued: the call waits in line for a slot of
	// a limit of calls at once.
	KindQueued = "queued"
	// KindLog carries a log message of the MCP server that serves the
	// call (the params of its notifications/message, as it sent them),
	// for the caller alone.
	KindLog = "log"
	// KindServerRequest carries a ServerRequest: the MCP server that
	// serves the call asks the caller's own client something
	// (Invocation.ServerRequests), for the caller alone.
	KindServerRequest = "server-request"
	// KindFence marks a caller's own message to its own inbox (see
	// invoke.Client): no executor sends it.
	KindFence = "fence"
	// ExecutorHeader names the executor that sends a heartbeat or answers
	// a claim: the one to ask whether the call still runs.
	ExecutorHeader = "Toolbus-Executor"
	// RetryableHeader, on a heartbeat or progress message, says the
	// call's policy decision marks it idempotent: a caller that loses
	// the call may retry it once (Invocation.Attempt). The executor that
	// takes the retry judges it again; the header only spares a caller
	// a retry that would be refused.
	RetryableHeader = "Toolbus-Retryable"
	// PrincipalHeader carries the principal of a call one executor
	// forwards to another (see principal.go).
	PrincipalHeader = "Toolbus-Principal"
	// AnswerToHeader carries, on a forwarded call, the reply subject the
	// bus gave the caller's request. The executor that runs the call
	// answers there itself: a client may not name a bus-made reply
	// subject ("_R_.…", an answer's way back into the caller's account)
	// as the reply of its own message, and a relay through the
	// forwarding executor would reorder a result after the caller's
	// fence (invoke.Client.fence).
	AnswerToHeader = "Toolbus-Answer-To"
	// CallHeader carries the id the executor that accepted a call minted
	// for it (Header.Call): on the invocation's record in the audit
	// stream, and on a call one executor forwards to another. Only
	// executors publish either.
	CallHeader = "Toolbus-Call"
)

// Names of the JetStream assets that hold the shared state.
const (
	// AuditStream is the stream that captures SubjectAll.
	AuditStream = "TOOLBUS_EVENTS"
	// ConfirmStream holds a copy of the confirmation subjects of the
	// audit stream (SubjectConfirmAll), sourced from it, for a day: what
	// an approver reads back when it starts. Direct get cannot be held
	// to some subjects of a stream (the filter is in the request's body,
	// which no permission sees), so approvers read this stream, which
	// holds nothing else, and never the audit stream itself.
	ConfirmStream = "TOOLBUS_CONFIRMATIONS"
	// CatalogBucket is the KV bucket holding the catalogue: its Tool
	// entries in shards, one entry per line (internal/catalog says how).
	CatalogBucket = "TOOLBUS_CATALOG"
	// CatalogLiveSubject + "." + key is where the bus republishes each
	// change of the catalogue bucket once stored, with its stream
	// sequence: readers that may not make a consumer of the bucket (the
	// agents) follow it there (JetStream's RePublish).
	CatalogLiveSubject = "toolbus.live.catalog"
	// AllowlistLiveSubject + "." + key is where the bus republishes each
	// change of the allowlist bucket, for readers that may not make a
	// consumer of it (an approver's console follows it there).
	AllowlistLiveSubject = "toolbus.live.allowlist"
	// PolicyLiveSubject + "." + key is where the bus republishes each
	// change of the policy bucket: a member that may not make a consumer
	// of it (an agent's MCP facade) follows the pushed policy there.
	PolicyLiveSubject = "toolbus.live.policy"
	// ServicesAPIPrefix is where a member in an account of its own (an
	// agent, the MCP facade, an approver, an auditor) sends the
	// JetStream API requests it may send to the services account, which
	// holds the streams: its own account's $JS.API is its own
	// JetStream, which it has none of.
	ServicesAPIPrefix = "$JS.TOOLBUS.API"
	// OutputBucket is the object store holding whole outputs that were too
	// long for a result, named by invocation id.
	OutputBucket = "TOOLBUS_OUTPUTS"
	// AllowlistBucket is the KV bucket of remembered approvals.
	AllowlistBucket = "TOOLBUS_ALLOWLIST"
	// PolicyBucket is the KV bucket holding the pushed policy set.
	PolicyBucket = "TOOLBUS_POLICY"
	// InvocationIDBucket is the KV bucket of the invocation ids taken,
	// one key per principal and id (executor.IDKey), made by executors:
	// an executor creates the key of every call it takes, and refuses a
	// call whose key exists (events.ErrInvocationIDReused).
	InvocationIDBucket = "TOOLBUS_INVOCATION_IDS"
	// LimitsStream is the counter stream (JetStream's AllowMsgCounter)
	// of the rates the policy limits exactly (data.toolbus.limits with
	// "exact": true): one subject, LimitCountPrefix + the limit's id +
	// "." + the window's number, per limit key and fixed window;
	// executors add to it, and the server's acknowledgement says the new
	// count.
	LimitsStream = "TOOLBUS_LIMITS"
	// LimitCountPrefix starts the subjects of LimitsStream.
	LimitCountPrefix = "toolbus.limits."
	// LimitSlotsBucket is the KV bucket of the calls at once the policy
	// limits: one key per limit id, holding the calls that hold a slot
	// and those that wait for one, in order, each with the executor that
	// runs it and a lease it renews (counters.Slots).
	LimitSlotsBucket = "TOOLBUS_LIMIT_SLOTS"
	// RegistryStateBucket is the KV bucket where the registry keeps its own
	// state (sequence counter, runtime enable/disable overrides).
	RegistryStateBucket = "TOOLBUS_REGISTRY"
	// AuditChainBucket is the KV bucket where the bus's owner keeps, per
	// signing key, the first and the latest AuditCheckpoint of its chain
	// (internal/audit/checkpoint), outside the audit stream whose limits
	// may evict them. Only the bus writes it; auditors read it.
	AuditChainBucket = "TOOLBUS_AUDIT_CHAIN"
)

// RegistryService is the NATS micro service name of the registry; its
// presence is checked with "$SRV.PING.toolbus-registry", which no stream
// captures, so an absent registry is noticed at once.
const RegistryService = "toolbus-registry"

// ExecutorService and ApproverService are the micro service names whose
// presence executors and clients check before they wait on a request.
const (
	ExecutorService = "toolbus-executor"
	ApproverService = "toolbus-approver"
)
