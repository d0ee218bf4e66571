package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/closest"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/policy/shell"
	"github.com/toolbus/toolbus/internal/protect"
	"github.com/toolbus/toolbus/internal/tool"
)

// call is one invocation on its way through the pipeline.
type call struct {
	e   *Executor
	inv *events.Invocation
	// span is the call's execute_tool span (OpenTelemetry's GenAI
	// conventions), a child of the caller's when the invocation carried
	// its trace context.
	span trace.Span
	// trace is the span's W3C traceparent when it records, which the
	// call's events carry (events.Header.Trace).
	trace string
	// began is when the executor took the call in (begin).
	began time.Time
	// id is the call's id in the trail, minted by the executor that
	// accepted it (ids.go); inv.ID is its caller's key.
	id    string
	reply string
	// recorded is the audit stream's answer to the invocation's record
	// (awaitRecord); the zero Receipt for a call forwarded here, which
	// the executor that forwarded it waited for.
	recorded bus.Receipt
	// body is the invocation as the caller sent it: what its key is
	// taken for (ids.go), and sum the call's (callSum), which a retry
	// must repeat.
	body []byte
	sum  [sha256.Size]byte
	// attempt is the attempt the caller sent (events.AttemptOf), which
	// its give-up names: an executor's own retry is still this one.
	attempt int
	// principal is who the bus vouches sent the call (events.Unproven
	// when nobody does); only it may cancel the call.
	principal string
	// pol is the policy that decides the call, from its start to its
	// end: the stable revision, or a rollout's for the principals in its
	// share (policy.Enforced.For).
	pol  *policy.Policy
	tool *events.Tool // the catalogue's entry: its name, aliases, hosts
	host *hosted      // the tool as this executor runs it, nil if another does
	impl tool.Tool

	// ctx is the call's context, also the tool's: the deadline, a cancel
	// by id and the executor's shutdown end it through stop, with a cause.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// verdict is the last decision, recorded in the result; empty until
	// the policy is asked.
	verdict events.PolicyVerdict
	args    map[string]any // the decoded arguments the policy judged
	// modified: args are an approver's, not the invocation's.
	modified bool
	// hookAsked: a pre hook asked for a person to confirm the call.
	hookAsked bool
	paths     []string        // and the files it was shown
	shell     *shell.Analysis // and the analysis of its shell line
	// session is what the fleet counted of the caller's session, this
	// call included; nil when the policy was shown no counts.
	session *policy.SessionCounts
	tc      tool.Call

	// What the policy was shown of the files on disk (see judged.go).
	judgedMu  sync.Mutex
	judged    []judgedFile
	judgedBuf [2]judgedFile // judged's room for the common call, in the call itself
	hardLinks []string      // those of paths with other names

	// admitted: the call is in e.running and counted in e.wg until its
	// result is sent.
	admitted bool
	// limits are those the last decision named (limits.go); slots the
	// keys of the slots of limits of calls at once the call holds.
	limits []policy.Limit
	slots  []string

	once      sync.Once
	heartbeat *time.Timer
	mu        sync.Mutex // guards done and the execution control below
	done      bool
	// Execution control: timer fires first at the deadline, then, once
	// the call is stopping (deadline, cancel or shutdown) with the tool
	// still running, stopGrace later to end the call without the tool.
	timer       *time.Timer
	timeout     time.Duration
	toolRunning bool
	stopping    bool
	// progressSent counts the bytes of live output sent (progress).
	progressSent int
	// logsSent counts the log messages of its server sent (log).
	logsSent int
	// abandoned: the caller gave up on the call and published its own
	// terminal result, so the result sent here is Late.
	abandoned bool
	// sent: finish sent the call's terminal result (not Late).
	sent bool
	// decision is the encoded decision event not published yet: it goes
	// into the audit stream's copy of the result (events.WithDecision),
	// or out on its own when the call is about to wait for a person or
	// is still going decisionGrace into it, so that the trail says why a
	// call runs or waits while it does. Most calls end sooner without
	// waiting: one message less for the stream to store.
	decision []byte
	// beaten: the heartbeat timer fired once (see beat).
	beaten bool
	// retryable: the call runs, and its policy decision marks it
	// idempotent; its heartbeats and progress say so
	// (events.RetryableHeader), for a caller that loses it.
	retryable atomic.Bool
	// settled is the stream's answer to the invocation's record, once
	// settleDone (settleWithin), guarded by settleMu.
	settleMu   sync.Mutex
	settleDone bool
	settled    *stop
	// ticketed: the first attempt's retry ticket is written (ticket),
	// once, by ticketOnce; only then is the caller told it may retry.
	ticketOnce sync.Once
	ticketed   atomic.Bool
}

// header is the header of an event this executor records about c: the
// caller's principal in it keys the call, with its id, for every reader.
func (c *call) header() events.Header {
	return events.Header{Sender: c.e.id, Principal: c.principal, Call: c.id, Trace: c.trace}
}

// take accepts an invocation message, counted in e.accepting meanwhile
// (see behind).
func (e *Executor) take(m *nats.Msg, forwarded bool) {
	e.accepting.Add(1)
	defer e.accepting.Add(-1)
	if hold := e.beforeAccept.Load(); hold != nil {
		(*hold)(m)
	}
	var recorded bus.Receipt
	var id string
	if !forwarded {
		// What the caller sent, before anything is done about it; a
		// forwarded call was recorded by the executor it came to. Near
		// its cap the trail takes nothing more (trail.go).
		if e.trail.full.Load() {
			e.trailFull(m)
			return
		}
		if e.budget != nil {
			p := e.principalOf(m, false)
			if ok, retry := e.budget.admit(p, len(m.Data), time.Now()); !ok {
				e.rateLimited(m, p, retry)
				return
			}
		}
		// The call's id in the trail, minted here, where it is
		// accepted (ids.go).
		id = events.NewCapability()
		recorded = e.recordRequest(m, id)
	} else {
		// Only executors publish on their exec subjects: the id and
		// the caller's reply subject named here are the accepting
		// executor's, the latter the one the bus gave the caller.
		id = m.Header.Get(events.CallHeader)
		if to := m.Header.Get(events.AnswerToHeader); to != "" {
			m.Reply = to
		}
	}
	e.accept(m, forwarded, recorded, id)
}

