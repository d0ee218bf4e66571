package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// usageError marks a mistake in the command line (exit code 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func (usageError) ExitCode() int { return 2 }

// exitCode is the exit code an error carries (ExitCode, as usageError
// and stoppedBy do), else 1.
func exitCode(err error) int {
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return 1
}

// flagError makes a flag the command line got wrong a usage error.
func flagError(_ *cobra.Command, err error) error { return usageError{err} }

// reportError prints err on w as the command's last word, and for a
// mistake in the command line where to read about it.
func reportError(w io.Writer, cmd *cobra.Command, err error) {
	fmt.Fprintln(w, "toolbus:", err)
	var u usageError
	if errors.As(err, &u) && cmd != nil {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}
