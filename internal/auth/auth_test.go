package auth_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolbus/toolbus/internal/proctree"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/audit/checkpoint"
	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/policytest"
	"github.com/toolbus/toolbus/pkg/toolbus"
)

// fleet is a bus that enforces a fleet's identities, with a registry, an
// executor and an approver each connected as its own member, and a way
// to connect as any member.
type fleet struct {
	dir       string
	bus       *busnode.Node
	workspace string
	executor  *executor.Executor
	approver  *approve.Approver
	// violations holds every permissions violation a member's connection
	// was told of, by member.
	mu         sync.Mutex
	violations map[string][]string
}

// members: the default one of each role, and an attacker of each role
// that could attack.
var members = append(auth.DefaultMembers(),
	auth.Member{Name: "mallory", Role: auth.RoleAgent},
	auth.Member{Name: "eve", Role: auth.RoleApprover},
	auth.Member{Name: "trent", Role: auth.RoleAuditor},
	auth.Member{Name: "executor2", Role: auth.RoleExecutor},
	auth.Member{Name: "facade2", Role: auth.RoleFacade},
)

func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{dir: t.TempDir(), violations: map[string][]string{}}
	if _, err := auth.Init(f.dir, members); err != nil {
		t.Fatal(err)
	}
	b, err := busnode.Start(context.Background(), busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Name: "bus",
		AuthConfig: filepath.Join(f.dir, auth.ServerConfigFile), NkeyFile: identity.SeedFile(f.dir, "bus"), Logger: f.logger("bus")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bustest.Stop(t, b) })
	f.bus = b

	reg := f.as(t, "registry")
	svc, err := registry.Start(context.Background(), reg.Conn(), reg.JetStream(), registry.Config{
		Identity: events.Identity{ID: reg.Principal(), Role: "registry"}, Logger: f.logger("registry")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })

	f.workspace = t.TempDir()
	if err := os.WriteFile(filepath.Join(f.workspace, "README.md"), []byte("# hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := builtin.NewWorkspace(f.workspace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	starter := proctree.Unconfined() // the tools' own behaviour: the node's tests hold the confinement
	t.Cleanup(starter.Close)
	shells := builtin.NewShells(ws, starter)
	pol := policytest.Default(t)
	ex := f.as(t, "executor")
	f.executor, err = executor.Start(context.Background(), ex.Conn(), ex.JetStream(), executor.Config{
		Identity: events.Identity{ID: ex.Principal(), Role: "executor"}, IdentitiesEnforced: true,
		Tools: builtin.Tools(ws, shells), Policy: pol, Workspace: ws.Root(), Logger: f.logger("executor")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.executor.Stop(ctx)
		shells.Close()
	})

	ap := f.as(t, "approver")
	f.approver, err = approve.Start(context.Background(), ap.Conn(), ap.JetStream(), approve.Config{
		Identity: events.Identity{Role: "approver"}, Principal: ap.Principal(), Logger: f.logger("approver")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.approver.Stop)
	return f
}

// approveAll has the fleet's approver answer every request "proceed once"
// until ctx ends; the test waits for it to stop.
func (f *fleet) approveAll(t *testing.T, ctx context.Context) {
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			s, changed := f.approver.Snapshot()
			for _, r := range s.Pending {
				f.approver.Answer(ctx, r.AnswerTo, approve.Answer{Outcome: events.ProceedOnce})
			}
			select {
			case <-changed:
			case <-ctx.Done():
			}
		}
	}()
}

// as connects as member name, closed when the test ends.
func (f *fleet) as(t *testing.T, name string) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URL: f.bus.URL(), Name: name, NkeyFile: identity.SeedFile(f.dir, name), Logger: f.logger(name)})
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(func() { bustest.Stop(t, c) })
	return c
}

// logger records the permissions violations member's connection hears of.
func (f *fleet) logger(member string) *slog.Logger {
	return slog.New(&violationLog{f: f, member: member})
}

type violationLog struct {
	f      *fleet
	member string
}

func (h *violationLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *violationLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *violationLog) WithGroup(string) slog.Handler            { return h }
func (h *violationLog) Handle(_ context.Context, r slog.Record) error {
	text := r.Message
	r.Attrs(func(a slog.Attr) bool {
		text += " " + a.Key + "=" + a.Value.String()
		return true
	})
	if strings.Contains(strings.ToLower(text), "permissions violation") {
		h.f.mu.Lock()
		h.f.violations[h.member] = append(h.f.violations[h.member], text)
		h.f.mu.Unlock()
	}
	return nil
}

// violated waits for member's connection to be told it may not use
// subject, and fails the test if it is not within 5 s.
func (f *fleet) violated(t *testing.T, member, what, subject string) {
	t.Helper()
	var seen []string
	if !testkit.Poll(5*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		seen = f.violations[member]
		for _, v := range seen {
			if strings.Contains(v, fmt.Sprintf("%q", subject)) {
				return true
			}
		}
		return false
	}) {
		t.Errorf("%s could %s: the bus did not refuse %s (violations seen: %q)", member, what, subject, seen)
	}
}

// clean fails the test if any of the members was refused anything.
func (f *fleet) clean(t *testing.T, names ...string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range names {
		if v := f.violations[n]; len(v) > 0 {
			t.Errorf("%s was refused what its role needs: %q", n, v)
		}
	}
}