// accept takes one invocation message, whose record the stream
// acknowledges on recorded (the zero Receipt for a forwarded one), as
// the call id names. It runs the call on a worker of its own, so the
// subscription keeps handing out work.
func (e *Executor) accept(m *nats.Msg, forwarded bool, recorded bus.Receipt, id string) {
	inv, err := events.Decode[events.Invocation](m.Data)
	if err != nil {
		e.respondRaw(m.Reply, e.result(&events.Invocation{Header: events.Header{ID: "unknown"}}, "", events.ErrInvalidParams, "malformed invocation: "+err.Error()))
		return
	}
	principal, err := e.bindCaller(m, &inv.Sender, forwarded)
	if err != nil {
		// An impersonation is refused, and recorded as refused.
		e.refuse(m, inv, principal, id, nil, events.ErrInvalidParams, err.Error())
		return
	}
	if !forwarded {
		// The caller's key, checked where the call is accepted: the
		// executor a call is forwarded to has none of its window.
		if st := e.takeKey(principal, inv, m.Data); st != nil {
			e.refuse(m, inv, principal, id, nil, st.Type, st.Msg)
			return
		}
	}
	t, ok := e.catalog.Catalog().GetTool(inv.Tool)
	// The executors that may run the call: all the tool's hosts, or,
	// for a workspace-bound tool, those of the call's workspace.
	var hosts []string
	if ok {
		if hosts, err = hostsFor(t, inv.Workspace); err != nil {
			e.refuse(m, inv, principal, id, t, events.ErrInvalidParams, err.Error())
			return
		}
	}
	mine := ok && slices.Contains(hosts, e.id.ID)
	h := e.hostedFor(t)
	if mine && h == nil {
		h = e.awaitHosted(t) // this executor's registration of it is in flight
	}
	switch {
	case ok && !forwarded && (h == nil || !mine):
		// The executor it goes to runs it without looking at the
		// trail: it goes once the trail holds it.
		if recorded.Settled() {
			e.forward(m, inv, id, t, hosts, recorded)
		} else {
			e.workers.run(func() { e.forward(m, inv, id, t, hosts, recorded) })
		}
		return
	case ok && forwarded && h != nil && !mine:
		// Sent here for a workspace this executor does not have (the
		// catalogue changed on the way): never run it in another.
		e.refuse(m, inv, principal, id, t, events.ErrExecutorLost, fmt.Sprintf("executor %s does not host %s for this call's workspace", e.id.ID, t.Name))
		return
	}
	c := &call{e: e, inv: inv, id: id, reply: m.Reply, body: m.Data, principal: principal, pol: e.policyFor(principal), tool: t, host: h, attempt: events.AttemptOf(inv.Attempt), recorded: recorded}
	if h != nil {
		c.impl = h.impl
	}
	c.begin(m.Header)
	if st := e.enter(c); st != nil {
		c.end(st.output())
		return
	}
	e.workers.run(func() {
		// A bug the call's input runs into fails the call, not the
		// executor and the calls of everyone else.
		defer func() {
			if r := recover(); r != nil {
				e.log.Error("the pipeline crashed on a call", "invocation", inv.ID, "tool", inv.Tool, "panic", r, "stack", string(debug.Stack()))
				c.end(halt(events.ErrExecutionFailed, fmt.Sprintf("the executor failed on this call: %v", r)))
			}
		}()
		c.mu.Lock()
		c.heartbeat = time.AfterFunc(decisionGrace, c.beat)
		c.mu.Unlock()
		c.run(ok)
	})
}

// enter admits c among the running calls, counted in e.wg until its
// result is sent, or returns why it may not run: the executor is
// stopping, the caller gave up on it already, or a call with its id runs.
func (e *Executor) enter(c *call) *stop {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.stopping:
		return &stop{events.ErrCancelled, errShutdown.Error()}
	default:
	}
	id := c.inv.ID
	attempt := c.inv.Attempt
	if e.abandoned.take(abandonKey(c.principal, id, attempt)) || e.abandoned.take(abandonKey(anyPrincipal, id, attempt)) {
		c.abandon()
		return &stop{events.ErrCancelled, "The caller gave up on this call before it reached the executor; it was not run."}
	}
	key := callKey(c.principal, id)
	if _, busy := e.running[key]; busy {
		// Ids are the caller's choice; two live calls with one id could
		// not be told apart when cancelled or stopped.
		return &stop{events.ErrInvocationIDReused, fmt.Sprintf("an invocation with id %q is already running on this executor; an id names one call", id)}
	}
	e.running[key] = c
	c.admitted = true
	e.wg.Add(1)
	return nil
}

// callKey is how a running call is found: by its principal and id, since
// ids are unique per principal only.
func callKey(principal, id string) string { return principal + "\x00" + id }

// runningByID is a running call of id, of any principal (a cancel that
// may cancel any call, a claim, which names an id only); e.mu is held.
func (e *Executor) runningByID(id string) *call {
	for _, c := range e.running {
		if c.inv.ID == id {
			return c
		}
	}
	return nil
}

// release ends the call's hold on the executor once its result is sent:
// Stop waits for calls, not for the goroutine of a tool that ignored its
// deadline.
func (c *call) release() {
	c.cancel(nil)
	if !c.admitted {
		return
	}
	e := c.e
	e.mu.Lock()
	delete(e.running, callKey(c.principal, c.inv.ID))
	if c.sent {
		// A caller that gives up from now on hears that this result is
		// the call's terminal one (handleCancel); until now, c.done
		// told it.
		e.finished.add(c.inv.ID)
	}
	e.mu.Unlock()
	e.wg.Done()
}

