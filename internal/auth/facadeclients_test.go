package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
)

// facadeClient is the bus client the facade sends client's calls with:
// on the subjects of the principal facade/<client>, naming a caller
// under it.
func (f *fleet) facadeClient(t *testing.T, client string) *invoke.Client {
	t.Helper()
	facade := f.as(t, "facade")
	p := events.ClientPrincipal("facade", client)
	c := invoke.NewClient(facade.Conn(), events.Identity{ID: p + "/agent:claude-code", Role: "agent", Agent: "claude-code", Session: "s-" + client}, p)
	t.Cleanup(func() { c.Close() })
	return c
}

// writeCall is a write_file call, which the default policy asks a person
// about.
func writeCall(id, file string) *events.Invocation {
	return &events.Invocation{Header: events.Header{ID: id}, Tool: "write_file",
		Args: json.RawMessage(fmt.Sprintf(`{"file_path":%q,"content":"x\n"}`, file))}
}

// An agent cannot be a client of a facade: the bus refuses it the
// clients' subjects, the executor refuses an identity under the facade's
// name, and an identity with a client's name under the agent's own is
// judged as the agent (its principal stays "agent").
func TestAnAgentCannotClaimAFacadeClient(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	agent := f.as(t, "agent")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	data, err := events.Encode(&events.Invocation{Header: events.Header{ID: "sub", Sender: events.Identity{ID: "agent/alice"}}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)})
	if err != nil {
		t.Fatal(err)
	}
	agent.Conn().Publish(events.InvokeSubject("agent/alice"), data)
	f.violated(t, "agent", "invoke as a client of its own", events.InvokeSubject("agent/alice"))
	agent.Conn().Publish(events.InvokeSubject("facade/alice"), data)
	f.violated(t, "agent", "invoke as a client of the facade", events.InvokeSubject("facade/alice"))

	// The Go client puts the name under its own principal: the raw
	// request is what an injected agent can send.
	posing, err := events.Encode(&events.Invocation{Header: events.Header{ID: "posing", Sender: events.Identity{ID: "facade/alice/agent:x"}}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := agent.Conn().RequestWithContext(ctx, events.InvokeSubject(agent.Principal()), posing)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := events.Decode[events.Result](msg.Data); err != nil || res.Error == nil || res.Error.Type != events.ErrInvalidParams {
		t.Fatalf("an agent naming itself a client of the facade: %+v %v", res, err)
	}

	named := invoke.NewClient(agent.Conn(), events.Identity{ID: "agent/alice", Role: "agent"}, agent.Principal())
	defer named.Close()
	res, err := named.Invoke(ctx, &events.Invocation{Header: events.Header{ID: "named"}, Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
	if err != nil || res.Error != nil {
		t.Fatalf("the agent's read: %+v %v", res, err)
	}
	d := lastDecision(t, f.as(t, "auditor").JetStream(), "named")
	var in struct {
		Caller events.Identity `json:"caller"`
	}
	if err := json.Unmarshal(d.Input, &in); err != nil {
		t.Fatal(err)
	}
	if in.Caller.Principal != "agent" || d.Principal != "agent" {
		t.Errorf("the policy saw the principal %q (the decision's is %q), want the agent's", in.Caller.Principal, d.Principal)
	}
}

// Each client of the facade has bounds of its own: one holding every
// place for calls waiting for a person leaves another's calls unaffected,
// and the trail names each call's client.
func TestOneFacadeClientCannotTakeAnothersPendingPlaces(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	alice, bob := f.facadeClient(t, "alice"), f.facadeClient(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	calls, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	var waiting atomic.Int32
	for i := range 16 {
		wg.Go(func() {
			alice.InvokeWatch(calls, writeCall(fmt.Sprintf("hold-%d", i), fmt.Sprintf("hold-%d.txt", i)), &invoke.Watch{Waiting: func(*invoke.Waiting) { waiting.Add(1) }})
		})
	}
	testkit.Eventually(t, "alice's 16 calls wait for a person", func() bool { return waiting.Load() == 16 })

	res, err := alice.InvokeWatch(ctx, writeCall("one-more", "one-more.txt"), nil)
	if err != nil || res.Error == nil || res.Error.Type != events.ErrTooManyPending {
		t.Fatalf("alice's 17th call: %+v %v; want %s", res, err, events.ErrTooManyPending)
	}
	bobWaits := make(chan struct{}, 1)
	wg.Go(func() {
		bob.InvokeWatch(calls, writeCall("bobs", "bobs.txt"), &invoke.Watch{Waiting: func(*invoke.Waiting) { bobWaits <- struct{}{} }})
	})
	select {
	case <-bobWaits:
	case <-ctx.Done():
		t.Fatal("bob's call never waited for a person: alice's calls took its place")
	}
	d := lastDecision(t, f.as(t, "auditor").JetStream(), "one-more")
	if d.Principal != "facade/alice" {
		t.Errorf("the trail names the principal %q of alice's call, want facade/alice", d.Principal)
	}
	f.clean(t, "facade")
}

// Each client of the facade has limits of its own: one holding every
// execute slot and every place in their line leaves another's shell line
// running.
func TestOneFacadeClientCannotTakeAnothersExecuteSlots(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	alice, bob := f.facadeClient(t, "alice"), f.facadeClient(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f.approveAll(t, ctx)
	calls, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	var queued, asked atomic.Int32
	for i := range 20 {
		// One at a time through the person's answer (at most 16 may
		// wait for one), each a line of its own (the loop guard asks
		// about repeats).
		wg.Go(func() {
			inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("tail-%d", i)}, Tool: "run_shell_command", Args: json.RawMessage(fmt.Sprintf(`{"command":"sleep %d"}`, 600+i))}
			res, err := alice.InvokeWatch(calls, inv, &invoke.Watch{Queued: func(*events.Queued) { queued.Add(1) }, Waiting: func(*invoke.Waiting) { asked.Add(1) }})
			if calls.Err() == nil {
				t.Errorf("alice's %s ended while it should run or wait in line: %+v %v", inv.ID, res, err)
			}
		})
		testkit.Eventually(t, "alice's shell line is asked about", func() bool { return asked.Load() == int32(i+1) })
	}
	testkit.Eventually(t, "4 of alice's shell lines run and 16 wait in line", func() bool { return queued.Load() == 16 })
	res, err := alice.InvokeWatch(ctx, &events.Invocation{Header: events.Header{ID: "tail-more"}, Tool: "run_shell_command", Args: json.RawMessage(`{"command":"sleep 700"}`)}, nil)
	if err != nil || res.Error == nil || res.Error.Type != events.ErrConcurrencyLimited {
		t.Fatalf("alice's 21st shell line: %+v %v; want %s", res, err, events.ErrConcurrencyLimited)
	}
	res, err = bob.InvokeWatch(ctx, &events.Invocation{Header: events.Header{ID: "bobs-line"}, Tool: "run_shell_command", Args: json.RawMessage(`{"command":"echo bob ran"}`)}, nil)
	if err != nil || res.Error != nil {
		t.Fatalf("bob's shell line, beside alice's: %+v %v", res, err)
	}
	f.clean(t, "facade")
}

// An answer as the user of a client's caller counts only when the facade
// sends it as that client: the same facade answering alice's question as
// bob is refused, and alice's own answer runs the call.
func TestAFacadeClientAnswersOnlyItsOwnCalls(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	facade := f.as(t, "facade")
	alice := f.facadeClient(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	asked := make(chan *events.ConfirmRequest, 1)
	inv := writeCall("alices-edit", "alice.txt")
	inv.CallerConfirms = true
	done := make(chan *events.Result, 1)
	go func() {
		res, err := alice.InvokeWatch(ctx, inv, &invoke.Watch{Confirm: func(r *events.ConfirmRequest) { asked <- r }})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var req *events.ConfirmRequest
	select {
	case req = <-asked:
	case <-ctx.Done():
		t.Fatal("alice's caller was never asked")
	}
	answer := func(as string) *events.ConfirmAck {
		t.Helper()
		a := &events.ConfirmAnswer{Header: events.Header{Sender: events.AgentUser(inv.Sender)}, InvocationID: req.InvocationID, Outcome: events.ProceedOnce}
		data, err := events.Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := facade.Conn().RequestWithContext(ctx, events.AnswerSubject(req.AnswerTo, events.AnswerAsCaller, as), data)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := events.Decode[events.ConfirmAck](msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	if ack := answer(events.ClientPrincipal("facade", "bob")); ack.Accepted {
		t.Fatal("bob's answer to alice's question was accepted")
	}
	if ack := answer("facade"); ack.Accepted {
		t.Fatal("the facade's own answer to its client's question was accepted")
	}
	if ack := answer(events.ClientPrincipal("facade", "alice")); !ack.Accepted {
		t.Fatalf("alice's own answer was refused: %s", ack.Reason)
	}
	if res := <-done; res == nil || res.Error != nil {
		t.Fatalf("alice's edit after her answer: %+v", res)
	}
}

// A client's calls and outputs are its own: the facade sending bob's
// cancel of alice's call, or bob's read of alice's output, reaches
// nothing, and alice reads and cancels her own.
func TestAFacadeClientCannotCancelOrReadAnothers(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	alice, bob := f.facadeClient(t, "alice"), f.facadeClient(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.approveAll(t, ctx)
	res, err := alice.InvokeWatch(ctx, &events.Invocation{Header: events.Header{ID: "big"}, Tool: "run_shell_command",
		Args: json.RawMessage(`{"command":"head -c 300000 /dev/zero | tr '\\0' a"}`)}, nil)
	if err != nil || res.Error != nil || res.OutputRef == "" {
		t.Fatalf("alice's call with a large output: %+v %v", res, err)
	}
	if r, err := bob.ReadOutput(ctx, res.OutputRef); !errors.Is(err, invoke.ErrNoOutput) {
		if r != nil {
			r.Close()
		}
		t.Errorf("bob read alice's output: %v", err)
	}
	r, err := alice.ReadOutput(ctx, res.OutputRef)
	if err != nil {
		t.Fatalf("alice's own output: %v", err)
	}
	r.Close()

	// Bob's cancel of alice's running call does nothing; hers ends it.
	started := make(chan struct{}, 1)
	done := make(chan *events.Result, 1)
	go func() {
		res, _ := alice.InvokeWatch(ctx, &events.Invocation{Header: events.Header{ID: "long"}, Tool: "run_shell_command",
			Args: json.RawMessage(`{"command":"echo started; sleep 30"}`)}, &invoke.Watch{Progress: func(string) {
			select {
			case started <- struct{}{}:
			default:
			}
		}})
		done <- res
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("alice's long call never started")
	}
	// The executor answers a cancel with what it did: bob's finds no
	// call of his.
	data, err := events.Encode(&events.CancelRequest{Header: events.Header{Sender: events.Identity{ID: "facade/bob/agent:claude-code"}}, InvocationID: "long", Reason: "bob's"})
	if err != nil {
		t.Fatal(err)
	}
	answer, err := f.as(t, "facade").Conn().RequestWithContext(ctx, events.CancelSubject(events.ClientPrincipal("facade", "bob")), data)
	if err != nil {
		t.Fatal(err)
	}
	if string(answer.Data) != events.ClaimUnknown {
		t.Fatalf("bob's cancel of alice's call: %q, want %q", answer.Data, events.ClaimUnknown)
	}
	select {
	case res := <-done:
		t.Fatalf("bob's cancel ended alice's call: %+v", res)
	default:
	}
	if err := alice.Cancel(ctx, "long", "her own"); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res == nil || res.Error == nil || res.Error.Type != events.ErrCancelled {
		t.Fatalf("alice's cancel of her own call: %+v", res)
	}
	f.clean(t, "facade")
}
