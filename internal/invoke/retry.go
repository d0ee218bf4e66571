package invoke

import (
	"context"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// A call lost with its executor (EXECUTOR_LOST) is tried once more, under
// its id as attempt 2 (events.Invocation.Attempt), when the executor said
// before it fell silent that the call's policy decision marks it
// idempotent (events.RetryableHeader on a heartbeat or progress). That
// word only spares a retry that would be refused: the executor that takes
// the retry checks it is the first attempt's call, of this caller, and
// judges it again, and runs it only when its own decision says
// idempotent. A call lost before its executor said anything (within a
// heartbeat of its start, with no output) is not retried.
//
// The first attempt is given up before the retry is sent (so a result it
// still sends is Late), and its loss is recorded only when the retry
// cannot take its place: the call's one terminal result is the retry's.

// Option is an optional knob of a Client.
type Option func(*Client)

// WithoutRetries makes the client retry no call.
func WithoutRetries() Option { return func(c *Client) { c.noRetry = true } }

// WithRetryTimeout gives a retry the deadline d instead of its first
// attempt's (events.Invocation.TimeoutMillis): a read that timed out its
// executor's heartbeats on a slow disk may want longer. The executor
// gives a retry at most the longest deadline a call may ask of it.
func WithRetryTimeout(d time.Duration) Option {
	return func(c *Client) { c.retryTimeout = d }
}

// mayRetry says whether the call inv that ended with fail is tried again.
func (c *Client) mayRetry(ctx context.Context, inv *events.Invocation, fail *failure) bool {
	return !c.noRetry && fail.Type == events.ErrExecutorLost && fail.retryable && !fail.recorded &&
		events.AttemptOf(inv.Attempt) < events.MaxAttempts && ctx.Err() == nil
}

// retry sends inv again as its next attempt, on principal's subject, and
// returns the retry's result. When the retry cannot be sent, or the
// executor refuses it (INVOCATION_ID_REUSED: not the same call, or not
// idempotent by its decision), the first attempt's loss is the call's
// result, recorded as any lost call's.
func (c *Client) retry(ctx context.Context, inv *events.Invocation, principal string, w *Watch, lost *failure) (*events.Result, error) {
	again := *inv
	again.Attempt = events.AttemptOf(inv.Attempt) + 1
	if c.retryTimeout > 0 {
		again.TimeoutMillis = c.retryTimeout.Milliseconds()
	}
	res, err := c.invokeAs(ctx, &again, principal, w)
	if err != nil || res.Error != nil && res.Error.Type == events.ErrInvocationIDReused {
		return c.synthesize(inv, lost), nil
	}
	return res, nil
}
