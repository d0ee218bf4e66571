package discovery

import (
	"fmt"
	"os"
	"syscall"
)

// stdinInlined is stdinOf for arguments that fit in the pipe before the
// start: a bare pipe, both ends blocking, written and its write end
// closed at once. Neither end goes near the runtime's poller, and the
// read end is handed to the tree as it is (os.Pipe would make both ends
// non-blocking and polled, and the read end blocking again to hand it
// over).
func stdinInlined(args []byte) (*os.File, *feeder, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("cannot make the pipe for the arguments: %w", err)
	}
	for rest := args; len(rest) > 0; {
		n, err := syscall.Write(p[1], rest)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			syscall.Close(p[0])
			syscall.Close(p[1])
			return nil, nil, fmt.Errorf("cannot write the arguments: %w", err)
		}
		rest = rest[n:]
	}
	syscall.Close(p[1])
	return os.NewFile(uintptr(p[0]), "|0"), nil, nil
}
