package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/composite"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/tool"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// hostComposite hosts the composite d on ex, and waits until its
// catalogue lists it.
func hostComposite(t *testing.T, ex *Executor, d composite.Definition) {
	t.Helper()
	c, err := composite.New(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Host(context.Background(), Scope{Source: events.SourceComposite}, []tool.Tool{c}); err != nil {
		t.Fatal(err)
	}
	waitTool(t, ex, d.Name)
}

// recordedInvocations collects the invocations executors record, with
// the subject each was recorded on.
type recordedInvocations struct {
	mu   sync.Mutex
	invs []*events.Invocation
	subj []string
}

func recordInvocations(t *testing.T, b *bus.Bus) *recordedInvocations {
	t.Helper()
	r := &recordedInvocations{}
	nc := bustest.Connect(t, b).Conn()
	sub, err := nc.Subscribe(events.SubjectInvoke+".*", func(m *nats.Msg) {
		if inv, err := events.Decode[events.Invocation](m.Data); err == nil {
			r.mu.Lock()
			r.invs, r.subj = append(r.invs, inv), append(r.subj, m.Subject)
			r.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return r
}

// await is stepsOf(id) once a step of id is recorded.
func (r *recordedInvocations) await(t *testing.T, id string) ([]*events.Invocation, []string) {
	t.Helper()
	testkit.EventuallyWithin(t, 30*time.Second, "a step of "+id+" recorded", func() bool {
		steps, _ := r.stepsOf(id)
		return len(steps) > 0
	})
	return r.stepsOf(id)
}

// stepsOf are the recorded steps of the composite invocation id, and the
// subjects they were recorded on.
func (r *recordedInvocations) stepsOf(id string) ([]*events.Invocation, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var invs []*events.Invocation
	var subj []string
	for i, inv := range r.invs {
		if inv.Composite == id {
			invs, subj = append(invs, inv), append(subj, r.subj[i])
		}
	}
	return invs, subj
}

// A composite's steps are calls of its caller: sent on the caller's own
// subject, as the caller, and judged as that caller's. A caller the
// policy does not let call read_file cannot read through a composite the
// policy lets it call; a caller cannot call a composite as another; and
// arguments the composite's schema refuses run no step.
func TestCompositeStepsAreCallsOfItsCaller(t *testing.T) {
	t.Parallel()
	files := defaultpolicy.Default()
	files["toolbus.rego"] = strings.Replace(files["toolbus.rego"], "caller_denied_tools := {}", `caller_denied_tools := {"restricted": {"read_file"}}`, 1)
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Policy, c.IdentitiesEnforced = pol, true })
	hostComposite(t, e.exec, composite.Definition{Name: "read_it", Description: "Reads a file.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		Steps:      []composite.Step{{Tool: "read_file", Args: json.RawMessage(`{"file_path":"$args.path"}`)}}})
	rec := recordInvocations(t, e.bus)
	conn := bustest.Connect(t, e.bus).Conn()
	client := func(id, agent string) *invoke.Client {
		c := invoke.NewClient(conn, events.Identity{ID: id, Role: "agent", Agent: agent, Session: "s1"}, id)
		t.Cleanup(func() { c.Close() })
		return c
	}
	alice, bob := client("agent:alice", "dev"), client("agent:bob", "restricted")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(c *invoke.Client, args string) *events.Result {
		t.Helper()
		res, err := c.Invoke(ctx, &events.Invocation{Tool: "read_it", Args: json.RawMessage(args)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := call(alice, `{"path":"README.md"}`)
	if res.Error != nil || !strings.Contains(res.LLMContent, "[step 0: read_file] ok\n# hello") {
		t.Fatalf("alice's composite: %+v", res)
	}
	if res.Policy == nil || res.Policy.Verdict != events.Allow {
		t.Errorf("alice's composite was judged %+v, want ALLOW", res.Policy)
	}
	steps, subjects := rec.await(t, res.InvocationID)
	if len(steps) != 1 || steps[0].ID != res.InvocationID+".0" || steps[0].Sender.ID != "agent:alice" || steps[0].Tool != "read_file" ||
		subjects[0] != events.SubjectInvoke+".agent:alice" {
		t.Errorf("alice's step: %+v on %v", steps, subjects)
	}

	res = call(bob, `{"path":"README.md"}`)
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.Error.Message, "step 0 (read_file): read_file is not available to agent:bob") ||
		strings.Contains(res.LLMContent, "# hello") {
		t.Errorf("bob's composite: %+v", res)
	}
	if steps, subjects := rec.await(t, res.InvocationID); len(steps) != 1 || steps[0].Sender.ID != "agent:bob" || subjects[0] != events.SubjectInvoke+".agent:bob" {
		t.Errorf("bob's step: %+v on %v", steps, subjects)
	}

	res = call(alice, `{"file":"README.md"}`)
	if errType(res) != events.ErrInvalidParams {
		t.Errorf("arguments the schema refuses: %+v", res)
	}
	refused := res.InvocationID

	// alice's connection, on alice's subject, naming bob as the caller.
	res, err = alice.InvokeFor(ctx, &events.Invocation{Header: events.Header{ID: "as-bob", Sender: events.Identity{ID: "agent:bob", Role: "agent"}},
		Tool: "read_it", Args: json.RawMessage(`{"path":"README.md"}`)}, "agent:alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if errType(res) != events.ErrInvalidParams || strings.Contains(res.LLMContent, "# hello") {
		t.Errorf("a composite called as another: %+v", res)
	}
	// The executor records in order: once a later call's step is
	// recorded, a step of the calls refused would have been.
	rec.await(t, call(alice, `{"path":"README.md"}`).InvocationID)
	for _, id := range []string{refused, "as-bob"} {
		if steps, _ := rec.stepsOf(id); len(steps) != 0 {
			t.Errorf("refused call %s ran steps: %+v", id, steps)
		}
	}
}

// A cancel of a composite gives up the step it runs: the step's tool is
// stopped, the step ends with a terminal result of its own, and the
// composite ends CANCELLED, once.
func TestCancellingACompositeCancelsItsStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started, stopped := make(chan struct{}), make(chan struct{})
	e.hostTools(t, "executor@slow", []tool.Tool{tool.Func(events.ToolSpec{Name: "wait", Description: "waits", Kind: events.KindRead},
		func(ctx context.Context, _ *tool.Call) (*tool.Output, error) {
			close(started)
			<-ctx.Done()
			close(stopped)
			return nil, ctx.Err()
		})})
	hostComposite(t, e.exec, composite.Definition{Name: "wait_then_read", Description: "Waits, then reads.",
		Steps: []composite.Step{{Tool: "wait"}, {Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}}})
	results := make(chan *events.Result, 16)
	nc := bustest.Connect(t, e.bus).Conn()
	sub, err := nc.Subscribe(events.SubjectResult, func(m *nats.Msg) {
		if r, err := events.Decode[events.Result](m.Data); err == nil {
			results <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan *events.Result, 1)
	go func() {
		res, err := e.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "comp-1"}, Tool: "wait_then_read"}, nil)
		if err != nil {
			res = &events.Result{LLMContent: err.Error()}
		}
		done <- res
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the composite's step never started")
	}
	if err := e.client.Cancel(ctx, "comp-1", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	var res *events.Result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("no result for the cancelled composite")
	}
	if errType(res) != events.ErrCancelled {
		t.Errorf("the composite: %+v", res)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the step's tool was not stopped")
	}
	terminal := map[string]*events.Result{}
	testkit.EventuallyWithin(t, 30*time.Second, "both terminal results recorded", func() bool {
		for {
			select {
			case r := <-results:
				if !r.Late {
					if prev := terminal[r.InvocationID]; prev != nil {
						t.Errorf("two terminal results for %s: %+v and %+v", r.InvocationID, prev, r)
					}
					terminal[r.InvocationID] = r
				}
			default:
				return terminal["comp-1"] != nil && terminal["comp-1.0"] != nil
			}
		}
	})
	if r := terminal["comp-1.0"]; errType(r) != events.ErrCancelled {
		t.Errorf("the step's terminal result: %+v", r)
	}
	if r := terminal["comp-1.1"]; r != nil {
		t.Errorf("the step after the cancel ran: %+v", r)
	}
}

// A step the policy asks about is put to the approvers as a call of the
// composite's caller, under its own id; the step runs once a person
// approves it, and not when a person refuses it, which stops the
// composite.
func TestACompositeStepThatAsksWaitsForAPerson(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hostComposite(t, e.exec, composite.Definition{Name: "note", Description: "Writes a note.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"text":{"type":"string"}},"required":["name","text"]}`),
		Steps: []composite.Step{{Tool: "write_file", Args: json.RawMessage(`{"file_path":"$args.name","content":"$args.text"}`)},
			{Tool: "read_file", Args: json.RawMessage(`{"file_path":"$args.name"}`)}}})
	a := startApprover(t, e.bus, func(req *events.ConfirmRequest) *events.ConfirmAnswer {
		if strings.Contains(string(req.Args), "refused.md") {
			return &events.ConfirmAnswer{Outcome: events.Cancel, Message: "not that one"}
		}
		return &events.ConfirmAnswer{Outcome: events.ProceedOnce}
	})

	res := e.call(t, "note", `{"name":"approved.md","text":"kept"}`)
	if res.Error != nil || !strings.Contains(res.LLMContent, "[step 1: read_file] ok\nkept") {
		t.Fatalf("an approved step: %+v", res)
	}
	req := <-a.requests
	if req.Tool != "write_file" || req.InvocationID != res.InvocationID+".0" || req.Caller.ID != "agent:test" {
		t.Errorf("the approvers were asked %+v", req)
	}

	res = e.call(t, "note", `{"name":"refused.md","text":"lost"}`)
	if errType(res) != events.ErrUserCancelled || !strings.Contains(res.LLMContent, "[step 1: read_file] not run") {
		t.Errorf("a refused step: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "refused.md")); err == nil {
		t.Error("the refused step wrote its file")
	}
}
