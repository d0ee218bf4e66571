package invoke

import "time"

// Liveness of a call, shared by callers and executors. HeartbeatEvery is
// how often a running call tells its caller it is alive, naming its
// executor. A caller that hears nothing for LostAfter asks whether an
// executor still runs the call (the one named, else all of them), and
// gives EXECUTOR_LOST when none does: at once when the executor is gone
// or the executors that answer do not run it, or once the executors asked
// have answered nothing, or only that they are behind on their
// invocations, for UnansweredFor (overloaded, frozen, or cut off from the
// bus while the server still holds their connection).
const (
	HeartbeatEvery = time.Second
	LostAfter      = 4 * HeartbeatEvery
	UnansweredFor  = 30 * time.Second
)