// principalOf is the principal token of an invocation message: the last
// token of the subject it was sent on, or, for a call another executor
// forwarded, what that executor read from it.
func (e *Executor) principalOf(m *nats.Msg, forwarded bool) string {
	if !e.cfg.IdentitiesEnforced {
		return events.Unproven
	}
	if forwarded {
		if p := m.Header.Get(events.PrincipalHeader); p != "" {
			return p
		}
		return events.Unproven
	}
	// The principal part is one token, or two for a client of a facade,
	// which only a facade may publish (events.ClientPrincipal). A name
	// that breaks the rules cannot come through the bus's permissions;
	// it is taken for nobody's.
	if p, ok := events.SubjectPrincipal(m.Subject); ok {
		return p
	}
	return events.Unproven
}

// bindCaller makes sender the identity the policy judges: proven when
// the bus vouched for its principal, refused when it claims another's.
// It returns the principal token.
func (e *Executor) bindCaller(m *nats.Msg, sender *events.Identity, forwarded bool) (string, error) {
	p := e.principalOf(m, forwarded)
	id, err := events.Caller(*sender, p, p != events.Unproven)
	if err != nil {
		sender.Proven = false
		return p, err
	}
	*sender = id
	return p, nil
}

func nameOf(t *events.Tool) string {
	if t == nil {
		return ""
	}
	return t.Name
}

// refuse ends a call before it is admitted, recorded like any other.
func (e *Executor) refuse(m *nats.Msg, inv *events.Invocation, principal, id string, t *events.Tool, errType events.ErrorType, msg string) {
	c := &call{e: e, inv: inv, id: id, reply: m.Reply, principal: principal, pol: e.policyFor(principal), tool: t}
	c.begin(m.Header)
	c.end(halt(errType, msg))
}

