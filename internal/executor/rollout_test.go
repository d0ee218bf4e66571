package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
)

// A revision rolled out to 50% decides the calls of the principals in
// its cohort, and the stable one the rest: across 200 calls from 20
// principals, each principal sees one policy, and the principals that
// see the new one are exactly those its stable hash puts in the share.
// Completing the rollout (--to 100) and rolling back each hold across a
// restart of the executor.
func TestAStagedRolloutGivesEachPrincipalOnePolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	ctx := context.Background()
	js := e.bus.JetStream()
	team := policy.PushOptions{By: "policy-team", Key: policytest.Team(t), Share: policy.Share{Percent: 50}}
	pushed, rollout, err := policy.Push(ctx, js, denyReads, team)
	if err != nil {
		t.Fatal(err)
	}
	if rollout.Stable != "" || rollout.Next != pushed.Revision {
		t.Fatalf("the rollout: %+v", rollout)
	}
	testkit.Eventually(t, "the executor enforces the rollout", func() bool {
		en := e.exec.Enforced()
		return en.Next != nil && en.Next.Revision() == pushed.Revision
	})

	conn := bustest.Connect(t, e.bus).Conn()
	denied := map[string]int{}
	inShare := 0
	for i := range 20 {
		principal := fmt.Sprintf("agent-%02d", i)
		if policy.Cohort(principal) < 50 {
			inShare++
		}
		c := invoke.NewClient(conn, events.Identity{ID: principal, Role: "agent"}, principal)
		for range 10 {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			res, err := c.Invoke(cctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if errType(res) == events.ErrPolicyDenied {
				denied[principal]++
			} else if res.Error != nil {
				t.Fatalf("%s: %s %s", principal, errType(res), res.LLMContent)
			}
		}
		c.Close()
		in := policy.Cohort(principal) < 50
		switch n := denied[principal]; {
		case in && n != 10, !in && n != 0:
			t.Errorf("%s (cohort %d): %d of 10 calls denied; want all or none, by its cohort", principal, policy.Cohort(principal), n)
		}
	}
	if len(denied) != inShare || inShare < 5 || inShare > 15 {
		t.Errorf("%d principals saw the new revision, %d are in its share of 20", len(denied), inShare)
	}

	// Completed: every call, and on an executor started anew.
	team.Share = policy.Share{Percent: 100}
	if _, _, err := policy.Push(ctx, js, denyReads, team); err != nil {
		t.Fatal(err)
	}
	restarted := func(want string) {
		t.Helper()
		e.exec.Stop(ctx)
		e.exec = e.startExecutor(t, e.bus)
		if got := e.exec.Enforced(); got.Next != nil || got.Stable.Revision() != want {
			t.Fatalf("after a restart, the executor enforces %s; want %s alone", got.Revisions(), want)
		}
	}
	restarted(pushed.Revision)
	waitVerdict(t, e, events.ErrPolicyDenied)

	// Rolled back: to the executors' own policy, from before the push.
	r, err := policy.Rollback(ctx, js, "", "policy-team")
	if err != nil || r.Stable != "" {
		t.Fatalf("rollback: %+v %v", r, err)
	}
	restarted(defaultPol(t).Revision())
	waitVerdict(t, e, "")
}
