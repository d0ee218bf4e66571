package executor

import (
	"strconv"
	"strings"
	"sync"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// maxCachedDecisions bounds the decision cache; when full it starts over.
const maxCachedDecisions = 50000

// decisions remembers what a deterministic policy decided for an exact
// input: the same tool version, caller and argument bytes, under the same
// policy and the same allowlist, always get the same decision, so it is
// evaluated once. A policy that calls a nondeterministic built-in is never
// cached, and a new policy or any allowlist change starts the cache over.
type decisions struct {
	mu        sync.Mutex
	policy    *policy.Policy
	allowlist uint64
	m         map[string]policy.Decision
}

// key is everything the policy input is made of that can vary between
// calls of one executor.
func decisionKey(t *events.Tool, inv *events.Invocation) string {
	c := inv.Sender
	var b strings.Builder
	b.Grow(len(t.Name) + len(inv.Args) + len(c.ID) + 64)
	for _, s := range []string{t.Name, strconv.FormatUint(t.Seq, 10), strconv.FormatInt(t.UpdatedAt.UnixNano(), 10),
		c.ID, c.Role, c.Agent, c.Session, c.User, c.Host} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	b.Write(inv.Args)
	return b.String()
}

func (d *decisions) get(p *policy.Policy, allowlist uint64, key string) (policy.Decision, bool) {
	if !p.Deterministic() {
		return policy.Decision{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.policy != p || d.allowlist != allowlist {
		return policy.Decision{}, false
	}
	v, ok := d.m[key]
	return v, ok
}

func (d *decisions) put(p *policy.Policy, allowlist uint64, key string, v policy.Decision) {
	if !p.Deterministic() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.policy != p || d.allowlist != allowlist || len(d.m) >= maxCachedDecisions {
		d.policy, d.allowlist, d.m = p, allowlist, make(map[string]policy.Decision)
	}
	d.m[key] = v
}
