package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
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
	w, err := policy.Watch(ctx, b.JetStream(), policy.WatchConfig{Own: policytest.Default(t), Signers: signers, Logger: bustest.Quiet(),
		Apply: func(en *policy.Enforced) { mu.Lock(); applied = append(applied, en.Stable.Revision()); mu.Unlock() },
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
		if _, _, err := policy.Push(ctx, b.JetStream(), set(c.want.Error()), policy.PushOptions{By: "pusher", Key: c.key}); err != nil {
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
	pushed, _, err := policy.Push(ctx, b.JetStream(), set("signed by the team"), policy.PushOptions{By: "pusher", Key: team})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the signed set is applied", func() bool { return w.Current() == pushed.Revision })
	if err := w.Health(); err != nil {
		t.Errorf("health after the signed set: %v", err)
	}
}

// A revision altered after it was signed (its files changed, its
// signature kept, written where a push would write it) is refused; so is
// every pushed revision on a host with no trust list, whose health says
// why.
func TestAnAlteredRevisionAndAHostWithoutATrustListAreRefused(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	ctx := context.Background()
	js := b.JetStream()
	own := policytest.Default(t)
	var mu sync.Mutex
	var rejected []error
	watch := func(signers *policy.Signers) *policy.Watcher {
		w, err := policy.Watch(ctx, js, policy.WatchConfig{Own: own, Signers: signers, Logger: bustest.Quiet(),
			Apply: func(*policy.Enforced) {},
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
		t.Cleanup(w.Stop)
		return w
	}
	signed := policy.Files{"toolbus.rego": "package toolbus\n\ndecision := {\"verdict\": \"DENY\", \"reason\": \"signed\"}\n"}
	pushed := policytest.Push(t, js, signed, "policy-team")

	bare := watch(nil)
	if bare.Current() != own.Revision() {
		t.Errorf("a host with no trust list enforces %s", bare.Current())
	}
	if err := bare.Health(); err == nil || !strings.Contains(err.Error(), "no list of policy signers") {
		t.Errorf("its health: %v", err)
	}

	w := watch(policytest.TeamSigners(t))
	if w.Current() != pushed.Revision {
		t.Fatalf("the signed revision is not in force: %s", w.Current())
	}
	altered := policy.Files{"toolbus.rego": strings.Replace(signed["toolbus.rego"], "DENY", "ALLOW", 1)}
	forged := *pushed
	forged.Files, forged.Revision = altered, altered.Revision()
	data, _ := json.Marshal(forged)
	kv, _ := policy.Bucket(ctx, js)
	if _, err := kv.Put(ctx, "rev."+strings.TrimPrefix(forged.Revision, "sha256:"), data); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "active", []byte(`{"stable":"`+forged.Revision+`"}`)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the altered revision is refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(rejected, func(err error) bool { return errors.Is(err, policy.ErrBadSignature) })
	})
	if w.Current() != pushed.Revision {
		t.Errorf("after the altered revision, %s is in force", w.Current())
	}
}
