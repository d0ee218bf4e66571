package executor

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/protect"
)

// judging is what an executor decides calls with: the policy in force
// and the directory it follows, the remembered approvals, the user's
// hooks, and the decisions made lately.
type judging struct {
	// enforced is the policy in force: one for every call, or two
	// during a staged rollout (a call takes its own at its start).
	enforced  atomic.Pointer[policy.Enforced]
	watcher   *policy.Watcher
	shadow    *shadowing // the candidate in shadow, if any
	allowlist *allowlist
	hooks     *hooks.Set    // nil without hooks
	hookRuns  *hooks.Runner // runs them
	protected atomic.Pointer[protect.Set]
	decisions decisions
}

// Bounds of the decision cache; when one is reached it starts over. A
// call with larger arguments (a file's content to write) is not cached at
// all: such calls seldom repeat, and many of them would fill the memory.
const (
	maxCachedDecisions = 50000
	maxCachedBytes     = 32 << 20
	maxCachedKey       = 4 << 10
)

// decisions remembers what a deterministic policy decided for an exact
// input: the same tool version, caller and argument bytes, under the same
// policy, the same allowlist and the same protected paths, always get the
// same decision, so it is evaluated once. A policy that calls a
// nondeterministic built-in is never cached, and a new policy, any
// allowlist change or new protected paths start the cache over.
type decisions struct {
	mu        sync.Mutex
	policy    *policy.Policy
	allowlist uint64
	protected *protect.Set
	m         map[string]judged
	bytes     int // of the keys and records in m
}

// judged is a decision and the input it was made on, as the audit trail
// records it (policy.Recorded).
type judged struct {
	policy.Decision
	rec policy.Recorded
}

// appendDecisionKey appends to b everything the policy input is made of
// that can vary between calls of one executor. A lookup with it allocates
// nothing; only a new entry copies it.
func appendDecisionKey(b []byte, t *events.Tool, inv *events.Invocation, paths, hardLinks []string) []byte {
	c := inv.Sender
	b = append(b, t.Name...)
	b = append(b, 0)
	b = strconv.AppendUint(b, t.Seq, 10)
	b = append(b, 0)
	b = strconv.AppendInt(b, t.UpdatedAt.UnixNano(), 10)
	for _, s := range [...]string{c.ID, c.Role, c.Agent, c.Session, c.User, c.Host, c.Client} {
		b = append(b, 0)
		b = append(b, s...)
	}
	// Whether the bus vouched for the caller is part of the input: a
	// claim must never reuse the verdict given to the proven caller of
	// the same name.
	b = append(b, 0)
	b = strconv.AppendBool(b, c.Proven)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(len(paths)), 10)
	for _, p := range paths {
		b = append(b, 0)
		b = append(b, p...)
	}
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(len(hardLinks)), 10)
	for _, p := range hardLinks {
		b = append(b, 0)
		b = append(b, p...)
	}
	b = append(b, 0)
	return append(b, inv.Args...)
}

func (d *decisions) get(p *policy.Policy, allowlist uint64, protected *protect.Set, key []byte) (judged, bool) {
	if !p.Deterministic() || len(key) > maxCachedKey {
		return judged{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.policy != p || d.allowlist != allowlist || d.protected != protected {
		return judged{}, false
	}
	v, ok := d.m[string(key)]
	return v, ok
}

func (d *decisions) put(p *policy.Policy, allowlist uint64, protected *protect.Set, key []byte, v judged) {
	if !p.Deterministic() || len(key) > maxCachedKey {
		return
	}
	size := len(key) + len(v.rec.Input) + len(v.rec.ShellLine)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.policy != p || d.allowlist != allowlist || d.protected != protected || len(d.m) >= maxCachedDecisions || d.bytes+size > maxCachedBytes {
		d.policy, d.allowlist, d.protected, d.m, d.bytes = p, allowlist, protected, make(map[string]judged), 0
	}
	d.m[string(key)] = v
	d.bytes += size
}
