package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// denyReads is a complete policy set that denies read_file, with a test.
var denyReads = policy.Files{
	"p.rego": `package toolbus

default decision := {"verdict": "ALLOW", "reason": "everything else is allowed", "remember": false}

decision := {"verdict": "DENY", "reason": "reads are off today", "remember": false} if input.tool.name == "read_file"
`,
	"p_test.rego": `package toolbus_test

import data.toolbus

test_reads_denied if toolbus.decision.verdict == "DENY" with input as {"tool": {"name": "read_file"}}
`,
}

func waitVerdict(t *testing.T, e *env, want events.ErrorType) *events.Result {
	t.Helper()
	var res *events.Result
	if !testkit.Poll(10*time.Second, func() bool {
		res = e.call(t, "read_file", `{"file_path":"README.md"}`)
		return errType(res) == want
	}) {
		t.Fatalf("read_file still gives %s %q", errType(res), res.LLMContent)
	}
	return res
}

func TestPolicyPushReachesEveryExecutorAndBrokenSetsAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	second := e.startExecutor(t, bustest.Connect(t, e.bus)) // a second executor of the fleet
	nc := bustest.Connect(t, e.bus).Conn()
	reports := make(chan *nats.Msg, 20)
	sub, _ := nc.ChanSubscribe(events.SubjectPolicyPrefix+"*", reports)
	defer sub.Unsubscribe()
	nc.Flush()

	ctx := context.Background()
	pushed := policytest.Push(t, e.bus.JetStream(), denyReads, "policy-team")
	res := waitVerdict(t, e, events.ErrPolicyDenied)
	if !strings.Contains(res.LLMContent, "reads are off today") {
		t.Errorf("denied for %q", res.LLMContent)
	}
	for _, ex := range []*Executor{e.exec, second} {
		if !testkit.Poll(5*time.Second, func() bool { return ex.Policy().Revision() == pushed.Revision }) {
			t.Fatalf("an executor still enforces %s", ex.Policy().Revision())
		}
	}

	// A set that does not compile, or whose tests fail, is refused at the
	// pusher, and nothing changes.
	broken := policy.Files{"p.rego": "package toolbus\ndecision := {"}
	team := policy.PushOptions{By: "policy-team", Key: policytest.Team(t)}
	if _, _, err := policy.Push(ctx, e.bus.JetStream(), broken, team); err == nil {
		t.Fatal("a broken policy was pushed")
	}
	failing := policy.Files{"p.rego": denyReads["p.rego"], "p_test.rego": strings.Replace(denyReads["p_test.rego"], `"DENY"`, `"ALLOW"`, 1)}
	if _, _, err := policy.Push(ctx, e.bus.JetStream(), failing, team); err == nil || !strings.Contains(err.Error(), "Rego tests fail") {
		t.Fatalf("a set with failing tests: %v", err)
	}
	// One that reaches the bucket anyway, signed, is rejected by every
	// executor: the old policy stays, and the rejection is an event.
	plantSigned(t, e.bus.JetStream(), broken)
	rejected := 0
	deadline := time.After(10 * time.Second)
	for rejected < 2 {
		select {
		case m := <-reports:
			ev, err := events.Decode[events.PolicyEvent](m.Data)
			if err == nil && ev.Status == "rejected" && strings.Contains(ev.Error, "rego_parse_error") {
				rejected++
			}
		case <-deadline:
			t.Fatalf("%d rejections reported, want 2", rejected)
		}
	}
	if e.exec.Policy().Revision() != pushed.Revision {
		t.Errorf("a rejected set replaced the policy in force")
	}
	waitVerdict(t, e, events.ErrPolicyDenied)

	// A new executor starts with the pushed set.
	third := e.startExecutor(t, bustest.Connect(t, e.bus))
	if third.Policy().Revision() != pushed.Revision {
		t.Errorf("a new executor enforces %s, want the pushed %s", third.Policy().Revision(), pushed.Revision)
	}
}

