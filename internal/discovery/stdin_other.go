//go:build !linux

package discovery

import (
	"fmt"
	"os"
)

// stdinInlined is stdinOf for arguments that fit in the pipe before the
// start: the pipe written and its write end closed at once.
func stdinInlined(args []byte) (*os.File, *feeder, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot make the pipe for the arguments: %w", err)
	}
	_, err = w.Write(args)
	w.Close()
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("cannot write the arguments: %w", err)
	}
	return r, nil, nil
}
