package toolbus

import (
	"errors"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// ErrorType classifies a failed call. It is itself an error, so that each
// type is a sentinel: errors.Is(err, toolbus.ErrPolicyDenied) holds for
// the *ToolError of every denied call. Types this package does not name
// (a newer fleet's) arrive as they are and compare the same way.
type ErrorType string

// Error implements error.
func (t ErrorType) Error() string { return string(t) }

// The error types of a failed call, one per type of the wire contract,
// and made from it, so the two cannot drift apart.
const (
	// ErrToolNotFound: no active tool has the name (nor alias, nor
	// export name) the call gave.
	ErrToolNotFound = ErrorType(events.ErrToolNotFound)
	// ErrInvalidParams: the arguments do not fit the tool's schema, or
	// the call was refused as malformed.
	ErrInvalidParams = ErrorType(events.ErrInvalidParams)
	// ErrPolicyDenied: the policy said DENY, or ASK_USER with no
	// approver to ask. The message holds the policy's reason.
	ErrPolicyDenied = ErrorType(events.ErrPolicyDenied)
	// ErrUserCancelled: the person asked to confirm the call refused it.
	ErrUserCancelled = ErrorType(events.ErrUserCancelled)
	// ErrConfirmationTimeout: nobody answered the confirmation in time.
	ErrConfirmationTimeout = ErrorType(events.ErrConfirmationTimeout)
	// ErrExecutionFailed: the tool ran and failed.
	ErrExecutionFailed = ErrorType(events.ErrExecutionFailed)
	// ErrTimeout: the call's deadline (the executor's, the call's own
	// WithTimeout, or the context's) passed; the call was stopped.
	ErrTimeout = ErrorType(events.ErrTimeout)
	// ErrCancelled: the call was cancelled (Cancel, or the context).
	ErrCancelled = ErrorType(events.ErrCancelled)
	// ErrExecutorLost: the executor running the call went away.
	ErrExecutorLost = ErrorType(events.ErrExecutorLost)
	// ErrInvocationIDReused: the id named another call of this caller,
	// or this same request sent before. Use a fresh id.
	ErrInvocationIDReused = ErrorType(events.ErrInvocationIDReused)
	// ErrTooManyPending: the call would ask a person while as many of
	// this caller's calls wait for an answer as one caller may.
	ErrTooManyPending = ErrorType(events.ErrTooManyPending)
	// ErrRateLimited: this caller had more recorded in the audit trail
	// lately than one caller may; the call was not run. Retry later.
	ErrRateLimited = ErrorType(events.ErrRateLimited)
	// ErrConcurrencyLimited: as many of this caller's calls of the kind
	// run at once as the policy lets run; the call was not run.
	ErrConcurrencyLimited = ErrorType(events.ErrConcurrencyLimited)
	// ErrAuditFull: the audit trail is near its size cap (or refused
	// the call's record), and the fleet runs no call it cannot record;
	// the call was not run. Calls run again once old records age out or
	// an operator raises the cap.
	ErrAuditFull = ErrorType(events.ErrAuditFull)

	// Failures of the built-in tools.
	ErrFileNotFound           = ErrorType(events.ErrFileNotFound)
	ErrFileTooLarge           = ErrorType(events.ErrFileTooLarge)
	ErrPathNotInWorkspace     = ErrorType(events.ErrPathNotInWorkspace)
	ErrEditNoOccurrence       = ErrorType(events.ErrEditNoOccurrence)
	ErrEditOccurrenceMismatch = ErrorType(events.ErrEditOccurrenceMismatch)
	ErrShellFailed            = ErrorType(events.ErrShellFailed)

	// ErrMCPToolError: an MCP server ran the call and reported failure
	// (isError); the message is the server's text.
	ErrMCPToolError = ErrorType(events.ErrMCPToolError)
)

// ToolError is a failed call: the call was made and reached a verdict,
// which was failure. It unwraps to its Type, so errors.Is matches the
// ErrorType sentinels.
type ToolError struct {
	Type    ErrorType
	Message string
	// RetryAfter, on ErrRateLimited and ErrConcurrencyLimited, is how
	// long to wait before sending the call again.
	RetryAfter time.Duration
}

// Error implements error.
func (e *ToolError) Error() string {
	if e.Message == "" {
		return string(e.Type)
	}
	return string(e.Type) + ": " + e.Message
}

// Unwrap returns the error type, the sentinel to match with errors.Is.
func (e *ToolError) Unwrap() error { return e.Type }

// ErrNoExecutor is returned by Ping and ReadOutput when no executor runs
// on the bus.
var ErrNoExecutor = errors.New("toolbus: no executor is running on this bus")

// ErrNoCatalog is returned by Tools, Declarations and ToolNameFor when the
// bus has no tool catalogue: no registry has run against it.
var ErrNoCatalog = errors.New("toolbus: no tool catalogue on this bus (has a registry run against it?)")

// ErrNoOutput is returned by ReadOutput when the object store holds no
// output under the name that this client may read: the call's output was
// not truncated, it expired, or it is another identity's.
var ErrNoOutput = errors.New("toolbus: no stored output under that name")

func toolError(e *events.ToolError) *ToolError {
	if e == nil {
		return nil
	}
	return &ToolError{Type: ErrorType(e.Type), Message: e.Message, RetryAfter: time.Duration(e.RetryAfterMillis) * time.Millisecond}
}