func TestPolicyDirectoryIsFollowed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, src := range defaultpolicy.Default() {
		os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644)
	}
	e := newEnv(t, func(c *Config) { c.PolicyDir = dir })
	nc := bustest.Connect(t, e.bus).Conn()
	rejected := make(chan *nats.Msg, 10)
	sub, _ := nc.ChanSubscribe(events.SubjectPolicyPrefix+"rejected", rejected)
	defer sub.Unsubscribe()
	nc.Flush()
	waitVerdict(t, e, "")
	if err := e.exec.PolicyHealth(); err != nil {
		t.Errorf("PolicyHealth with the policy loaded: %v", err)
	}
	// Replace the default set with one that denies reads.
	for name := range defaultpolicy.Default() {
		os.Remove(filepath.Join(dir, name))
	}
	for name, src := range denyReads {
		os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644)
	}
	waitVerdict(t, e, events.ErrPolicyDenied)
	// A broken edit is rejected; the last good set stays in force.
	before := e.exec.Policy().Revision()
	os.WriteFile(filepath.Join(dir, "p.rego"), []byte("package toolbus\ndecision := {"), 0o644)
	select {
	case m := <-rejected:
		if ev, _ := events.Decode[events.PolicyEvent](m.Data); ev == nil || ev.Source != dir {
			t.Errorf("rejection event %s", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the broken edit was not reported")
	}
	if e.exec.Policy().Revision() != before {
		t.Error("a broken policy file replaced the policy in force")
	}
	waitVerdict(t, e, events.ErrPolicyDenied)
	// Readiness says so until the file is mended.
	if err := e.exec.PolicyHealth(); err == nil || !strings.Contains(err.Error(), "did not load") || !strings.Contains(err.Error(), before) {
		t.Errorf("PolicyHealth after a broken edit: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "p.rego"), []byte(denyReads["p.rego"]), 0o644)
	testkit.Eventually(t, "PolicyHealth is nil once the file is mended", func() bool { return e.exec.PolicyHealth() == nil })
}

// plantSigned writes files into the policy bucket as a push would, signed
// by the team, and points the fleet at them, without compiling them
// first: what a pusher that skipped the checks would leave.
func plantSigned(t *testing.T, js jetstream.JetStream, files policy.Files) {
	t.Helper()
	ctx := context.Background()
	kv, err := policy.Bucket(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := policy.Sign(files, policytest.Team(t))
	if err != nil {
		t.Fatal(err)
	}
	rev := files.Revision()
	data, _ := json.Marshal(policy.Pushed{Revision: rev, Files: files, By: "mallory", Signatures: []*policy.Signature{sig}})
	if _, err := kv.Put(ctx, "rev."+strings.TrimPrefix(rev, "sha256:"), data); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "active", []byte(`{"stable":"`+rev+`"}`)); err != nil {
		t.Fatal(err)
	}
}

// An executor enforces only what its trust list's keys signed: a push
// unsigned, or signed by another key, leaves the policy in force, and
// its readiness says why; the team's signature of the same set is taken.
func TestAnExecutorTakesOnlySignedPushes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	js := e.bus.JetStream()
	before := e.exec.Policy().Revision()
	stranger, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  nkeys.KeyPair
		want error
	}{{nil, policy.ErrUnsigned}, {stranger, policy.ErrUnknownSigner}} {
		if _, _, err := policy.Push(ctx, js, denyReads, policy.PushOptions{By: "mallory", Key: c.key}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the executor says why it refused the push", func() bool {
			err := e.exec.PolicyHealth()
			return err != nil && strings.Contains(err.Error(), c.want.Error())
		})
		if got := e.exec.Policy().Revision(); got != before {
			t.Fatalf("after a push refused for %v, %s is in force", c.want, got)
		}
	}
	waitVerdict(t, e, "")
	pushed := policytest.Push(t, js, denyReads, "policy-team")
	testkit.Eventually(t, "the team's push is in force", func() bool { return e.exec.Policy().Revision() == pushed.Revision })
	if err := e.exec.PolicyHealth(); err != nil {
		t.Errorf("readiness after the signed push: %v", err)
	}
	// The same set pushed again with a key the fleet does not trust
	// adds a signature, and takes none away: an executor started anew
	// still enforces it.
	if _, _, err := policy.Push(ctx, js, denyReads, policy.PushOptions{By: "mallory", Key: stranger}); err != nil {
		t.Fatal(err)
	}
	e.exec.Stop(ctx)
	e.exec = e.startExecutor(t, e.bus)
	if got := e.exec.Policy().Revision(); got != pushed.Revision {
		t.Errorf("restarted after another key's push of the same set, the executor enforces %s; want %s", got, pushed.Revision)
	}
}
