package policy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// A watcher given a list of signers enforces a pushed set only when a
// key on the list signed it: an unsigned set and one a stranger signed
// are rejected, the set in force stays, and the rejection says why; the
// set the team's key signed is applied.
func TestAWatcherEnforcesOnlySignedSets(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	team, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateUser()
	teamPub, _ := team.PublicKey()
	signers, err := policy.ParseSigners(strings.NewReader(teamPub + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var applied []string
	var rejected []error
	ctx := context.Background()
	w, err := policy.Watch(ctx, b.JetStream(), policy.WatchConfig{Signers: signers, Logger: bustest.Quiet(),
		Apply: func(p *policy.Policy) { mu.Lock(); applied = append(applied, p.Revision()); mu.Unlock() },
		Report: func(status, _, _ string, err error) {
			if status == "rejected" {
				mu.Lock()
				rejected = append(rejected, err)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	set := func(reason string) policy.Files {
		return policy.Files{"toolbus.rego": "package toolbus\n\ndecision := {\"verdict\": \"DENY\", \"reason\": \"" + reason + "\"}\n"}
	}
	for i, c := range []struct {
		key  nkeys.KeyPair
		want error
	}{{nil, policy.ErrUnsigned}, {stranger, policy.ErrUnknownSigner}} {
		if _, err := policy.Push(ctx, b.JetStream(), set(c.want.Error()), "pusher", c.key); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the set is rejected", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(rejected) == i+1
		})
		mu.Lock()
		if !errors.Is(rejected[i], c.want) || len(applied) != 0 {
			t.Errorf("push %d: rejected for %v, %d applied; want %v and none", i, rejected[i], len(applied), c.want)
		}
		mu.Unlock()
		if err := w.Health(); err == nil || !strings.Contains(err.Error(), c.want.Error()) {
			t.Errorf("push %d: health %v, want it to say %q", i, err, c.want)
		}
	}
	pushed, err := policy.Push(ctx, b.JetStream(), set("signed by the team"), "pusher", team)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the signed set is applied", func() bool { return w.Current() == pushed.Revision })
	if err := w.Health(); err != nil {
		t.Errorf("health after the signed set: %v", err)
	}
}
