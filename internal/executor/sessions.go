package executor

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/internal/counters"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// Loop guards: a model that loops calls the same tool with the same
// arguments again and again, or simply never stops calling. For every
// call, the policy is shown how many calls its caller's session made and
// how many times the caller made this very call lately
// (policy.SessionCounts), counted fleet-wide by the executor's
// counters.Fleet: each executor counts the calls it judges at once and
// tells the others, so that every executor sees every call of a caller,
// those made elsewhere once their message has come (docs/fleet.md).
//
// Calls are counted under who makes them (counted): the proven
// principal, or, without identities, the caller's claimed id. A session
// is counted under that and the session's name together: a caller naming
// another principal's session counts its own calls, never that
// principal's. A call that names no session is counted in its caller's
// own bucket, as a session that never ends. Repeats are counted under the
// caller alone, whatever session each call named: a loop that renames its
// session, or drops it, goes on counting. The names are the caller's
// choice (any bytes): the keys hold their hashes. An agent that names
// a new session for every call starts its session's calls from zero each
// time; per-principal limits are what bound it.
//
// Each counted call adds one to each of three counts: the session's
// calls, and the caller's repeats of this call in the current window and
// in the next. A window's count then holds the calls of the window
// before it and its own, so the repeats a call sees are those of the
// last repeatWindow at least and of twice that at most. A session's
// count not added to for sessionMaxAge is forgotten: a session idle that
// long starts again from zero. So is the oldest count when the counters
// are full (counters.DefaultMaxKeys): a flood of calls is what rate
// limits are for.
//
// The counts are made only for a policy that reads input.session
// (policy.Policy.ReadsSession); under any other, a call costs nothing
// here. When they cannot be made (the counters closed, the executor cut
// off from the bus) the call is not judged: it fails, never decided
// without them.

// Bounds of the session counts.
const (
	repeatWindow  = 5 * time.Minute
	sessionMaxAge = 24 * time.Hour
)

// sessionCounts counts the call in its session (or its caller's calls
// without one) and returns the counts the policy is shown; nil when the
// policy has no need of them.
func (c *call) sessionCounts(pol *policy.Policy, args map[string]any) (*policy.SessionCounts, error) {
	if !pol.ReadsSession() {
		return nil, nil
	}
	canonical, err := json.Marshal(args) // keys sorted, numbers as written
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	who := c.counted()
	now := time.Now()
	current, next := repeatCounts(counters.Key(who, c.tool.Name, string(canonical)), now)
	values, _, err := c.e.counts.Add(
		counters.Increment{Key: "calls." + counters.Key(who, c.inv.Sender.Session), N: 1, Until: now.Add(sessionMaxAge)},
		current, next)
	if err != nil {
		return nil, err
	}
	return &policy.SessionCounts{Calls: values[0], Repeats: values[1]}, nil
}

// repeatCounts are the increments of the repeat counts of call (its
// counters.Key) at now: the current window's, which the call reads, and
// the next one's, which the calls of the next window read. Each is kept
// to the end of the window it is read in.
func repeatCounts(call string, now time.Time) (current, next counters.Increment) {
	w := now.UnixNano() / int64(repeatWindow)
	in := func(w int64) counters.Increment {
		return counters.Increment{Key: "repeats." + strconv.FormatInt(w, 10) + "." + call, N: 1,
			Until: time.Unix(0, (w+1)*int64(repeatWindow))}
	}
	return in(w), in(w + 1)
}

// counted is who the loop guards count a call under: the proven
// principal, which is the caller whatever it names itself; without
// identities, where every caller is the unproven principal, the id the
// caller claims, so that two agents' calls are not taken for one loop.
func (c *call) counted() string {
	if c.principal != events.Unproven {
		return c.principal
	}
	return events.Unproven + "\x00" + c.inv.Sender.ID
}

// Counts is the executor's counts of the fleet's calls, for a reader
// that waits until another executor's counts have arrived (Heard, Told)
// or reads one (Value).
func (e *Executor) Counts() *counters.Fleet { return e.counts }