// hostsFor is the executors that may run a call of t for workspace: all
// t's hosts, or for a workspace-bound tool those of workspace; with no
// workspace named, those of the one workspace t's hosts have. A call
// that leaves several workspaces to choose from is refused: it must
// never act on one silently.
func hostsFor(t *events.Tool, workspace string) ([]string, error) {
	if !t.WorkspaceBound() {
		return t.Hosts, nil
	}
	// The common call allocates nothing: every host has the workspace
	// asked for, or, asked for none, all hosts have the same one.
	want := workspace
	if want == "" && len(t.Hosts) > 0 {
		want = t.Workspaces[t.Hosts[0]]
	}
	same := true
	for _, h := range t.Hosts {
		if t.Workspaces[h] != want {
			same = false
			break
		}
	}
	if same && len(t.Hosts) > 0 {
		return t.Hosts, nil
	}
	by := map[string][]string{}
	for _, h := range t.Hosts {
		ws := t.Workspaces[h]
		by[ws] = append(by[ws], h)
	}
	names := slices.Sorted(maps.Keys(by))
	if workspace != "" {
		if hosts := by[workspace]; len(hosts) > 0 {
			return hosts, nil
		}
		return nil, fmt.Errorf("no executor hosts %s for workspace %q; it is hosted for %s", t.Name, workspace, quoteAll(names))
	}
	return nil, fmt.Errorf("%s acts on a workspace and is hosted for %d: %s; name one in the invocation's workspace", t.Name, len(by), quoteAll(names))
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// forward sends an invocation this executor may not run to one of hosts
// that may; that executor answers the caller directly.
func (e *Executor) forward(m *nats.Msg, inv *events.Invocation, id string, t *events.Tool, candidates []string, recorded bus.Receipt) {
	ctx, cancel := context.WithTimeout(context.Background(), recordWait)
	err := recorded.Wait(ctx)
	cancel()
	if err != nil {
		typ := events.ErrExecutionFailed
		if errors.Is(err, bus.ErrTrailFull) {
			typ = events.ErrAuditFull
			e.trail.setFull(err.Error(), e.trail.Fill())
			e.trail.refusals.Add(1)
		}
		e.respondRaw(m.Reply, e.result(inv, t.Name, typ, fmt.Sprintf("Refused: the audit trail did not store this call's invocation (%v), so the call was not run.", err)))
		return
	}
	var hosts []string
	for _, h := range candidates {
		if h != e.id.ID {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		e.respondRaw(m.Reply, e.result(inv, t.Name, events.ErrExecutorLost, fmt.Sprintf("no executor hosts %s", t.Name)))
		return
	}
	host := hosts[rand.IntN(len(hosts))]
	// The executor that takes it cannot see the subject the caller sent
	// it on: the principal read from it goes along. Only executors may
	// publish on the executors' own subjects.
	fwd := &nats.Msg{Subject: events.ExecSubject(host), Data: m.Data, Header: nats.Header{}}
	span := e.forwarding(m.Header, fwd, t, host)
	defer span.End()
	fwd.Header.Set(events.PrincipalHeader, e.principalOf(m, false))
	fwd.Header.Set(events.CallHeader, id)
	if m.Reply != "" {
		fwd.Header.Set(events.AnswerToHeader, m.Reply)
	}
	if err := e.nc.PublishMsg(fwd); err != nil {
		e.respondRaw(m.Reply, e.result(inv, t.Name, events.ErrExecutorLost, "forward to "+host+": "+err.Error()))
	}
}

// beat tells the caller the call is alive, every invoke.HeartbeatEvery, until the
// result is sent, storing its output included: the heartbeat stops only
// when the result is on its way. Calls that finish within a beat never
// send one. A heartbeat names the executor, which the caller asks
// whether the call still runs if heartbeats stop coming. The timer's
// first firing, decisionGrace into the call, sends no heartbeat: it
// publishes the decision held for the result (call.decision).
func (c *call) beat() {
	c.flushDecision()
	c.ticket()
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.beaten
	c.beaten = true
	if c.done || c.reply == "" {
		return
	}
	if first {
		c.heartbeat.Reset(invoke.HeartbeatEvery - decisionGrace)
		return
	}
	m := nats.NewMsg(c.reply)
	m.Header.Set(events.KindHeader, events.KindHeartbeat)
	m.Header.Set(events.ExecutorHeader, c.e.id.ID)
	c.markRetryable(m)
	_ = c.e.nc.PublishMsg(m)
	c.heartbeat.Reset(invoke.HeartbeatEvery)
}

// decisionGrace is how long a call's decision event may wait to be
// folded into its result's record: a call still going by then, a tool
// that takes its time or one that hangs, has it published on its own, so
// that a call lost with its executor keeps its verdict in the trail.
const decisionGrace = 50 * time.Millisecond

// abandon records that the caller gave up on the call, so that its
// result is sent Late. It reports false when it is too late for that: the
// result is sent already, or being sent, as the call's terminal result.
func (c *call) abandon() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.abandoned = true
	return true
}

// run is the pipeline: resolve, validate, policy, pre hooks (hooks.go),
// confirmation, execution, post hooks, result. Its events: the invocation
// itself (the audit stream keeps the request); for ASK_USER the decision,
// the confirmation request, the answer and a "started" step; each hook
// run; progress; and the result, which carries the policy decision and
// says why a call ended early. Every way it ends goes through end.
func (c *call) run(found bool) {
	admit := c.stage(stageAdmit, c.began)
	st := c.enterPipeline()
	admit.end(st)
	if st != nil {
		c.end(st.output())
		return
	}
	confirmed, st := c.admit(found)
	if st != nil {
		c.end(st.output())
		return
	}
	c.retryable.Store(c.verdict.Idempotent)
	if st := c.settleBeforeEffect(); st != nil {
		c.end(st.output())
		return
	}
	if end := c.applyLimits(); end != nil {
		c.end(*end)
		return
	}
	c.execute(confirmed)
}

// enterPipeline is what a call goes through before anything of it is
// judged: a retry takes its attempt, and the trail holds the invocation
// before anything with an effect happens, hooks and a person's question
// included (no result leaves before it does either: settle). A call that
// changes nothing goes its way while its record is stored.
func (c *call) enterPipeline() *stop {
	if c.inv.Attempt > 1 {
		if st := c.takeAttempt(); st != nil {
			return st
		}
	}
	if !c.overlapsRecord() {
		return c.settle()
	}
	return nil
}

// admit runs the steps before the tool: it resolves the tool, validates
// the arguments and has them allowed (authorize). It returns whether a
// person confirmed the call, or the stop that ends it.
func (c *call) admit(found bool) (confirmed bool, st *stop) {
	e, inv := c.e, c.inv
	switch {
	case !found:
		return false, &stop{events.ErrToolNotFound, notFound(e.catalog.Catalog(), inv.Tool)}
	case c.impl == nil:
		return false, &stop{events.ErrToolNotFound, fmt.Sprintf("Tool %q is not hosted by executor %s.", c.tool.Name, e.id.ID)}
	case inv.TimeoutMillis > e.cfg.MaxTimeout.Milliseconds() && inv.Attempt > 1:
		// A retry asks for longer than its first attempt had, and gets
		// as long as a call may: its one chance is not spent on a
		// refusal.
		inv.TimeoutMillis = e.cfg.MaxTimeout.Milliseconds()
	case inv.TimeoutMillis > e.cfg.MaxTimeout.Milliseconds():
		d := time.Duration(inv.TimeoutMillis) * time.Millisecond
		return false, &stop{events.ErrInvalidParams, fmt.Sprintf("timeoutMillis asks for %s; a call may ask for at most %s", d, e.cfg.MaxTimeout)}
	}
	if inv.Op != events.OpRun {
		if _, ok := c.impl.(tool.Operator); !ok {
			return false, &stop{events.ErrInvalidParams, fmt.Sprintf("%s takes no %s: only an MCP server's prompts and resources do", c.tool.Name, inv.Op)}
		}
	}
	if inv.Op == events.OpComplete {
		// The completion's own params, not the entry's arguments: the
		// schema is not theirs to meet.
		args, err := policy.DecodeArgs(inv.Args)
		if err != nil {
			return false, &stop{events.ErrInvalidParams, err.Error()}
		}
		return c.authorize(args)
	}
	validate := c.stage(stageValidate, time.Now())
	args, st := c.validate(inv.Args)
	validate.end(st)
	if st != nil {
		return false, st
	}
	if inv.Op == events.OpUnsubscribe {
		// It gives up what its caller holds and nothing else: there is
		// nothing to judge, and no person to ask.
		return false, nil
	}
	return c.authorize(args)
}

// maxModifications is how many times approvers may modify a call's
// arguments before it is refused.
const maxModifications = 3

// authorize asks the policy, then the pre hooks, then, when either asks,
// a person. Arguments an approver modified are validated and judged
// again. It returns whether a person confirmed the call, or the stop
// that ends it.
func (c *call) authorize(args map[string]any) (confirmed bool, st *stop) {
	for round := 0; ; round++ {
		decide := c.stage(stagePolicy, time.Now())
		d, st := c.decide(args)
		if st == nil {
			decide.decided(&c.verdict)
		}
		decide.end(st)
		if st != nil {
			return confirmed, st
		}
		if c.inv.Attempt > 1 && !d.Idempotent {
			// Every attempt is judged again, and only a call this
			// decision says may run twice is run a second time.
			return confirmed, &stop{events.ErrInvocationIDReused, fmt.Sprintf("Attempt %d of invocation id %q is refused: the policy does not mark this call idempotent (%s: %s), and a call that may change something is run once.", c.inv.Attempt, c.inv.ID, d.Verdict, d.Reason)}
		}
		if d.Verdict == events.Allow || d.Verdict == events.AskUser {
			if d, st = c.preHooks(d); st != nil {
				return confirmed, st
			}
		}
		switch d.Verdict {
		case events.Allow:
			return confirmed, nil
		case events.AskUser:
			confirmed = true
			c.flushDecision() // the trail says why the call waits, while it does
			answer, st := c.confirm(d, args)
			if st != nil || answer.Outcome != events.ModifyWithEditor {
				return confirmed, st
			}
			if round >= maxModifications {
				return confirmed, &stop{events.ErrInvalidParams, "the arguments were modified too many times"}
			}
			// New arguments: validated and judged again.
			if args, st = c.validate(answer.Args); st != nil {
				st.Msg = "modified arguments: " + st.Msg
				return confirmed, st
			}
			c.inv.Args, c.modified = answer.Args, true
		default:
			return confirmed, &stop{events.ErrPolicyDenied, d.Reason}
		}
	}
}

// validate checks the arguments against the schema, then the tool's own
// checks. It returns the decoded arguments, or the stop that says why
// they are invalid.
func (c *call) validate(raw json.RawMessage) (map[string]any, *stop) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	invalid := func(msg string) (map[string]any, *stop) { return nil, &stop{events.ErrInvalidParams, msg} }
	args, err := policy.DecodeArgs(raw)
	if err != nil {
		return invalid(err.Error())
	}
	sch, err := c.host.schema.compiled()
	if err != nil {
		return invalid(fmt.Sprintf("Invalid parameters for %s: its own parameter schema cannot check them: %v", c.tool.Name, err))
	}
	if err := validateArgs(sch, args); err != nil {
		return invalid(fmt.Sprintf("Invalid parameters for %s: %v", c.tool.Name, err))
	}
	if v, ok := c.impl.(tool.Validator); ok {
		if err := v.ValidateArgs(raw); err != nil {
			return invalid(fmt.Sprintf("Invalid parameters for %s: %v", c.tool.Name, err))
		}
	}
	c.inv.Args = raw
	return args, nil
}

