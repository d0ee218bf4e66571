package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// hostile is a member's raw NATS connection, as a prompt-injected agent
// (or a subverted approver or auditor) holds it: no toolbus code between
// it and the bus. It keeps what the bus refused it.
type hostile struct {
	name string
	nc   *nats.Conn

	mu      sync.Mutex
	refused []string
}

// connectHostile connects to url with the member seed file seed ("": no
// identity, which toolbus up admits as its agent).
func connectHostile(t *testing.T, name, url, seed string) *hostile {
	t.Helper()
	h := &hostile{name: name}
	opts := []nats.Option{nats.Name("hostile " + name), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.refused = append(h.refused, err.Error())
	})}
	if seed != "" {
		opt, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	h.nc = nc
	return h
}

// send publishes data on subject, naming reply as where to answer.
func (h *hostile) send(t *testing.T, subject, reply string, data []byte) {
	t.Helper()
	publish := func() error { return h.nc.PublishRequest(subject, reply, data) }
	if reply == "" {
		publish = func() error { return h.nc.Publish(subject, data) }
	}
	if err := publish(); err != nil {
		t.Fatalf("%s: publish %s: %v", h.name, subject, err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
}

// mustBeRefused publishes on subject and fails the test unless the bus
// refuses it, within 10 s.
func (h *hostile) mustBeRefused(t *testing.T, what, subject string, data []byte) {
	t.Helper()
	h.send(t, subject, "", data)
	var seen []string
	if !testkit.Poll(10*time.Second, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		seen = h.refused
		for _, r := range seen {
			if strings.Contains(r, fmt.Sprintf("%q", subject)) {
				return true
			}
		}
		return false
	}) {
		t.Errorf("%s could %s: the bus did not refuse %s (refusals: %q)", h.name, what, subject, seen)
	}
}

// attackAsConfinedMembers is what a review found an agent, an auditor
// and an approver could do to a fleet, tried on the bus at url with the
// members' seeds (the agent's "" on toolbus up: no identity). Each is
// refused by the bus, or its answer goes back to the member's own
// account, where it writes nothing; afterwards the catalogue, the
// policy, the allowlist and the audit trail are as they were, as asAdmin
// (the environment of a command run as an admin) sees them.
//
// workspace names the workspace of the check's call, in a fleet of more
// than one; auditKey, when given, is the public key the trail is
// verified with.
func attackAsConfinedMembers(t *testing.T, url, workspace, agentSeed, auditorSeed, approverSeed, auditKey string, asAdmin []string) {
	t.Helper()
	cli := func(env []string, args ...string) (string, string, int) {
		return toolbusWith(t, env, append(args, "--nats", url)...)
	}
	out, errOut, code := cli(asAdmin, "tools", "get", "read_file", "--json")
	var readFile events.Tool
	if code != 0 || json.Unmarshal([]byte(out), &readFile) != nil || len(readFile.Hosts) == 0 {
		t.Fatalf("tools get read_file: exit %d %s %s", code, out, errOut)
	}
	policyBefore, errOut, code := cli(asAdmin, "policy", "show")
	if code != 0 {
		t.Fatalf("policy show: exit %d %s", code, errOut)
	}
	// The keys a hostile reply subject would overwrite: read_file's
	// shards, an allowlist key, the checkpoint subject, the policy.
	var targets []string
	for _, host := range readFile.Hosts {
		targets = append(targets, "$KV."+events.CatalogBucket+"."+catalog.ShardKey(host, events.SourceBuiltin, "", "read_file"))
	}
	targets = append(targets, "$KV."+events.AllowlistBucket+".planted", events.SubjectAuditCheckpoint, "$KV."+events.PolicyBucket+".active")

	agent := connectHostile(t, "agent", url, agentSeed)
	// Class 1: an executor's answer to a reply subject the agent names
	// (here an output read) goes back into the agent's account.
	read, _ := events.Encode(&events.OutputRequest{Header: events.Header{Sender: events.Identity{ID: "agent", Role: "agent"}}, Name: "no-such-output"})
	for _, to := range append(targets, "$JS.API.STREAM.UPDATE.KV_"+events.PolicyBucket) {
		agent.send(t, events.OutputSubject("agent"), to, read)
	}
	// Class 2: JetStream's answer to any reply subject: the agent's own
	// account has no JetStream, and the services account's API is not
	// its to send to.
	for _, to := range targets {
		agent.send(t, "$JS.API.INFO", to, nil)
	}
	agent.mustBeRefused(t, "send to the services account's JetStream API", events.ServicesAPIPrefix+".INFO", nil)
	agent.mustBeRefused(t, "update the policy bucket's stream", events.ServicesAPIPrefix+".STREAM.UPDATE.KV_"+events.PolicyBucket, []byte(`{}`))
	agent.mustBeRefused(t, "make a consumer of the stored outputs", events.ServicesAPIPrefix+".CONSUMER.CREATE.OBJ_"+events.OutputBucket, []byte(`{}`))
	agent.mustBeRefused(t, "push a policy", "$KV."+events.PolicyBucket+".active", []byte(`{}`))
	// Class 3: no bytes of its own into the audit stream.
	agent.mustBeRefused(t, "publish into the audit stream", events.CallerResultSubject("agent"), make([]byte, 512<<10))
	// Class 8: an agent answers no confirmation, its own included.
	agent.mustBeRefused(t, "answer its own call's confirmation", events.AnswerSubject(events.AnswerSubjectPrefix+"x", events.AnswerAsCaller, "agent"), []byte(`{}`))

	if auditorSeed != "" {
		auditor := connectHostile(t, "auditor", url, auditorSeed)
		for _, to := range targets {
			auditor.send(t, "$JS.API.INFO", to, nil)
			auditor.send(t, events.ServicesAPIPrefix+".STREAM.INFO."+events.AuditStream, to, nil)
		}
		auditor.mustBeRefused(t, "write the catalogue", "$KV."+events.CatalogBucket+".x", []byte(`{}`))
	}
	if approverSeed != "" {
		approver := connectHostile(t, "approver", url, approverSeed)
		for _, to := range targets {
			approver.send(t, events.ServicesAPIPrefix+".STREAM.INFO.KV_"+events.CatalogBucket, to, nil)
		}
		approver.mustBeRefused(t, "write the allowlist", "$KV."+events.AllowlistBucket+".planted", []byte(`{}`))
	}

	// Nothing changed: the tools are callable, the policy is the one
	// pushed, nothing was planted, and the trail verifies.
	if out, errOut, code := cli(asAdmin, "tools", "list"); code != 0 || !strings.Contains(out, "read_file") || !strings.Contains(out, "glob") {
		t.Errorf("the catalogue after the attacks: exit %d %s %s", code, out, errOut)
	}
	globArgs := []string{"call", "glob", "--args", `{"pattern":"*"}`}
	if workspace != "" {
		globArgs = append(globArgs, "--workspace", workspace)
	}
	if out, errOut, code := cli(asAdmin, globArgs...); code != 0 {
		t.Errorf("glob after the attacks: exit %d %s %s", code, out, errOut)
	}
	if after, errOut, code := cli(asAdmin, "policy", "show"); code != 0 || after != policyBefore {
		t.Errorf("the policy after the attacks: exit %d %q (before %q) %s", code, after, policyBefore, errOut)
	}
	if out, errOut, code := cli(asAdmin, "allowlist", "list", "--json"); code != 0 || strings.Contains(out, "planted") {
		t.Errorf("the allowlist after the attacks: exit %d %s %s", code, out, errOut)
	}
	if auditKey == "" {
		return
	}
	verifier := asAdmin
	if auditorSeed != "" {
		verifier = []string{"TOOLBUS_IDENTITY=" + auditorSeed} // the auditor's reads suffice
	}
	if out, errOut, code := cli(verifier, "audit", "verify", "--key", auditKey); code != 0 {
		t.Errorf("audit verify after the attacks: exit %d %s %s", code, out, errOut)
	}
}
