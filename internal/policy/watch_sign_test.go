package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
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
	ctx := context.Background()
	w := watchSigned(t, b.JetStream(), signers)
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
		testkit.Eventually(t, "the set is rejected", func() bool { return len(w.rejections()) == i+1 })
		if rejected, applied := w.rejections(), w.appliedRevisions(); !errors.Is(rejected[i], c.want) || len(applied) != 0 {
			t.Errorf("push %d: rejected for %v, %d applied; want %v and none", i, rejected[i], len(applied), c.want)
		}
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
	watch := func(signers *policy.Signers) *watched { return watchSigned(t, js, signers) }
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
		return slices.ContainsFunc(w.rejections(), func(err error) bool { return errors.Is(err, policy.ErrBadSignature) })
	})
	if w.Current() != pushed.Revision {
		t.Errorf("after the altered revision, %s is in force", w.Current())
	}
}

// watched is a Watcher of a test's bus with the host's own policy the
// default one, and what it applied and rejected.
type watched struct {
	*policy.Watcher
	mu       sync.Mutex
	applied  []string
	rejected []error
}

func watchSigned(t *testing.T, js jetstream.JetStream, signers *policy.Signers) *watched {
	t.Helper()
	w := &watched{}
	var err error
	w.Watcher, err = policy.Watch(context.Background(), js, policy.WatchConfig{Own: policytest.Default(t), Signers: signers, Logger: bustest.Quiet(),
		Apply: func(en *policy.Enforced) {
			w.mu.Lock()
			w.applied = append(w.applied, en.Stable.Revision())
			w.mu.Unlock()
		},
		Report: func(status, _, _ string, err error) {
			if status == "rejected" {
				w.mu.Lock()
				w.rejected = append(w.rejected, err)
				w.mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func (w *watched) rejections() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.rejected)
}

func (w *watched) appliedRevisions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.applied)
}