// decide asks the policy in force and records its decision, with the
// input it was made on (events.Decision). It returns the stop that ends
// the call instead when the input cannot be made: the session's calls
// could not be counted.
func (c *call) decide(args map[string]any) (policy.Decision, *stop) {
	e, t := c.e, c.tool
	c.args = args
	pol, gen, prot := c.pol, e.allowlist.gen.Load(), e.protected.Load()
	if st := c.countSession(pol, args); st != nil {
		return policy.Decision{}, st
	}
	paths, sh := c.named(args, pol)
	c.paths, c.shell = paths, sh
	var (
		buf    [512]byte
		key    []byte
		j      judged
		cached bool
	)
	// A session's counts change from call to call; what the loop guards
	// conclude from them seldom does. A decision made with them is
	// reused for the same call and the same conclusions, under a policy
	// that keeps them apart (policy.Policy.SessionApart); under another,
	// it is neither reused nor kept.
	reusable := c.session == nil
	var concluded []byte
	if !reusable && pol.SessionApart() {
		var err error
		// An error is the whole decision's too: judged whole, uncached.
		in := &policy.Input{Tool: c.host.judged, Caller: c.inv.Sender, Session: c.session}
		in.Tool.Name = c.tool.Name
		concluded, err = pol.SessionConclusions(c.ctx, in)
		reusable = err == nil
	}
	if reusable {
		key = appendDecisionKey(buf[:0], t, c.inv, paths, c.hardLinks)
		key = append(key, 0)
		key = append(key, concluded...)
		j, cached = e.decisions.get(pol, gen, prot, key)
	}
	var in *policy.Input // made for a decision not taken from the cache
	if !cached {
		in = c.input(args, paths, c.hardLinks, sh)
		in.Protected = protectedOf(prot, paths)
		j.Decision, j.rec = pol.DecideRecorded(c.ctx, in)
		if reusable {
			e.decisions.put(pol, gen, prot, key, j)
		}
	}
	d := j.Decision
	if e.shadow.active() {
		e.shadow.offer(c, j, shadowKey{key: key, allowlist: gen, protected: prot}, in)
	}
	c.limits = d.Limits
	c.verdict = events.PolicyVerdict{Verdict: d.Verdict, Reason: d.Reason, Revision: d.Revision, Cached: cached, Idempotent: d.Idempotent}
	ev := &events.Decision{Header: c.header(), InvocationID: c.inv.ID, Tool: t.Name,
		Verdict: d.Verdict, Reason: d.Reason, PolicyRevision: d.Revision, Cached: cached,
		Input: j.rec.Input, Session: c.session, ShellLine: j.rec.ShellLine, BashChecked: j.rec.BashChecked, InputLossy: j.rec.Lossy,
		Idempotent: d.Idempotent, Attempt: retryAttempt(c.inv)}
	if c.modified {
		ev.Args = c.inv.Args
	}
	if data, err := events.Encode(ev); err != nil {
		e.log.Error("decision does not encode", "invocation", c.inv.ID, "err", err)
	} else {
		c.holdDecision(data)
	}
	return d, nil
}

// countSession counts the call in its caller's session, once, for a
// policy that reads the counts (sessions.go); the stop it returns ends a
// call whose counts could not be had: never judged without them.
func (c *call) countSession(pol *policy.Policy, args map[string]any) *stop {
	if c.session != nil {
		return nil
	}
	counts, err := c.sessionCounts(pol, args)
	switch {
	case err == nil:
		c.session = counts
		return nil
	case c.ctx.Err() != nil: // cancelled by id, or the executor stopping
		return &stop{events.ErrCancelled, fmt.Sprintf("The call was cancelled before it was judged (%v); it was not run.", context.Cause(c.ctx))}
	}
	return &stop{events.ErrExecutionFailed, fmt.Sprintf("The executor could not count this session's calls, which the policy judges the call by, so the call was not judged or run: %v", err)}
}

// holdDecision keeps the encoded decision event for the result's record
// (call.decision), or publishes it at once when the call is past its
// decisionGrace already. A decision held before it, of an earlier round,
// goes out on its own first.
func (c *call) holdDecision(data []byte) {
	c.mu.Lock()
	prev := c.decision
	c.decision = data
	if c.beaten {
		c.decision = nil
	} else {
		data = nil
	}
	c.mu.Unlock()
	c.e.publishDecision(c.inv.ID, prev)
	c.e.publishDecision(c.inv.ID, data)
}