// Every role does its work with nothing but its own permissions: the
// registry keeps the catalogue, the executor runs calls and asks, the
// approver answers, the agent invokes, reads the catalogue and cancels
// its own call, the auditor reads the trail. Nobody is refused anything,
// and the policy sees the agent as proven.
func TestEveryRoleDoesItsWorkWithItsOwnPermissions(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	agent := f.as(t, "agent")
	// In a session: the executors count its calls.
	client := invoke.NewClient(agent.Conn(), events.Identity{ID: "whoever", Role: "agent", Session: "s1"}, agent.Principal())
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := client.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	read := &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
	res, err := client.Invoke(ctx, read, nil)
	if err != nil || res.Error != nil {
		t.Fatalf("read_file: %+v %v", res, err)
	}
	// The executor sees the audit stream's fill, which its refusals near
	// the cap and its record budgets follow.
	testkit.EventuallyWithin(t, 10*time.Second, "the executor sees the audit trail's fill", func() bool { return f.executor.TrailFill() > 0 })

	// An edit asks; the approver, a member of its own, answers.
	write := &events.Invocation{Tool: "write_file", Args: json.RawMessage(`{"file_path":"new.txt","content":"x"}`)}
	done := make(chan *events.Result, 1)
	go func() {
		r, err := client.Invoke(ctx, write, nil)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	answered := false
	for !answered {
		s, changed := f.approver.Snapshot()
		for _, r := range s.Pending {
			ack, err := f.approver.Answer(ctx, r.AnswerTo, approve.Answer{Outcome: events.ProceedOnce})
			if err != nil || !ack.Accepted {
				t.Fatalf("answer: %+v %v", ack, err)
			}
			answered = true
		}
		if !answered {
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatal("no confirmation request reached the approver")
			}
		}
	}
	if r := <-done; r == nil || r.Error != nil {
		t.Fatalf("write_file: %+v", r)
	}

	// The agent cancels its own call.
	long := &events.Invocation{Header: events.Header{ID: "agent-long"}, Tool: "run_shell_command", Args: json.RawMessage(`{"command":"sleep 30"}`)}
	go func() {
		time.Sleep(500 * time.Millisecond)
		client.Cancel(ctx, long.ID, "changed my mind")
	}()
	// The shell asks: answered, the call runs and is cancelled while it
	// runs, not while it waits.
	f.approveAll(t, ctx)
	if r, err := client.Invoke(ctx, long, nil); err != nil || r.Error == nil || r.Error.Type != events.ErrCancelled {
		t.Fatalf("the agent's cancel of its own call: %+v %v", r, err)
	}

	// The auditor reads the trail: each call proven as the agent.
	auditor := f.as(t, "auditor")
	var recs []*audit.Record
	for {
		recs, _, err = audit.Read(ctx, auditor.JetStream(), audit.Query{})
		if err == nil && len(recs) == 3 && !slices.ContainsFunc(recs, func(r *audit.Record) bool { return r.Outcome == audit.OutcomePending }) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the auditor read %d records, want 3 ended: %v", len(recs), err)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline, not synchronising
	}
	for _, r := range recs {
		if r.Caller.ID != "agent" {
			t.Errorf("%s: caller %q, want the agent's identity", r.Tool, r.Caller.ID)
		}
	}
	d := lastDecision(t, auditor.JetStream(), read.ID)
	var in struct {
		Caller events.Identity `json:"caller"`
	}
	if err := json.Unmarshal(d.Input, &in); err != nil || !in.Caller.Proven || in.Caller.ID != "agent" {
		t.Errorf("the policy saw the caller as %+v (%v), want proven as agent", in.Caller, err)
	}
	f.clean(t, "bus", "registry", "executor", "approver", "agent", "auditor")
}

// lastDecision is the decision recorded for invocation id, read by
// direct get (an auditor may make no consumer).
func lastDecision(t *testing.T, js jetstream.JetStream, id string) *events.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var found *events.Decision
	for found == nil {
		_, err := bus.Read(ctx, js, events.AuditStream, bus.Range{Subjects: []string{events.SubjectDecision, events.SubjectResult}}, func(m *bus.StoredMsg) error {
			// On its own, or folded into the record of the result.
			var d *events.Decision
			if m.Subject == events.SubjectResult {
				r, err := events.Decode[events.Result](m.Data)
				if err != nil {
					return err
				}
				d = r.Decision
			} else {
				var err error
				if d, err = events.Decode[events.Decision](m.Data); err != nil {
					return err
				}
			}
			if d != nil && d.InvocationID == id {
				found = d
				return bus.ErrStop
			}
			return nil
		})
		if err != nil {
			t.Fatalf("no decision for %s: %v", id, err)
		}
		if found == nil {
			if ctx.Err() != nil {
				t.Fatalf("no decision for %s", id)
			}
			time.Sleep(50 * time.Millisecond) // the record is stored a moment after the call ends
		}
	}
	return found
}

