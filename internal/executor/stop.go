package executor

import (
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// stop is why a call ends before its tool gives a result: the error type
// and the message the caller and its model read. The steps of the
// pipeline return one, or nil to go on.
type stop struct {
	Type events.ErrorType
	Msg  string
}

// output is the stop as the call's output.
func (s *stop) output() ending { return ending{out: tool.Failed(s.Type, s.Msg)} }

// halt is the ending of a call stopped with t and msg.
func halt(t events.ErrorType, msg string) ending { return (&stop{t, msg}).output() }

// ending is how a call ends (call.end): the output to send, and ran when
// it is what the tool returned, which the post hooks see before it is
// sent.
type ending struct {
	out *tool.Output
	ran bool
}