// flushDecision publishes the held decision event on its own.
func (c *call) flushDecision() {
	c.mu.Lock()
	data := c.decision
	c.decision = nil
	c.mu.Unlock()
	c.e.publishDecision(c.inv.ID, data)
}

// publishDecision publishes an encoded decision event, if any, without
// waiting for the stream's acknowledgement (see note).
func (e *Executor) publishDecision(id string, data []byte) {
	if data == nil {
		return
	}
	if err := e.nc.Publish(events.SubjectDecision, data); err != nil {
		e.log.Error("decision not published", "invocation", id, "err", err)
	}
}

// named is what the call names beyond its arguments: the files it
// touches, with where links inside the workspace lead them, and for shell
// tools the analysis of the line. The files depend on the file system as
// well as on the arguments (a name may have become a link to .env, or a
// hard link to a key), so they are looked at on every call and are part
// of the decision's cache key; what was found is recorded (c.judged) for
// the tool's check of the files it opens.
func (c *call) named(args map[string]any, pol *policy.Policy) ([]string, *shell.Analysis) {
	var paths []string
	if pn, ok := c.impl.(tool.PathNamer); ok {
		paths = pn.Paths(args)
	}
	var sh *shell.Analysis
	if cm, ok := c.impl.(tool.Commander); ok {
		line, dir := cm.Command(c.inv.Args)
		analysis := shell.Analyze(line)
		sh = &analysis
		// Any word of a line may name a file (`cat notes.txt`), and so
		// does the directory it runs in.
		paths = append(paths, analysis.Locate(dir, c.e.home, pol.Samples())...)
	}
	c.judgedMu.Lock()
	c.judged, c.hardLinks = c.judgedBuf[:0], nil
	c.judgedMu.Unlock()
	if lr, ok := c.impl.(tool.LinkResolver); ok {
		for _, p := range paths { // the links' targets appended are not looked at again
			f, err := lr.Look(p)
			if err != nil {
				continue
			}
			if f.Real != p {
				paths = append(paths, f.Real)
			}
			if f.Links > 1 {
				c.hardLinks = append(c.hardLinks, f.Real)
			}
			c.judge(p, f)
		}
	}
	return paths, sh
}

// input is what the policy is shown of the call: paths are the files it
// names, hardLinks those of them with other names, sh the analysis of its
// shell line for shell tools.
func (c *call) input(args map[string]any, paths, hardLinks []string, sh *shell.Analysis) *policy.Input {
	e := c.e
	in := &policy.Input{Tool: c.host.judged, Args: args, Caller: c.inv.Sender, Home: e.home, Workspace: e.cfg.Workspace, WorkspaceName: e.workspaceName()}
	in.Tool.Name = c.tool.Name
	in.Paths, in.HardLinks, in.Shell, in.HookAsked, in.Session = paths, hardLinks, sh, c.hookAsked, c.session
	in.Allowlist = e.allowlist.entriesFor(in.Tool.Name, in.Tool.Source, in.Tool.Server)
	return in
}

// protectedOf are those of paths that s protects.
func protectedOf(s *protect.Set, paths []string) []policy.ProtectedPath {
	var out []policy.ProtectedPath
	for _, p := range paths {
		if q, ok := s.Covers(p); ok {
			out = append(out, policy.ProtectedPath{Path: p, Of: q.Path, By: q.By})
		}
	}
	return out
}

// execute runs the tool under its deadline. A call that waited for an
// approver gets a "started" step; for any other call the ALLOW decision
// marks the start.
func (c *call) execute(confirmed bool) {
	e, inv := c.e, c.inv
	c.timeout = c.timeoutOf()
	if confirmed {
		c.step("started", fmt.Sprintf("deadline %s", c.timeout))
	}
	c.tc = tool.Call{ID: inv.ID, Args: inv.Args, Progress: c.progress, Refused: c.refused, Opened: c.opened, MaxOutput: e.cfg.MaxOutput,
		Op: inv.Op, Caller: inv.Sender, Log: c.log}
	c.tc.Ask, c.tc.ServerRequests = c.asker()
	if c.host.judged.Kind == events.KindComposite {
		c.tc.Invoke = c.invokeStep
	}
	run := c.stage(stageExecute, time.Now())
	ctx := run.context(c.ctx) // the tool's backend request and process are the stage span's children
	out, err := c.runBounded(ctx)
	if c.serverLost(out, err) {
		out, err = c.retryOnServer(ctx, out)
	}
	how := c.outcome(out, err)
	run.endAs(how.out.Err)
	c.end(how)
}

// outcome is what a tool run that returned out and err ends the call
// with: out as the tool gave it, or the stop that says why it gave none.
func (c *call) outcome(out *tool.Output, err error) ending {
	if err == nil {
		return ending{out: out, ran: true}
	}
	if out != nil {
		out.Whole.Close()
	}
	switch {
	case errors.Is(context.Cause(c.ctx), errDeadline):
		return halt(events.ErrTimeout, fmt.Sprintf("%s did not finish within %s and was stopped", c.tool.Name, c.timeout))
	case c.ctx.Err() != nil:
		return halt(events.ErrCancelled, fmt.Sprintf("%s was cancelled: %v", c.tool.Name, context.Cause(c.ctx)))
	}
	return halt(events.ErrExecutionFailed, err.Error())
}

// interrupt ends the call's context with cause: its deadline passed, it
// was cancelled by id, or the executor is shutting down. A running tool
// then has stopGrace to return.
func (c *call) interrupt(cause error) {
	c.cancel(cause)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	c.stopping = true
	if c.toolRunning {
		c.timer.Reset(stopGrace)
	}
}