// What an injected agent with a member's credentials tries: each attempt
// is refused by the bus itself, and the one that reaches the executor
// (naming another caller on its own subject) is refused there.
func TestAnAgentCannotStepOutOfItsRole(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	m := f.as(t, "mallory")
	nc := m.Conn()
	publish := func(subject string, data []byte) {
		t.Helper()
		if err := nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	subscribe := func(subject string) {
		t.Helper()
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	body := []byte(`{}`)

	subscribe(events.SubjectConfirmAll)
	f.violated(t, "mallory", "hear confirmation requests", events.SubjectConfirmAll)
	publish(events.AnswerSubject(events.AnswerSubjectPrefix+"x", events.AnswerAsApprover, "mallory"), body)
	f.violated(t, "mallory", "answer as an approver", events.AnswerSubjectPrefix+"x.approver.mallory")
	publish(events.AnswerSubject(events.AnswerSubjectPrefix+"x", events.AnswerAsCaller, "agent"), body)
	f.violated(t, "mallory", "answer as another caller", events.AnswerSubjectPrefix+"x.caller.agent")
	publish("$KV."+events.AllowlistBucket+".sneaky", body)
	f.violated(t, "mallory", "write the allowlist", "$KV."+events.AllowlistBucket+".sneaky")
	publish(events.Request(events.SubjectRegister), body)
	f.violated(t, "mallory", "register a tool", events.Request(events.SubjectRegister))
	// The records' large fields are the parts' to write too: one an
	// agent stored under another call's digest would be read back as
	// that call's (and found altered by its digest).
	publish(events.BlobSubjectPrefix+strings.Repeat("0", 64), body)
	f.violated(t, "mallory", "write a record's large field", events.BlobSubjectPrefix+strings.Repeat("0", 64))
	// Records are the parts' to write: an agent's own would put in the
	// trail what no part took.
	publish(events.SubjectRegister, body)
	f.violated(t, "mallory", "forge the record of a registration", events.SubjectRegister)
	publish(events.SubjectInvoke+".mallory", body)
	f.violated(t, "mallory", "forge the record of its own invocation", events.SubjectInvoke+".mallory")
	publish(events.SubjectCancel+".mallory", body)
	f.violated(t, "mallory", "forge the record of its own cancel", events.SubjectCancel+".mallory")
	publish(events.SubjectDecision, body)
	f.violated(t, "mallory", "forge a decision", events.SubjectDecision)
	publish("$KV."+events.PolicyBucket+".active", body)
	f.violated(t, "mallory", "push a policy", "$KV."+events.PolicyBucket+".active")
	// Only executors count calls, and hear what the others counted
	// (TestOnlyExecutorsTellCounts).
	publish(events.CountSubject, body)
	f.violated(t, "mallory", "tell a count", events.CountSubject)
	subscribe(events.CountSubject)
	f.violated(t, "mallory", "hear who calls what", events.CountSubject)
	publish(events.SubjectResult, body)
	f.violated(t, "mallory", "publish a result", events.SubjectResult)
	publish(events.CallerResultSubject("agent"), body)
	f.violated(t, "mallory", "record a result as another caller", events.CallerResultSubject("agent"))
	// Nor its own: an executor records a caller's record for it
	// (TestACallersRecordGoesThroughAnExecutor).
	publish(events.CallerResultSubject("mallory"), body)
	f.violated(t, "mallory", "put bytes of its own into the audit stream", events.CallerResultSubject("mallory"))
	publish(events.InvokeSubject("agent"), body)
	f.violated(t, "mallory", "invoke as another caller", events.InvokeSubject("agent"))
	publish(events.InvokeSubject(""), body)
	f.violated(t, "mallory", "invoke as nobody in particular", events.InvokeSubject(""))
	publish(events.Request(events.SubjectCancel), body)
	f.violated(t, "mallory", "cancel any call", events.Request(events.SubjectCancel))
	publish(events.ExecSubjectPrefix+"x", body)
	f.violated(t, "mallory", "send a call straight to an executor, with a principal of its choosing", events.ExecSubjectPrefix+"x")
	publish("$JS.API.STREAM.INFO."+events.AuditStream, nil)
	f.violated(t, "mallory", "look at the audit stream", "$JS.API.STREAM.INFO."+events.AuditStream)
	publish("$JS.API.CONSUMER.CREATE."+events.AuditStream, body)
	f.violated(t, "mallory", "read the audit stream", "$JS.API.CONSUMER.CREATE."+events.AuditStream)
	publish("$JS.API.STREAM.DELETE."+"KV_"+events.CatalogBucket, nil)
	f.violated(t, "mallory", "delete the catalogue", "$JS.API.STREAM.DELETE.KV_"+events.CatalogBucket)
	subscribe(events.SubjectProgressPrefix + ">")
	f.violated(t, "mallory", "hear every call's output", events.SubjectProgressPrefix+">")
	// Every inbox subject mallory may hear is of its own account: another
	// agent's results, in another account, never reach it.
	inboxes, err := nc.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	agent := f.as(t, "agent")
	agentClient := invoke.NewClient(agent.Conn(), events.Identity{Role: "agent"}, agent.Principal())
	defer agentClient.Close()
	callCtx, callCancel := context.WithTimeout(context.Background(), 30*time.Second)
	if r, err := agentClient.Invoke(callCtx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil); err != nil || r.Error != nil {
		t.Fatalf("the agent's call: %+v %v", r, err)
	}
	callCancel()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := inboxes.Pending(); n != 0 {
		t.Errorf("mallory heard %d messages of the agent's call on _INBOX.>", n)
	}
	inboxes.Unsubscribe()

	// On its own subject, naming another caller: refused by the executor,
	// and the refusal is on record.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inv := &events.Invocation{Header: events.Header{ID: "impersonation", Sender: events.Identity{ID: "agent", Role: "agent", Proven: true}},
		Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
	data, err := events.Encode(inv)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := nc.RequestWithContext(ctx, events.InvokeSubject("mallory"), data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := events.Decode[events.Result](reply.Data)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Type != events.ErrInvalidParams || !strings.Contains(res.Error.Message, `"mallory"`) {
		t.Fatalf("an invocation naming another caller: %+v", res)
	}
	auditor := f.as(t, "auditor").JetStream()
	for {
		// The trail stores what the executor sent a moment after the
		// caller has it.
		recs, _, err := audit.Read(ctx, auditor, audit.Query{ID: "impersonation"})
		if err == nil && len(recs) == 1 && recs[0].Outcome == string(events.ErrInvalidParams) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the refused impersonation on record: %+v %v", recs, err)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline, not synchronising
	}

	// Its own calls work: it is an agent, not a prisoner.
	client := invoke.NewClient(nc, events.Identity{Role: "agent"}, m.Principal())
	defer client.Close()
	if r, err := client.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil); err != nil || r.Error != nil {
		t.Fatalf("mallory's own call: %+v %v", r, err)
	}
}

// An agent cannot cancel another agent's call, even knowing its id: its
// cancel names itself, and the executor lets it reach only its own calls.
func TestAnAgentCannotCancelAnothersCall(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	agent := f.as(t, "agent")
	client := invoke.NewClient(agent.Conn(), events.Identity{Role: "agent"}, agent.Principal())
	defer client.Close()
	mallory := invoke.NewClient(f.as(t, "mallory").Conn(), events.Identity{Role: "agent"}, "mallory")
	defer mallory.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.approveAll(t, ctx)
	marker := filepath.Join(f.workspace, "finished")
	inv := &events.Invocation{Header: events.Header{ID: "victim"}, Tool: "run_shell_command", Args: json.RawMessage(`{"command":"sleep 2; touch finished"}`)}
	go func() {
		time.Sleep(700 * time.Millisecond)
		// Before the call is there, and while it runs.
		mallory.Cancel(ctx, "victim", "mine now")
		data, _ := events.Encode(&events.CancelRequest{Header: events.Header{Sender: events.Identity{ID: "mallory"}}, InvocationID: "victim", GaveUp: true})
		agent.Conn().Publish(events.CancelSubject("mallory"), data) // refused by the bus: not its subject
	}()
	res, err := client.Invoke(ctx, inv, nil)
	if err != nil || res.Error != nil {
		t.Fatalf("the agent's call, which mallory tried to cancel: %+v %v", res, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the call did not run to its end: %v", err)
	}
	f.violated(t, "agent", "cancel as mallory", events.CancelSubject("mallory"))
}

// An approver answers as itself: naming another approver is refused by
// the executor, and the approver's answers as the caller's user, or its
// own invocations, by the bus.
func TestAnApproverCannotPoseAsAnotherOrInvoke(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	eve := f.as(t, "eve")
	nc := eve.Conn()
	body, _ := events.Encode(&events.Invocation{Header: events.Header{Sender: events.Identity{ID: "eve"}}, Tool: "read_file", Args: json.RawMessage(`{}`)})
	nc.Publish(events.InvokeSubject("eve"), body)
	f.violated(t, "eve", "invoke", events.InvokeSubject("eve"))
	// It reads the confirmation story, from a stream that holds nothing
	// else, and nothing of the audit stream: no consumer, no message.
	for what, subject := range map[string]string{
		"read the results":                     "$JS.API.CONSUMER.CREATE." + events.AuditStream + ".x." + events.SubjectResult,
		"read the confirmations by a consumer": auth.LocalSubject("$JS.API.CONSUMER.CREATE." + events.AuditStream + ".x." + events.SubjectConfirmAll),
		"read any message":                     "$JS.API.STREAM.MSG.GET." + events.AuditStream,
		"read any message by direct get":       auth.LocalSubject("$JS.API.DIRECT.GET." + events.AuditStream),
	} {
		nc.PublishRequest(subject, nc.NewInbox(), []byte(`{"seq":1}`))
		f.violated(t, "eve", what, subject)
	}

	agent := f.as(t, "agent")
	client := invoke.NewClient(agent.Conn(), events.Identity{Role: "agent"}, agent.Principal())
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan *events.Result, 1)
	go func() {
		r, _ := client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "edit"}, Tool: "write_file", Args: json.RawMessage(`{"file_path":"e.txt","content":"x"}`)}, nil)
		done <- r
	}()
	var req *approve.Request
	for req == nil {
		s, changed := f.approver.Snapshot()
		if rs := s.OfInvocation("edit"); len(rs) == 1 && rs[0].Pending() {
			req = &rs[0]
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no request")
		}
	}
	answer := func(subject string, who events.Identity) *events.ConfirmAck {
		t.Helper()
		data, _ := events.Encode(&events.ConfirmAnswer{Header: events.Header{Sender: who}, InvocationID: "edit", Outcome: events.ProceedOnce})
		m, err := nc.RequestWithContext(ctx, subject, data)
		if err != nil {
			t.Fatalf("answer on %s: %v", subject, err)
		}
		ack, err := events.Decode[events.ConfirmAck](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	mine := events.AnswerSubject(req.AnswerTo, events.AnswerAsApprover, "eve")
	if ack := answer(mine, events.Identity{ID: "approver", Role: "approver"}); ack.Accepted || !strings.Contains(ack.Reason, `"eve"`) {
		t.Errorf("eve answering as the approver: %+v", ack)
	}
	if ack := answer(mine, events.AgentUser(events.Identity{ID: "agent"})); ack.Accepted {
		t.Errorf("eve answering as the agent's user: %+v", ack)
	}
	nc.Publish(events.AnswerSubject(req.AnswerTo, events.AnswerAsCaller, "agent"), []byte(`{}`))
	f.violated(t, "eve", "answer as the caller", events.AnswerSubject(req.AnswerTo, events.AnswerAsCaller, "agent"))
	// As itself, it decides.
	if ack := answer(mine, events.Identity{ID: "eve", Role: "approver"}); !ack.Accepted {
		t.Errorf("eve answering as eve: %+v", ack)
	}
	if r := <-done; r == nil || r.Error != nil {
		t.Fatalf("the call: %+v", r)
	}
}

// An auditor reads the trail and does nothing else.
func TestAnAuditorOnlyReads(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	trent := f.as(t, "trent")
	nc := trent.Conn()
	nc.Publish(events.InvokeSubject("trent"), []byte(`{}`))
	f.violated(t, "trent", "invoke", events.InvokeSubject("trent"))
	nc.Publish(events.SubjectCatalogChanged, []byte(`{}`))
	f.violated(t, "trent", "publish an event", events.SubjectCatalogChanged)
	nc.Publish("$JS.API.STREAM.PURGE."+events.AuditStream, nil)
	f.violated(t, "trent", "purge the audit stream", "$JS.API.STREAM.PURGE."+events.AuditStream)
	nc.Publish(events.BlobSubjectPrefix+strings.Repeat("0", 64), []byte(`{}`))
	f.violated(t, "trent", "write a record's large field", events.BlobSubjectPrefix+strings.Repeat("0", 64))
	if _, _, err := audit.Read(context.Background(), trent.JetStream(), audit.Query{}); err != nil {
		t.Fatalf("the auditor's read: %v", err)
	}

	// An agent's call with 64 KiB of arguments: the executor records
	// them by digest beside the trail, and the auditor reads them back
	// whole.
	agent := f.as(t, "agent")
	caller := invoke.NewClient(agent.Conn(), events.Identity{Role: "agent"}, agent.Principal())
	defer caller.Close()
	pattern := strings.Repeat("p", 64<<10)
	args, _ := json.Marshal(map[string]string{"pattern": pattern})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := caller.Invoke(ctx, &events.Invocation{Tool: "glob", Args: args}, nil)
	if err != nil || res.Error != nil && res.Error.Type != events.ErrInvalidParams { // glob refuses so long a pattern, once judged
		t.Fatalf("a call with large arguments: %+v %v", res.Error, err)
	}
	rec, err := audit.Show(context.Background(), trent.JetStream(), res.InvocationID, time.Time{})
	if err != nil {
		t.Fatalf("the auditor's show of a large call: %v", err)
	}
	if !strings.Contains(string(rec.Args), pattern) || rec.Incomplete != nil {
		t.Fatalf("the auditor reads %d bytes of the call's arguments (incomplete: %v)", len(rec.Args), rec.Incomplete)
	}

	// The bus keeps the checkpoint chain's ends in a bucket of its own;
	// the auditor verifies against them, and may not write them.
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	cpr := checkpoint.Start(f.bus.Conn(), f.bus.JetStream(), key, events.Identity{ID: "bus", Role: "bus"}, time.Hour, bustest.Quiet())
	defer cpr.Stop()
	data, _ := events.Encode(&events.Step{Header: events.Header{Sender: events.Identity{ID: "bus"}}, InvocationID: "inv", Tool: "read_file", Step: "validated"})
	f.bus.Conn().Publish(events.SubjectStep, data)
	f.bus.Conn().Flush()
	var cp *events.AuditCheckpoint
	testkit.Eventually(t, "a checkpoint", func() bool {
		cp, _ = cpr.Checkpoint(context.Background())
		return cp != nil
	})
	rep, err := checkpoint.Verify(context.Background(), trent.JetStream(), time.Time{}, key.Public().(ed25519.PublicKey))
	if err != nil || rep.Head == nil || rep.Head.Digest != cp.Digest || rep.ChainUnknown != "" {
		t.Fatalf("the auditor's verify: %+v %v", rep, err)
	}
	head := "$KV." + events.AuditChainBucket + "." + checkpoint.HeadKey(checkpoint.KeyID(key.Public().(ed25519.PublicKey)))
	nc.Publish(head, []byte(`{}`))
	f.violated(t, "trent", "write the chain's head", head)
	f.clean(t, "bus")
}

// The Go client connects as a member: its calls are the member's, proven,
// and a workspace it names is the one its call acts on.
func TestTheGoClientCallsAsAMember(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := toolbus.Connect(ctx, f.bus.URL(), toolbus.WithIdentityFile(identity.SeedFile(f.dir, "agent")),
		toolbus.WithIdentity(toolbus.Identity{ID: "someone-else", Agent: "bot"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Invoke(ctx, "read_file", map[string]string{"file_path": "README.md"}, toolbus.WithInvocationID("go-client"))
	if err != nil || !strings.Contains(res.LLMContent, "# hello") {
		t.Fatalf("read_file: %+v %v", res, err)
	}
	d := lastDecision(t, f.as(t, "auditor").JetStream(), "go-client")
	var in struct {
		Caller events.Identity `json:"caller"`
	}
	if err := json.Unmarshal(d.Input, &in); err != nil || !in.Caller.Proven || in.Caller.ID != "agent" || in.Caller.Agent != "bot" {
		t.Errorf("the policy saw the Go client's caller as %+v (%v), want proven as agent, agent bot", in.Caller, err)
	}
	if _, err := c.Invoke(ctx, "read_file", map[string]string{"file_path": "README.md"}, toolbus.WithWorkspace("elsewhere")); !errors.Is(err, toolbus.ErrInvalidParams) ||
		!strings.Contains(err.Error(), `workspace "elsewhere"`) {
		t.Errorf("a call for a workspace no executor has: %v", err)
	}
	f.clean(t, "agent")
}

// A call another executor forwards carries the principal that executor
// read from the caller's subject; only executors may publish on an
// executor's own subject, so the one that runs it takes it as proven.
func TestAForwardedCallKeepsItsProvenCaller(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ex := f.as(t, "executor")
	inv := &events.Invocation{Header: events.Header{ID: "forwarded", Sender: events.Identity{ID: "agent", Role: "agent"}},
		Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
	data, err := events.Encode(inv)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: events.ExecSubject("executor"), Data: data, Header: nats.Header{}}
	m.Header.Set(events.PrincipalHeader, "agent")
	reply, err := ex.Conn().RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := events.Decode[events.Result](reply.Data); err != nil || res.Error != nil {
		t.Fatalf("the forwarded call: %+v %v", res, err)
	}
	d := lastDecision(t, f.as(t, "auditor").JetStream(), "forwarded")
	var in struct {
		Caller events.Identity `json:"caller"`
	}
	if err := json.Unmarshal(d.Input, &in); err != nil || !in.Caller.Proven || in.Caller.ID != "agent" {
		t.Errorf("the policy saw the forwarded call's caller as %+v (%v)", in.Caller, err)
	}
	f.clean(t, "executor")
}

// A caller's record of a call it gave up on goes through an executor,
// which records what a caller's record may be and nothing else: mallory
// cannot record a success, a record as another caller, a large one, or a
// second record of a call; its own record of a lost call is kept, on its
// principal's subject.
func TestACallersRecordGoesThroughAnExecutor(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	nc := f.as(t, "mallory").Conn()
	send := func(res *events.Result) string {
		t.Helper()
		data, err := events.Encode(res)
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.Request(events.CallerRecordSubject("mallory"), data, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return string(m.Data)
	}
	lost := func(sender, id, text string) *events.Result {
		return &events.Result{Header: events.Header{ID: "r-" + id, Time: time.Now().UTC(), Sender: events.Identity{ID: sender, Role: "agent"}},
			InvocationID: id, Tool: "read_file", LLMContent: text, Error: &events.ToolError{Type: events.ErrExecutorLost, Message: text}}
	}
	ok := lost("mallory", "gone-1", "lost")
	for _, tc := range []struct {
		what string
		res  *events.Result
	}{
		{"a success", &events.Result{Header: ok.Header, InvocationID: "ok-1", Tool: "read_file", LLMContent: "secret: none"}},
		{"a record as another caller", lost("agent", "gone-2", "lost")},
		{"a record too large", lost("mallory", "gone-3", strings.Repeat("x", 20<<10))},
	} {
		if got := send(tc.res); !strings.HasPrefix(got, "refused") {
			t.Errorf("%s: the executor answered %q", tc.what, got)
		}
	}
	if got := send(ok); got != events.CallerRecordKept {
		t.Fatalf("mallory's record of a lost call: %q", got)
	}
	if got := send(ok); got != events.CallerRecordKept {
		t.Errorf("the same record again: %q", got)
	}
	other := lost("mallory", "gone-1", "lost, and something else")
	if got := send(other); !strings.HasPrefix(got, "refused") {
		t.Errorf("a second, different record of a call: %q", got)
	}
	stream, err := f.as(t, "auditor").JetStream().Stream(context.Background(), events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(context.Background(), events.CallerResultSubject("mallory"))
	if err != nil {
		t.Fatalf("mallory's record is not in the audit stream: %v", err)
	}
	if got, err := events.Decode[events.Result](m.Data); err != nil || got.InvocationID != "gone-1" || got.LLMContent != "lost" {
		t.Errorf("the record kept: %+v %v", got, err)
	}
	if info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(events.CallerResultSubject("mallory"))); err != nil || info.State.Subjects[events.CallerResultSubject("mallory")] != 1 {
		t.Errorf("mallory's records kept: %+v %v, want one", info, err)
	}
	f.clean(t, "mallory", "executor")
}

// An executor that takes a call for another's workspace forwards it;
// the one that runs it answers the agent, in its own account, at the
// reply subject the bus gave the agent's request (a client may not send
// a message naming that subject as its reply). Calls that ask go
// through an approver and come back the same way.
func TestForwardedCallsAnswerAnAgentInItsAccount(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := builtin.NewWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	starter := proctree.Unconfined() // the tools' own behaviour: the node's tests hold the confinement
	t.Cleanup(starter.Close)
	shells := builtin.NewShells(ws, starter)
	pol := policytest.Default(t)
	ex := f.as(t, "executor2")
	two, err := executor.Start(context.Background(), ex.Conn(), ex.JetStream(), executor.Config{
		Identity: events.Identity{ID: ex.Principal(), Role: "executor"}, IdentitiesEnforced: true, WorkspaceName: "two",
		Tools: builtin.Tools(ws, shells), Policy: pol, Workspace: ws.Root(), Logger: f.logger("executor2")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		two.Stop(ctx)
		shells.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := toolbus.Connect(ctx, f.bus.URL(), toolbus.WithIdentityFile(identity.SeedFile(f.dir, "agent")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !testkit.Poll(20*time.Second, func() bool {
		_, err := c.Invoke(ctx, "read_file", map[string]string{"file_path": "README.md"}, toolbus.WithWorkspace("two"))
		return err == nil
	}) {
		t.Fatal("executor2's workspace never became callable")
	}
	// Twenty calls to each workspace: the queue group hands about half
	// of them to the executor of the other one.
	for i := range 20 {
		for ws, want := range map[string]string{"two": "# two", f.workspace: "# hello"} {
			res, err := c.Invoke(ctx, "read_file", map[string]string{"file_path": "README.md"}, toolbus.WithWorkspace(ws))
			if err != nil || !strings.Contains(res.LLMContent, want) {
				t.Fatalf("call %d for %s: %+v %v", i, ws, res, err)
			}
		}
	}
	approving, stop := context.WithCancel(ctx)
	f.approveAll(t, approving)
	for i := range 4 {
		name := fmt.Sprintf("asked-%d.txt", i)
		if _, err := c.Invoke(ctx, "write_file", map[string]string{"file_path": name, "content": "x"}, toolbus.WithWorkspace("two")); err != nil {
			t.Fatalf("an approved write in the other workspace: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("the approved write did not land in workspace two: %v", err)
		}
	}
	stop()
	f.clean(t, "agent", "executor", "executor2")
}

// A call's whole stored output is its caller's: the agent reads its own
// through an executor, all 5 MB of it, window by window; mallory, knowing
// its id and its reference, gets nothing, and the bus refuses mallory any
// look into the object store itself (listing it, reading its chunks with
// a wildcard consumer, getting an object's description). An admin reads
// every output.
func TestAnAgentReadsOnlyItsOwnOutputs(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.approveAll(t, ctx)
	agent := f.as(t, "agent")
	client := invoke.NewClient(agent.Conn(), events.Identity{Role: "agent"}, agent.Principal())
	defer client.Close()
	const size = 5_000_000
	res, err := client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "big"}, Tool: "run_shell_command",
		Args: json.RawMessage(fmt.Sprintf(`{"command":"head -c %d /dev/zero | tr '\\0' a"}`, size))}, nil)
	if err != nil || res.Error != nil || !res.Truncated || res.OutputRef == "" {
		t.Fatalf("a call with a large output: %+v %v", res, err)
	}
	readAll := func(c *invoke.Client, name string) (string, error) {
		r, err := c.ReadOutput(ctx, name)
		if err != nil {
			return "", err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		return string(b), err
	}
	whole := strings.Repeat("a", size)
	out, err := readAll(client, res.InvocationID)
	if err != nil || !strings.Contains(out, whole) {
		t.Fatalf("the agent's own output: %d bytes, %v", len(out), err)
	}

	m := f.as(t, "mallory")
	mallory := invoke.NewClient(m.Conn(), events.Identity{Role: "agent"}, m.Principal())
	defer mallory.Close()
	for _, name := range []string{res.InvocationID, res.OutputRef} {
		if out, err := readAll(mallory, name); !errors.Is(err, invoke.ErrNoOutput) {
			t.Errorf("mallory read the agent's output %s: %d bytes, %v", name, len(out), err)
		}
	}
	// Mallory's own large output under the agent's id goes beside the
	// agent's, which stays the agent's.
	mine, err := mallory.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "big"}, Tool: "run_shell_command",
		Args: json.RawMessage(`{"command":"head -c 100000 /dev/zero | tr '\\0' m"}`)}, nil)
	if err != nil || mine.Error != nil || mine.OutputRef == "" || mine.OutputRef == res.OutputRef {
		t.Fatalf("mallory's call under the agent's id: %+v %v", mine, err)
	}
	if out, err := readAll(mallory, mine.OutputRef); err != nil || !strings.Contains(out, strings.Repeat("m", 100000)) {
		t.Errorf("mallory's own output: %d bytes, %v", len(out), err)
	}
	if out, err := readAll(client, res.InvocationID); err != nil || !strings.Contains(out, whole) {
		t.Errorf("the agent's output after mallory's call under its id: %d bytes, %v", len(out), err)
	}
	nc := m.Conn()
	obj := "OBJ_" + events.OutputBucket
	for what, subject := range map[string]string{
		"look at the object store (its subjects name every object)": "$JS.API.STREAM.INFO." + obj,
		"read every chunk through a wildcard consumer":              "$JS.API.CONSUMER.CREATE." + obj + ".x.$O." + events.OutputBucket + ".C.*",
		"read the store whole":                                      "$JS.API.CONSUMER.CREATE." + obj,
		"get an object's description by name":                       "$JS.API.DIRECT.GET." + obj + ".$O." + events.OutputBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(res.InvocationID)),
		"get any message of the store":                              "$JS.API.DIRECT.GET." + obj,
		"ask for an output as the agent":                            events.OutputSubject("agent"),
		"ask for an output as anyone":                               events.OutputSubject(""),
	} {
		if err := nc.PublishRequest(subject, nc.NewInbox(), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		f.violated(t, "mallory", what, subject)
	}

	admin := f.as(t, "admin")
	root := invoke.NewClient(admin.Conn(), events.Identity{ID: "admin", Role: "admin"}, "")
	defer root.Close()
	if out, err := readAll(root, res.OutputRef); err != nil || !strings.Contains(out, whole) {
		t.Errorf("the admin reading the agent's output: %d bytes, %v", len(out), err)
	}
	f.clean(t, "agent", "executor", "admin")
}

// JetStream answers an API request on the reply subject the requester
// names, in the account that holds the streams: a member there that may
// send any API request can have JetStream write its answer to a bucket's
// key, or into the audit stream. The approver and the auditor live in
// accounts of their own: a reply subject they name stays there, whatever
// request carries it, and they may make no consumer (whose deliver
// subject is another reply subject of their choosing). The same request
// sent from the services account does write: the test's own proof that
// it would see a write.
func TestApproversAndAuditorsCannotWriteThroughJetStream(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := f.as(t, "admin")
	js := admin.JetStream()
	catalog, allowlist := "KV_"+events.CatalogBucket, "KV_"+events.AllowlistBucket
	var shard string // a real shard key of the catalogue
	testkit.EventuallyWithin(t, 20*time.Second, "the catalogue has a shard", func() bool {
		msgs, _, err := bus.LastOfEach(ctx, js, catalog, "$KV."+events.CatalogBucket+".>")
		if err != nil || len(msgs) == 0 {
			return false
		}
		shard = msgs[0].Subject
		return true
	})
	kv, err := js.KeyValue(ctx, events.AllowlistBucket)
	if err != nil {
		t.Fatal(err)
	}
	kept := []byte(`{"tool":"write_file","addedBy":"admin"}`)
	if _, err := kv.Put(ctx, "kept", kept); err != nil {
		t.Fatal(err)
	}
	lastSeq := func(stream string) uint64 {
		t.Helper()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.LastSeq
	}
	// written lists what the stream stored under subject after sequence
	// from that is a JetStream answer (API responses are typed; a direct
	// get's carries the stream's name in a header).
	written := func(stream string, from uint64, subject string) []string {
		t.Helper()
		var out []string
		if _, err := bus.Read(ctx, js, stream, bus.Range{From: from + 1, Subjects: []string{subject}}, func(m *bus.StoredMsg) error {
			if strings.Contains(string(m.Data), "io.nats.jetstream.api") || m.Header.Get("Nats-Stream") != "" {
				out = append(out, m.Subject+": "+string(m.Data))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	since := map[string]uint64{catalog: lastSeq(catalog), allowlist: lastSeq(allowlist), events.AuditStream: lastSeq(events.AuditStream)}
	targets := map[string]string{ // reply subject -> the stream that would store it
		shard: catalog,
		"$KV." + events.AllowlistBucket + ".kept":    allowlist,
		"$KV." + events.AllowlistBucket + ".planted": allowlist,
		events.SubjectAuditCheckpoint:                events.AuditStream,
	}

	for _, name := range []string{"eve", "trent"} {
		nc := f.as(t, name).Conn()
		for reply := range targets {
			// Its own account's API (no JetStream there), and the
			// services account's that it imports: the reply stays in
			// its account.
			for subject, body := range map[string]string{
				"$JS.API.INFO": "",
				auth.LocalSubject("$JS.API.STREAM.INFO." + catalog): "",
				auth.LocalSubject("$JS.API.DIRECT.GET." + catalog):  `{"last_by_subj":"` + shard + `"}`,
			} {
				if err := nc.PublishRequest(subject, reply, []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			// The services account's own API, which it does not import:
			// refused by the bus.
			if err := nc.PublishRequest(auth.LocalSubject("$JS.API.INFO"), reply, nil); err != nil {
				t.Fatal(err)
			}
		}
		f.violated(t, name, "send the services account's JetStream API any request", auth.LocalSubject("$JS.API.INFO"))
		for _, stream := range []string{events.AuditStream, catalog, allowlist} {
			for _, subject := range []string{"$JS.API.CONSUMER.CREATE." + stream, auth.LocalSubject("$JS.API.CONSUMER.CREATE." + stream),
				auth.LocalSubject("$JS.API.CONSUMER.CREATE." + stream + ".x.>")} {
				nc.PublishRequest(subject, nc.NewInbox(), []byte(`{"stream_name":"`+stream+`","config":{"deliver_subject":"`+shard+`"}}`))
				f.violated(t, name, "make a consumer", subject)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		if c, err := f.as(t, name).JetStream().OrderedConsumer(short, events.AuditStream, jetstream.OrderedConsumerConfig{}); err == nil {
			if _, err := c.Next(jetstream.FetchMaxWait(2 * time.Second)); err == nil {
				t.Errorf("%s read the audit stream through a consumer", name)
			}
		}
		cancel()
	}
	time.Sleep(time.Second) // what JetStream would answer, it has answered
	for reply, stream := range targets {
		if w := written(stream, since[stream], reply); len(w) > 0 {
			t.Errorf("a reply subject named from another account was written in %s: %q", stream, w)
		}
	}
	if e, err := kv.Get(ctx, "kept"); err != nil || !slices.Equal(e.Value(), kept) || e.Revision() > since[allowlist] {
		t.Errorf("the allowlist entry after the attempts: %v %v", e, err)
	}
	if _, err := kv.Get(ctx, "planted"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("an allowlist entry was planted: %v", err)
	}

	// From the services account, the same request writes.
	control := "$KV." + events.AllowlistBucket + ".control"
	if err := admin.Conn().PublishRequest("$JS.API.INFO", control, nil); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "an API answer to a reply subject in the services account is stored", func() bool {
		return len(written(allowlist, since[allowlist], control)) == 1
	})
	f.clean(t, "approver", "executor", "registry")
}

// An approver (a console's seat) reads the allowlist and follows its
// changes, by direct get and the bucket's republished changes, with no
// consumer and no violation; revoking an approval is an admin's.
func TestAnApproverFollowsTheAllowlist(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eve := f.as(t, "eve")
	kv, err := executor.AwaitAllowlistBucket(ctx, eve.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := f.as(t, "admin").JetStream().KeyValue(ctx, events.AllowlistBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Put(ctx, "before", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	w, err := bus.Watch(ctx, eve.JetStream(), events.AllowlistBucket, events.AllowlistLiveSubject, bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e := <-w.Updates():
			return e
		case <-ctx.Done():
			t.Fatal("the watch said nothing")
			return nil
		}
	}
	if e := next(); e == nil || e.Key() != "before" {
		t.Fatalf("the watch's first entry: %v", e)
	}
	if e := next(); e != nil {
		t.Fatalf("the watch's end of the initial values: %v", e)
	}
	if _, err := admin.Put(ctx, "after", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Key() != "after" || e.Operation() != jetstream.KeyValuePut {
		t.Fatalf("a new entry: %v", e)
	}
	if e, err := kv.Get(ctx, "after"); err != nil || string(e.Value()) != `{}` {
		t.Errorf("the approver's read of an entry: %v %v", e, err)
	}
	f.clean(t, "eve")
	short, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if err := kv.Delete(short, "after"); err == nil {
		t.Error("the approver revoked an approval")
	}
	if _, err := admin.Get(ctx, "after"); err != nil {
		t.Errorf("the approval after the approver's revoke: %v", err)
	}
	if err := admin.Delete(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Key() != "after" || e.Operation() != jetstream.KeyValueDelete {
		t.Fatalf("an admin's revoke, seen by the approver: %v", e)
	}
}

// An approver, out of reach of the allowlist bucket, revokes a
// remembered approval by asking an executor as itself; the trail says
// who revoked it. An agent reaches no revoke subject, and an approver
// only its own.
func TestAnApproverRevokesThroughAnExecutor(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := f.as(t, "admin")
	kv, err := executor.OpenAllowlistBucket(ctx, admin.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	rec := events.AllowRecord{AllowEntry: events.AllowEntry{Scope: "tool", Tool: "write_file"}, By: "approver", For: "call-1", AddedAt: time.Now()}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, rec.Key(), data); err != nil {
		t.Fatal(err)
	}

	mallory := f.as(t, "mallory").Conn()
	for _, as := range []string{"mallory", "approver"} {
		if err := mallory.Publish(events.RevokeSubject(as), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		f.violated(t, "mallory", "revoke an approval as "+as, events.RevokeSubject(as))
	}
	if err := f.as(t, "eve").Conn().Publish(events.RevokeSubject("approver"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	f.violated(t, "eve", "revoke as another approver", events.RevokeSubject("approver"))
	if _, err := kv.Get(ctx, rec.Key()); err != nil {
		t.Fatalf("the entry is gone before anyone allowed revoked it: %v", err)
	}

	reply, err := f.approver.Revoke(ctx, rec.Key(), "0123")
	if err != nil || !slices.Equal(reply.Revoked, []string{rec.Key()}) || !slices.Equal(reply.Unknown, []string{"0123"}) {
		t.Fatalf("revoke: %+v %v", reply, err)
	}
	if _, err := kv.Get(ctx, rec.Key()); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after the revoke, the entry: %v", err)
	}
	// The trail holds the request, under the approver's proven name.
	var revoked *events.RevokeRequest
	auditor := f.as(t, "auditor").JetStream()
	if !testkit.Poll(20*time.Second, func() bool {
		_, err := bus.Read(ctx, auditor, events.AuditStream, bus.Range{Subjects: []string{events.SubjectAllowlistRevoke + ".approver"}}, func(m *bus.StoredMsg) error {
			revoked, err = events.Decode[events.RevokeRequest](m.Data)
			return err
		})
		return err == nil && revoked != nil
	}) {
		t.Fatal("the revocation is not in the audit trail")
	}
	if revoked.Sender.ID != "approver" || !slices.Equal(revoked.Keys, []string{rec.Key(), "0123"}) {
		t.Errorf("recorded revocation: %+v", revoked)
	}
	f.clean(t, "bus", "executor", "approver", "admin", "auditor")
}

// The updates of MCP servers' resources go from the executors to the
// facade, which sends them on to the clients that subscribed: an agent
// can neither hear them nor forge one.
func TestResourceUpdatesReachTheFacadeAlone(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	facade := f.as(t, "facade")
	heard, err := facade.Conn().SubscribeSync(events.SubjectMCPUpdatedAll)
	if err != nil {
		t.Fatal(err)
	}
	if err := facade.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	mallory := f.as(t, "mallory").Conn()
	if _, err := mallory.SubscribeSync(events.SubjectMCPUpdatedAll); err != nil {
		t.Fatal(err)
	}
	f.violated(t, "mallory", "hear the updates of resources", events.SubjectMCPUpdatedAll)
	if err := mallory.Publish(events.MCPUpdatedSubject("notes"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	f.violated(t, "mallory", "forge an update of a resource", events.MCPUpdatedSubject("notes"))

	ex := f.as(t, "executor")
	data, err := events.Encode(&events.MCPResourceUpdated{Header: events.Header{Sender: events.Identity{ID: ex.Principal(), Role: "executor"}},
		Executor: ex.Principal(), Server: "notes", URI: "notes://readme"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Conn().Publish(events.MCPUpdatedSubject("notes"), data); err != nil {
		t.Fatal(err)
	}
	m, err := heard.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the facade never heard the executor's update: %v", err)
	}
	if u, err := events.Decode[events.MCPResourceUpdated](m.Data); err != nil || u.URI != "notes://readme" {
		t.Errorf("the facade heard %s (%v)", m.Data, err)
	}
	f.clean(t, "executor", "facade")
}
