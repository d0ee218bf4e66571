package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/events"
)

// Exit codes. 0, 1 and 2 are the common convention (success, failure,
// a mistake in the command line); the would-change code follows 2 as
// diff's and terraform's "there are changes" codes stand beside their
// error codes; denied takes gh's small power of two for "not allowed";
// a timeout is 124 as timeout(1) exits; a signal is 128 + its number, as
// a shell reports a death by it (130 for Ctrl-C). A tool's own failure is
// 1, never the failing command's status, which could be any of these.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitWouldChange = 3
	exitDenied      = 4
	exitTimeout     = 124
	exitCancelled   = 128 + 2 // SIGINT
)

// exitCodes document the exit codes, in docs/cli.md and in the root
// command's help: each with its name, the types --json's error object
// gives it, and what it means.
var exitCodes = []struct {
	code    int
	name    string
	types   []string
	meaning string
}{
	{exitOK, "ok", nil, "Success."},
	{exitFailure, "failure", []string{"ERROR", "EXIT_STATUS", "the call's error type (TOOL_NOT_FOUND, FILE_NOT_FOUND, ...)"},
		"A failure: the bus cannot be reached, no such tool, or the tool ran and failed. A shell command that ran and exited non-zero is EXIT_STATUS, with its own status in the message and in the result's exitCode."},
	{exitUsage, "usage", []string{"USAGE"}, "A mistake in the command line: an unknown command or flag, a missing or extra argument, a bad value."},
	{exitWouldChange, "would change", []string{"WOULD_CHANGE"}, "`toolbus audit whatif --fail-on-change`: decisions would change under the policy set."},
	{exitDenied, "denied", []string{"POLICY_DENIED", "USER_CANCELLED"}, "The call was not allowed: the policy denied it, or an approver refused it."},
	{exitTimeout, "timeout", []string{"TIMEOUT", "CONFIRMATION_TIMEOUT"}, "A deadline passed: the call's (`--timeout`, or the executor's), or the wait for an approver's answer."},
	{exitCancelled, "cancelled", []string{"CANCELLED"}, "The call was cancelled: Ctrl-C, or `toolbus cancel` from elsewhere. SIGTERM ends a command with 143 (128 + 15)."},
}

// exitCodeSummary is the exit codes on one line.
func exitCodeSummary() string {
	parts := make([]string, len(exitCodes))
	for i, c := range exitCodes {
		parts[i] = fmt.Sprintf("%d %s", c.code, c.name)
	}
	return strings.Join(parts, ", ")
}

// usageError marks a mistake in the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func (usageError) ExitCode() int { return exitUsage }

func (usageError) ErrorType() string { return "USAGE" }

// exitCode is the exit code an error carries (ExitCode, as usageError
// and stoppedBy do), else 1.
func exitCode(err error) int {
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return exitFailure
}

// errorType is the type an error carries (ErrorType), else ERROR: the
// name a script matches in --json's error object.
func errorType(err error) string {
	var typed interface{ ErrorType() string }
	if errors.As(err, &typed) {
		return typed.ErrorType()
	}
	return "ERROR"
}

// resultExitCode is the exit code of a call that ended with the error
// type t.
func resultExitCode(t events.ErrorType) int {
	switch t {
	case events.ErrPolicyDenied, events.ErrUserCancelled:
		return exitDenied
	case events.ErrTimeout, events.ErrConfirmationTimeout:
		return exitTimeout
	case events.ErrCancelled:
		return exitCancelled
	}
	return exitFailure
}

// flagError makes a flag the command line got wrong a usage error.
func flagError(_ *cobra.Command, err error) error { return usageError{err} }

// reportError prints err on w as the command's last word: a JSON object
// when the command was asked for JSON, else a line, and for a mistake in
// the command line where to read about it.
func reportError(w io.Writer, cmd *cobra.Command, err error, asJSON bool) {
	if asJSON {
		out := struct {
			Error        string `json:"error"`
			Type         string `json:"type"`
			ExitCode     int    `json:"exitCode"`
			InvocationID string `json:"invocationId,omitempty"`
		}{Error: err.Error(), Type: errorType(err), ExitCode: exitCode(err)}
		var call interface{ invocationID() string }
		if errors.As(err, &call) {
			out.InvocationID = call.invocationID()
		}
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		enc.Encode(out)
		return
	}
	fmt.Fprintln(w, "toolbus:", err)
	var u usageError
	if errors.As(err, &u) && cmd != nil {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}