// onTimer is the execution timer: the deadline, then the stop grace.
func (c *call) onTimer() {
	c.mu.Lock()
	stopping := c.stopping
	c.mu.Unlock()
	if !stopping {
		c.interrupt(errDeadline)
		return
	}
	c.e.log.Warn("a tool did not stop after its call ended; left to finish on its own", "tool", c.tool.Name, "invocation", c.inv.ID)
	c.end(c.outcome(nil, c.ctx.Err()))
}

var errDeadline = errors.New("deadline")

// stopGrace is how long a tool has, once its deadline passed or its call
// was cancelled, to stop before the executor reports the end without it.
const stopGrace = 2 * time.Second

// runBounded runs the tool on the call's own goroutine, under the call's
// timer. A tool that does not heed the end of its context (a read blocked
// on a pipe cannot be interrupted) cannot hold its caller: stopGrace after
// the call stops, the timer sends the result without it and releases the
// call, and the goroutine is left to finish the tool on its own, counted
// in toolRuns.
func (c *call) runBounded(ctx context.Context) (*tool.Output, error) {
	c.mu.Lock()
	c.toolRunning = true
	wait := c.timeout
	if c.stopping { // stopped before the tool started
		wait = stopGrace
	}
	c.timer = time.AfterFunc(wait, c.onTimer)
	c.mu.Unlock()
	c.e.toolRuns.Add(1)
	out, err := runSafely(ctx, c.impl, &c.tc)
	c.e.toolRuns.Add(-1)
	c.mu.Lock()
	c.toolRunning = false
	c.timer.Stop()
	c.mu.Unlock()
	return out, err
}

// runSafely runs a tool, turning a panic into an error: a broken tool
// fails its call, not the executor.
func runSafely(ctx context.Context, t tool.Tool, tc *tool.Call) (out *tool.Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the tool crashed: %v", r)
		}
	}()
	if o, ok := t.(tool.Operator); ok && tc.Op != events.OpRun {
		out, err = o.Operate(ctx, tc)
	} else {
		out, err = t.Run(ctx, tc)
	}
	if err == nil && out == nil {
		err = errors.New("the tool returned no output")
	}
	return out, err
}

// timeoutOf is the call's deadline: its own, its tool's, its server's or
// the executor's.
func (c *call) timeoutOf() time.Duration {
	cfg := c.e.cfg
	if c.inv.TimeoutMillis > 0 {
		return time.Duration(c.inv.TimeoutMillis) * time.Millisecond
	}
	if d, ok := cfg.ToolTimeouts[c.tool.Name]; ok {
		return d
	}
	if d, ok := cfg.ServerTimeouts[c.tool.Server]; ok && c.tool.Server != "" {
		return d
	}
	if t, ok := c.impl.(tool.Timeouter); ok && t.Timeout() > 0 {
		return t.Timeout()
	}
	return cfg.Timeout
}

// progress forwards output as the tool produces it: to the caller, and on
// the invocation's progress subject for anyone watching. It reports
// whether it wants more.
//
// Live output is bounded at maxProgress a call, whatever the tool: enough
// to watch it; the whole output comes with the result (and lands in the
// object store when it is large), so a tool that prints without end
// cannot flood the bus and push older events out of the audit stream.
func (c *call) progress(chunk string) bool {
	c.mu.Lock()
	room := maxProgress - c.progressSent
	chunk = truncateBytes(chunk, max(room, 0))
	c.progressSent += len(chunk)
	last := room > 0 && c.progressSent >= maxProgress
	c.mu.Unlock()
	if chunk != "" {
		c.sendProgress(chunk)
	}
	if last {
		c.sendProgress(fmt.Sprintf("\n[live output stops after %d MB; the whole output comes with the result]\n", maxProgress>>20))
	}
	return room > len(chunk)
}

const maxProgress = 1 << 20

// log sends the caller a log message of the MCP server serving the call,
// up to maxLogs of them: a server that logs without end cannot flood the
// caller.
func (c *call) log(params json.RawMessage) {
	c.mu.Lock()
	c.logsSent++
	n := c.logsSent
	c.mu.Unlock()
	if c.reply == "" || n > maxLogs {
		return
	}
	m := nats.NewMsg(c.reply)
	m.Header.Set(events.KindHeader, events.KindLog)
	m.Data = params
	_ = c.e.nc.PublishMsg(m)
}

// maxLogs is how many log messages of its server a call passes on.
const maxLogs = 1000

func (c *call) sendProgress(chunk string) {
	_ = c.e.nc.Publish(events.SubjectProgressPrefix+c.inv.ID, []byte(chunk))
	if c.reply != "" {
		c.ticket()
		m := nats.NewMsg(c.reply)
		m.Header.Set(events.KindHeader, events.KindProgress)
		c.markRetryable(m)
		m.Data = []byte(chunk)
		_ = c.e.nc.PublishMsg(m)
	}
}

func (c *call) step(name, detail string) {
	c.e.note(events.SubjectStep, &events.Step{Header: c.header(), InvocationID: c.inv.ID,
		Tool: nameOf(c.tool), Step: name, Detail: detail})
}

