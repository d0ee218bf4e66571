package toolbus

import (
	"errors"

	"github.com/toolbus/toolbus/internal/events"
)

// ErrorType classifies a failed call. It is itself an error, so that each
// type is a sentinel: errors.Is(err, toolbus.ErrPolicyDenied) holds for
// the *ToolError of every denied call. Types this package does not name
// (a newer fleet's) arrive as they are and compare the same way.
type ErrorType string

// Error implements error.
func (t ErrorType) Error() string { return string(t) }

// The error types of a failed call, one per type of the wire contract.
const (
	// ErrToolNotFound: no active tool has the name (nor alias, nor
	// export name) the call gave.
	ErrToolNotFound ErrorType = "TOOL_NOT_FOUND"
	// ErrInvalidParams: the arguments do not fit the tool's schema, or
	// the call was refused as malformed.
	ErrInvalidParams ErrorType = "INVALID_TOOL_PARAMS"
	// ErrPolicyDenied: the policy said DENY, or ASK_USER with no
	// approver to ask. The message holds the policy's reason.
	ErrPolicyDenied ErrorType = "POLICY_DENIED"
	// ErrUserCancelled: the person asked to confirm the call refused it.
	ErrUserCancelled ErrorType = "USER_CANCELLED"
	// ErrConfirmationTimeout: nobody answered the confirmation in time.
	ErrConfirmationTimeout ErrorType = "CONFIRMATION_TIMEOUT"
	// ErrExecutionFailed: the tool ran and failed.
	ErrExecutionFailed ErrorType = "EXECUTION_FAILED"
	// ErrTimeout: the call's deadline (the executor's, the call's own
	// WithTimeout, or the context's) passed; the call was stopped.
	ErrTimeout ErrorType = "TIMEOUT"
	// ErrCancelled: the call was cancelled (Cancel, or the context).
	ErrCancelled ErrorType = "CANCELLED"
	// ErrExecutorLost: the executor running the call went away.
	ErrExecutorLost ErrorType = "EXECUTOR_LOST"

	// Failures of the built-in tools.
	ErrFileNotFound           ErrorType = "FILE_NOT_FOUND"
	ErrFileTooLarge           ErrorType = "FILE_TOO_LARGE"
	ErrPathNotInWorkspace     ErrorType = "PATH_NOT_IN_WORKSPACE"
	ErrEditNoOccurrence       ErrorType = "EDIT_NO_OCCURRENCE_FOUND"
	ErrEditOccurrenceMismatch ErrorType = "EDIT_EXPECTED_OCCURRENCE_MISMATCH"
	ErrShellFailed            ErrorType = "SHELL_EXECUTE_ERROR"

	// ErrMCPToolError: an MCP server ran the call and reported failure
	// (isError); the message is the server's text.
	ErrMCPToolError ErrorType = "MCP_TOOL_ERROR"
)

// ToolError is a failed call: the call was made and reached a verdict,
// which was failure. It unwraps to its Type, so errors.Is matches the
// ErrorType sentinels.
type ToolError struct {
	Type    ErrorType
	Message string
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

// ErrNoExecutor is returned by Ping when no executor runs on the bus.
var ErrNoExecutor = errors.New("toolbus: no executor is running on this bus")

// ErrNoCatalog is returned by Tools, Declarations and ToolNameFor when the
// bus has no tool catalogue: no registry has run against it.
var ErrNoCatalog = errors.New("toolbus: no tool catalogue on this bus (has a registry run against it?)")

// ErrNoOutput is returned by ReadOutput when the object store holds no
// output under the name: the call's output was not truncated, or it
// expired.
var ErrNoOutput = errors.New("toolbus: no stored output under that name")

func toolError(e *events.ToolError) *ToolError {
	if e == nil {
		return nil
	}
	return &ToolError{Type: ErrorType(e.Type), Message: e.Message}
}