// end sends the one terminal result of the call, the first end it is
// given, and releases the output's spool whether or not it is the one
// sent. Every way a call ends comes here.
func (c *call) end(how ending) {
	out, ran := how.out, how.ran
	defer out.Whole.Close()
	c.once.Do(func() {
		defer c.release()
		defer c.span.End()
		e := c.e
		// What the trail does not hold leaves no result behind: the
		// call ran nothing with an effect (overlapsRecord). The wait
		// is the stream's, whether or not the call's time is up.
		record := c.stage(stageRecord, time.Now())
		st := c.settleWithin(context.Background())
		record.end(st)
		if st != nil {
			out, ran = st.output().out, false
		}
		// Before the result goes out: the caller's next call finds the
		// slot free.
		c.releaseSlots()
		res := &events.Result{Header: c.header(), InvocationID: c.inv.ID, Tool: nameOf(c.tool),
			LLMContent: out.LLMContent, ReturnDisplay: out.ReturnDisplay, Parts: out.Parts, Error: out.Err,
			PartsWhole: out.PartsWhole, StructuredContent: out.Structured, Meta: out.Meta, MCPResult: out.MCPResult, ExitCode: out.ExitCode,
			Attempt: retryAttempt(c.inv)}
		if out.PartsWhole && out.Whole == nil {
			// What follows is what the way adds: notes, hooks' feedback.
			res.PartsText = len(out.LLMContent)
		}
		if c.verdict.Verdict != "" {
			res.Policy = &c.verdict
		}
		if res.Tool == "" {
			res.Tool = c.inv.Tool
		}
		// Storing the whole output can take seconds; the heartbeat goes on
		// meanwhile, so the caller does not take the call for lost.
		e.capOutput(c.ctx, c.principal, res, out.Whole)
		e.capStructured(c.ctx, c.principal, res)
		e.storeParts(c.ctx, c.principal, res)
		if ran {
			c.postHooks(res)
		}
		// Encoded once: the same bytes go to the caller and to the trail.
		data, err := e.fit(c.principal, res, []*events.Result{res})
		c.mu.Lock()
		c.done = true
		if c.heartbeat != nil {
			c.heartbeat.Stop()
		}
		late := c.abandoned
		decision := c.decision
		c.decision = nil
		c.mu.Unlock()
		if err == nil && late {
			res.Late = true
			data, err = events.Encode(res)
		}
		if err != nil {
			e.log.Error("result does not encode", "invocation", res.InvocationID, "err", err)
			e.publishDecision(c.inv.ID, decision) // the trail keeps the verdict at least
			return
		}
		outcome := "OK"
		if res.Error != nil {
			outcome = string(res.Error.Type)
		}
		c.finish(res)
		// The catalogue's name, never the caller's: a caller naming
		// tools that do not exist must not grow the metrics without end.
		known := nameOf(c.tool)
		if known == "" {
			known = "(unknown)"
		}
		e.observer.Finished(known, c.verdict.Verdict, outcome)
		if !late && !c.admitted {
			// Not in e.running, where a caller giving up would find it
			// done: remembered before it is sent instead.
			e.mu.Lock()
			e.finished.add(c.inv.ID)
			e.mu.Unlock()
		}
		if c.reply != "" && !late {
			if err := e.nc.Publish(c.reply, data); err != nil {
				e.log.Error("result not sent", "invocation", res.InvocationID, "err", err)
			}
			e.endAnswers(c.reply)
			e.sent.keep(c.inv.ID, c.reply, c.principal, data)
		}
		c.sent = !late
		e.budget.spend(c.principal, len(data), time.Now())
		if decision != nil {
			if folded := events.WithDecision(data, decision); len(folded) <= e.maxRecord() {
				data = folded
			} else {
				e.publishDecision(c.inv.ID, decision) // too large to fold: on its own
			}
		}
		if err := e.rec.RecordEncoded(events.SubjectResult, data); err != nil {
			e.log.Error("result event not published", "invocation", res.InvocationID, "err", err)
		}
	})
}

func (e *Executor) result(inv *events.Invocation, toolName string, t events.ErrorType, msg string) *events.Result {
	return &events.Result{Header: events.Header{Sender: e.id}, InvocationID: inv.ID, Tool: toolName,
		LLMContent: msg, ReturnDisplay: msg, Error: &events.ToolError{Type: t, Message: msg}, Attempt: retryAttempt(inv)}
}

// retryAttempt is the attempt an event about inv names: its attempt when
// it is a retry, else none (the first attempt, as every call had before
// calls were retried).
func retryAttempt(inv *events.Invocation) int {
	if inv.Attempt > 1 {
		return inv.Attempt
	}
	return 0
}

// markRetryable says on a message to the caller that the call may be
// retried once if it is lost (events.RetryableHeader).
func (c *call) markRetryable(m *nats.Msg) {
	if c.ticketed.Load() {
		m.Header.Set(events.RetryableHeader, "1")
	}
}

// respondRaw sends a result to a reply subject.
func (e *Executor) respondRaw(reply string, res *events.Result) {
	if reply == "" {
		return
	}
	data, err := events.Encode(res)
	if err != nil {
		e.log.Error("result does not encode", "invocation", res.InvocationID, "err", err)
		return
	}
	if err := e.nc.Publish(reply, data); err != nil {
		e.log.Error("result not sent", "invocation", res.InvocationID, "err", err)
	}
	e.endAnswers(reply)
}

// endAnswers ends the answers to a request that came from another
// account (an agent's, internal/auth): the bus keeps the way back to
// its requester open until an empty message closes it, or until it has
// carried nothing for a while. Closed at once, the calls of a busy
// fleet do not pile up in the bus's memory.
func (e *Executor) endAnswers(reply string) { endAnswers(e.nc, reply) }

// endAnswers is Executor.endAnswers on nc, the connection the answers
// took: on another, the end could overtake them.
func endAnswers(nc *nats.Conn, reply string) {
	if strings.HasPrefix(reply, "_R_.") {
		_ = nc.Publish(reply, nil)
	}
}

// notFound says why name is not a tool to call: a tool that is registered
// but not active says so, and how it is made active again; any other name
// gets the three closest tool names (seed 004 error guidance).
func notFound(c interface {
	AllToolNames() []string
	Lookup(name string) (*events.Tool, bool)
}, name string) string {
	if t, ok := c.Lookup(name); ok && !t.Active {
		return inactive(t)
	}
	nearest := closest.Names(name, c.AllToolNames(), 3)
	msg := fmt.Sprintf("Tool %q not found in the registry.", name)
	if len(nearest) > 0 {
		msg += " Did you mean: " + strings.Join(nearest, ", ") + "?"
	}
	return msg
}

// inactive says that t is registered and not active, and why: the
// registry's reason names what makes it active again.
func inactive(t *events.Tool) string {
	if t.InactiveReason == "" {
		return fmt.Sprintf("Tool %q is disabled.", t.Name)
	}
	return fmt.Sprintf("Tool %q is disabled: %s.", t.Name, t.InactiveReason)
}
