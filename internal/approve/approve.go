// Package approve is an approver's seat in the confirmation protocol (see
// internal/events/confirm.go): it follows every confirmation request of the
// fleet as it is sent and from the stream that keeps them
// (events.ConfirmStream) — those sent before it started included —
// keeps the queue of pending ones and the recent outcomes, and sends
// answers under one identity. The terminal approver (toolbus confirm) and
// the web console are views over an Approver.
//
// An approver is present when a person can see a request now: executors
// ask whether one is (the toolbus-approver service answers pings) and
// deny at once a call nobody would see. A terminal view is present while
// it runs; the console only while a page watches it
// (Config.PresentWhileHeld, Hold).
package approve

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// Defaults of Config.
const (
	// DefaultWindow covers the executor's default confirmation deadline
	// (five minutes) with room to spare.
	DefaultWindow = 10 * time.Minute
	DefaultKeep   = 100
	// answerTimeout bounds an answer's round trip when the caller's
	// context has no deadline.
	answerTimeout = 10 * time.Second
	// orphanGrace is how long past its deadline a request whose executor
	// said nothing stays pending: the executor's own closed event
	// normally comes first.
	orphanGrace = 5 * time.Second
	// catchUp is how often the stream is read for events the live
	// subscription missed (a reconnect, an event stored in the stream
	// after the read at start had passed it).
	catchUp = time.Second
)

// Config configures an Approver.
type Config struct {
	// Identity names the approver in every answer it sends and in the
	// audit trail. ID is required; Role defaults to "approver".
	Identity events.Identity
	// Principal is the fleet identity the approver's connection uses
	// (bus.Bus's Principal; "" for none): answers go on its subject, and
	// with one the executor takes Identity.ID to be it.
	Principal string
	// Window is how far back the stream of confirmations is read at
	// start for requests still pending (default DefaultWindow; the
	// stream keeps bus.ConfirmMaxAge).
	Window time.Duration
	// Keep is how many ended requests State.Recent holds (default
	// DefaultKeep).
	Keep int
	// Version is reported by the toolbus-approver service.
	Version string
	// PresentWhileHeld makes the approver present only while something
	// holds it present (Hold): a view that has a person in front of it
	// only sometimes (the web console, while a page is open). Without
	// it, the approver is present from Start to Stop.
	PresentWhileHeld bool
	// Via is where this seat's people answer: events.ViaTerminal or
	// events.ViaConsole.
	Via string
	// Who is the person this seat answers as, when it is one person
	// (a terminal): an identity of their own (Member), or the OS user who
	// runs it. A seat shared by several people (the console) leaves it
	// nil and names the person in each Answer.
	Who *events.Signer
	// Linger is how long a PresentWhileHeld approver stays present
	// after its last hold is released, so that a page that reloads does
	// not leave a call in between to be denied. 0: not at all.
	Linger time.Duration
	Logger *slog.Logger
}

// Request is a confirmation request as an approver shows it: what the
// executor sent, and what became of it.
type Request struct {
	events.ConfirmRequest
	// Deadline is when the executor stops waiting.
	Deadline time.Time
	// Answer is the answer the executor acted on: its Sender is who
	// answered, its Outcome how. Nil while pending or when closed.
	Answer *events.ConfirmAnswer
	// Closed says why the request ended with no accepted answer.
	Closed *events.ConfirmClosed
	// Rejected are answers the policy refused, from anyone.
	Rejected []events.ConfirmRejected
	// Approvals are the approvals counted so far of a request that needs
	// several people (ApprovalsRequired), in order; the request waits
	// until the last.
	Approvals []events.ConfirmAnswer
	// Ended is when it was answered or closed.
	Ended time.Time
	// Revision grows with every change to the request while it waits (a
	// refused answer), so that a view sends a request again only when
	// it changed.
	Revision uint64
}

// Pending reports whether the request still waits for an answer.
func (r *Request) Pending() bool { return r.Answer == nil && r.Closed == nil }

// Status says in a few words what became of the request: "pending",
// "proceed_once by approver:ada", "closed: CONFIRMATION_TIMEOUT".
func (r *Request) Status() string {
	switch {
	case r.Answer != nil:
		return fmt.Sprintf("%s by %s", r.Answer.Outcome, r.Answer.Sender.ID)
	case r.Closed != nil:
		return fmt.Sprintf("closed: %s", r.Closed.ErrorType)
	case len(r.Approvals) > 0:
		return fmt.Sprintf("pending: %s", r.Progress())
	}
	return "pending"
}

// Progress says, for a request that needs several people, how many
// approved and who: "1 of 2 approved (alice@example.com)"; "" for one that
// needs one.
func (r *Request) Progress() string {
	if r.ApprovalsRequired < 2 {
		return ""
	}
	who := make([]string, len(r.Approvals))
	for i, a := range r.Approvals {
		who[i] = personOf(&a)
	}
	out := fmt.Sprintf("%d of %d approved", len(r.Approvals), r.ApprovalsRequired)
	if len(who) > 0 {
		out += " (" + strings.Join(who, ", ") + ")"
	}
	return out
}

// personOf names who gave answer a, for a person to read.
func personOf(a *events.ConfirmAnswer) string {
	if w := a.Who; w != nil && !w.Member {
		if name := cmp.Or(w.Email, w.Name, w.Subject); name != "" {
			return name
		}
	}
	return cmp.Or(a.Person, a.Sender.ID)
}

func (r *Request) clone() Request {
	c := *r
	c.Rejected = slices.Clone(r.Rejected)
	c.Approvals = slices.Clone(r.Approvals)
	return c
}

// State is the queue at one moment.
type State struct {
	// Pending are the requests that wait for an answer, oldest first.
	Pending []Request
	// Recent are the requests that ended, newest first.
	Recent []Request
}

// Find returns the request whose AnswerTo is answerTo, pending or
// recent. Requests are known by their AnswerTo, each request's own
// token: an invocation id is the caller's choice, and another caller's
// request may carry the same one.
func (s State) Find(answerTo string) (Request, bool) {
	for _, list := range [][]Request{s.Pending, s.Recent} {
		for _, r := range list {
			if r.AnswerTo == answerTo {
				return r, true
			}
		}
	}
	return Request{}, false
}

// OfInvocation returns the requests that name invocationID, pending
// ones first, newest first in each list: to show a call's story, never
// to answer by (two callers may use one id).
func (s State) OfInvocation(invocationID string) []Request {
	var out []Request
	for i := len(s.Pending) - 1; i >= 0; i-- {
		if s.Pending[i].InvocationID == invocationID {
			out = append(out, s.Pending[i])
		}
	}
	for _, r := range s.Recent {
		if r.InvocationID == invocationID {
			out = append(out, r)
		}
	}
	return out
}

// Answer is what a person decided.
type Answer struct {
	Outcome events.Outcome
	// Args are the edited arguments of a ModifyWithEditor answer, a JSON
	// object.
	Args json.RawMessage
	// Message is the approver's word to the agent (why it was denied).
	Message string
	// Person names the person who answered, where several share this
	// approver (events.ConfirmAnswer.Person).
	Person string
	// Who is the person who answered as their sign-in knows them, where
	// several share this approver (the console); else Config.Who.
	Who *events.Signer
}

// ErrNotPending is returned by Answer for a request that is not waiting
// for an answer (unknown, answered already, or ended).
var ErrNotPending = errors.New("approve: the call is not waiting for an answer")

// ErrNotOffered is returned by Answer for an "always" answer the request
// does not offer: the policy would not remember it, and a person who
// chose it would be misled about what they approved.
var ErrNotOffered = errors.New("approve: the policy does not offer this answer for the call")

// Approver follows the confirmation requests of the fleet and answers
// them as one identity. Its methods are safe for concurrent use.
type Approver struct {
	nc   *nats.Conn
	cfg  Config
	log  *slog.Logger
	live *nats.Subscription // the confirmation subjects as they are sent
	// stopReading ends the reads of the stream after the one at start.
	stopReading context.CancelFunc

	mu sync.Mutex
	// byAnswerTo holds the requests pending and recent by their
	// AnswerTo: a request never takes another's place.
	byAnswerTo map[string]*Request
	pending    []*Request // oldest first
	recent     []*Request // newest first
	changed    chan struct{}
	// applied holds the envelope ids of the events applied lately, in
	// the order applied: each event comes twice (live and from the
	// stream), and a copy of one round's answer must not end the next.
	applied      map[string]struct{}
	appliedOrder []string

	stop chan struct{}
	done sync.WaitGroup // expire and the stream's catch-up

	presence presence
}

// presence is whether executors find the approver: the service is
// registered while it is present, and only then.
type presence struct {
	mu      sync.Mutex
	svc     micro.Service // nil while absent
	holds   int
	linger  *time.Timer // ends presence after the last hold, unless held again
	stopped bool
}

// withDefaults is cfg with its identity taken from the principal, and
// every unset setting at its default.
func (cfg Config) withDefaults() Config {
	if cfg.Principal != "" {
		// The bus vouches for the principal: it is who answers.
		cfg.Identity.ID = cfg.Principal
	}
	if cfg.Identity.Role == "" {
		cfg.Identity.Role = "approver"
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Version == "" {
		cfg.Version = "0.1.0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Validate reports what is missing in cfg.
func (cfg Config) Validate() error {
	if cfg.Identity.ID == "" && cfg.Principal == "" {
		return errors.New("approve: the approver needs an identity")
	}
	return nil
}

// Start follows the confirmation subjects as they are sent and in
// events.ConfirmStream from Window ago, and makes the approver present
// (registers the toolbus-approver service on nc), unless
// Config.PresentWhileHeld leaves that to Hold. It returns once the
// requests already in the stream are read and the server knows the
// service: an executor that asks whether an approver is present after
// Start returns finds this one. On failure, whatever it started is
// stopped again, in one place.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (_ *Approver, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &Approver{nc: nc, cfg: cfg, log: cfg.Logger, byAnswerTo: map[string]*Request{}, changed: make(chan struct{}), applied: map[string]struct{}{},
		stop: make(chan struct{})}
	defer func() {
		if err != nil {
			a.release()
		}
	}()
	next, err := a.follow(ctx, js)
	if err != nil {
		return nil, err
	}
	if !cfg.PresentWhileHeld {
		a.presence.mu.Lock()
		err := a.register(ctx)
		a.presence.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	reading, stopReading := context.WithCancel(context.Background())
	a.stopReading = stopReading
	a.done.Go(a.expire)
	a.done.Go(func() { a.catchUp(reading, js, next) })
	return a, nil
}

// follow takes the requests as they are sent, and from the stream: the
// stream gives those sent before this approver started; the live
// subscription does not wait for the stream's copy, which may lag (on a
// node catching up after a restart, or the copy made from the audit
// stream). Each event is applied once, whichever way comes first. It
// returns once the stream's backlog is read, with where to read on from
// (catchUp).
//
// It reads the stream by direct get, never with a consumer: in a fleet
// an approver lives in an account of its own (internal/auth), and a
// consumer's deliver subject would be its to choose in the account that
// holds the stream.
func (a *Approver) follow(ctx context.Context, js jetstream.JetStream) (next bus.Range, err error) {
	if a.live, err = a.nc.Subscribe(events.SubjectConfirmAll, func(m *nats.Msg) { a.apply(m.Subject, m.Data) }); err != nil {
		return next, fmt.Errorf("approve: follow the confirmation requests: %w", err)
	}
	// Until an event is read, the read starts at a time; then after the
	// last event read, so that a try after a failure, and catchUp, read
	// nothing twice and nothing from before the window.
	r := bus.Range{Since: time.Now().Add(-a.cfg.Window)}
	// A fleet's nodes take their ports before their cluster has made the
	// stream: an approver started with them waits for it, as a part
	// waits for the cluster's JetStream.
	err = bus.RetryWhile(ctx, streamMissing, func() error {
		last, err := bus.Read(ctx, js, events.ConfirmStream, r, a.applyStored)
		r = readOn(r, last)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("approve: read the confirmation requests in stream %s: %w", events.ConfirmStream, err)
	}
	return r, nil
}

// readOn is where a read of r that gave the events up to sequence last
// (0: none) goes on from.
func readOn(r bus.Range, last uint64) bus.Range {
	if last > 0 {
		r.From, r.Since = last+1, time.Time{}
	}
	return r
}

// applyStored applies one event read from the stream.
func (a *Approver) applyStored(m *bus.StoredMsg) error {
	a.apply(m.Subject, m.Data)
	return nil
}

// catchUp reads the stream on from next every catchUp, until ctx ends:
// what the live subscription missed (it was reconnecting, or the event
// reached the stream after the read at start had passed) comes from
// there.
func (a *Approver) catchUp(ctx context.Context, js jetstream.JetStream, next bus.Range) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(catchUp):
		}
		last, err := bus.Read(ctx, js, events.ConfirmStream, next, a.applyStored)
		next = readOn(next, last)
		if err != nil && ctx.Err() == nil {
			a.log.Debug("approve: reading the confirmation requests", "err", err)
		}
	}
}

// streamMissing says err is the stream of confirmations not being there
// yet (or not answering direct gets yet), or the cluster settling.
func streamMissing(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, bus.ErrNoStream) || bus.Transient(err)
}

// register makes the approver present: it registers the approver service
// and waits until the server has its subscriptions, since until then a
// presence check from another connection finds no approver and the call
// is denied. a.presence.mu is held.
func (a *Approver) register(ctx context.Context) error {
	svc, err := micro.AddService(a.nc, micro.Config{Name: events.ApproverService, Version: a.cfg.Version,
		Description: "toolbus approver " + a.cfg.Identity.ID, Metadata: map[string]string{"id": a.cfg.Identity.ID}})
	if err != nil {
		return fmt.Errorf("approve: register the %s service: %w", events.ApproverService, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if err := a.nc.FlushWithContext(ctx); err != nil {
		svc.Stop()
		return fmt.Errorf("approve: register the %s service: %w", events.ApproverService, err)
	}
	a.presence.svc = svc
	return nil
}

// deregister makes the approver absent, and waits (a little) until the
// server knows: until then an executor's presence check still finds it,
// and a call would wait for nobody. a.presence.mu is held.
func (a *Approver) deregister() {
	if a.presence.svc == nil {
		return
	}
	a.presence.svc.Stop()
	a.presence.svc = nil
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.nc.FlushWithContext(ctx); err != nil && !a.nc.IsClosed() {
		a.log.Debug("approve: the server may not know yet that the approver left", "err", err)
	}
}

// ErrStopped is returned by Hold on an approver that was stopped.
var ErrStopped = errors.New("approve: the approver has stopped")

// Hold makes the approver present until release is called: the console
// holds it while a page watches. Holds count: the approver stays present
// until every one is released, and then for Config.Linger more. Hold
// returns once the approver is present (an executor's presence check
// from any connection finds it); release may be called any number of
// times, also after Stop. On an approver present from Start to Stop
// (no Config.PresentWhileHeld) it changes nothing.
func (a *Approver) Hold(ctx context.Context) (release func(), err error) {
	p := &a.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, ErrStopped
	}
	if p.linger != nil {
		p.linger.Stop()
		p.linger = nil
	}
	if p.svc == nil {
		if err := a.register(ctx); err != nil {
			return nil, err
		}
	}
	p.holds++
	var once sync.Once
	return func() { once.Do(a.unhold) }, nil
}

// unhold releases one hold; the last one ends the approver's presence,
// after Config.Linger.
func (a *Approver) unhold() {
	p := &a.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holds--; p.holds > 0 || p.stopped || !a.cfg.PresentWhileHeld {
		return
	}
	if a.cfg.Linger <= 0 {
		a.deregister()
		return
	}
	var t *time.Timer
	t = time.AfterFunc(a.cfg.Linger, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.linger == t { // not held again since, nor stopped
			p.linger = nil
			a.deregister()
		}
	})
	p.linger = t
}

// Present reports whether the approver is present now: executors that
// ask find it.
func (a *Approver) Present() bool {
	a.presence.mu.Lock()
	defer a.presence.mu.Unlock()
	return a.presence.svc != nil
}

// release stops what a failed Start started.
func (a *Approver) release() {
	a.presence.mu.Lock()
	a.deregister()
	a.presence.mu.Unlock()
	if a.live != nil {
		a.live.Unsubscribe()
	}
}

// Identity is who this approver answers as.
func (a *Approver) Identity() events.Identity { return a.cfg.Identity }

// Keep is how many ended requests State.Recent holds at most.
func (a *Approver) Keep() int { return a.cfg.Keep }

// Stop leaves the fleet: the approver is no longer present and the
// stream no longer followed. Answers in flight fail; Hold fails from
// now on.
func (a *Approver) Stop() {
	select {
	case <-a.stop:
		return
	default:
	}
	close(a.stop)
	a.presence.mu.Lock()
	a.presence.stopped = true
	if a.presence.linger != nil {
		a.presence.linger.Stop()
		a.presence.linger = nil
	}
	a.deregister()
	a.presence.mu.Unlock()
	a.live.Unsubscribe()
	a.stopReading()
	a.done.Wait()
}

// Snapshot returns the queue and a channel that is closed when it changes
// next.
func (a *Approver) Snapshot() (State, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := State{Pending: make([]Request, len(a.pending)), Recent: make([]Request, len(a.recent))}
	for i, r := range a.pending {
		s.Pending[i] = r.clone()
	}
	for i, r := range a.recent {
		s.Recent[i] = r.clone()
	}
	return s, a.changed
}

// Connected reports whether the approver's connection to the bus is up:
// while it is down, no request reaches it and no answer leaves.
func (a *Approver) Connected() bool { return a.nc.IsConnected() }

// Answer sends an answer to the confirmation request whose AnswerTo is
// answerTo, as this approver, and returns the executor's acknowledgement: Accepted, or why
// not (the policy does not let this approver answer this call; it was
// answered first by another). ErrNotPending: nothing waits for an answer;
// ErrNotOffered: an "always" the request does not offer; an error
// wrapping events.ErrInvalid: the answer breaks the contract (a modify
// without an object, a message too long).
func (a *Approver) Answer(ctx context.Context, answerTo string, ans Answer) (*events.ConfirmAck, error) {
	a.mu.Lock()
	r, ok := a.byAnswerTo[answerTo]
	var invocationID string
	offered, pending := false, ok && r.Pending()
	if pending {
		invocationID = r.InvocationID
		offered = slices.ContainsFunc(r.Always, func(o events.AlwaysOption) bool { return o.Outcome == ans.Outcome })
	}
	a.mu.Unlock()
	if answerTo == "" || !pending {
		return nil, ErrNotPending
	}
	if ans.Outcome.Always() && !offered {
		return nil, fmt.Errorf("%w: %s", ErrNotOffered, ans.Outcome)
	}
	to := answerTo
	msg := &events.ConfirmAnswer{Header: events.Header{Sender: a.cfg.Identity}, InvocationID: invocationID,
		Outcome: ans.Outcome, Args: ans.Args, Message: ans.Message, Person: ans.Person, Who: cmp.Or(ans.Who, a.cfg.Who), Via: a.cfg.Via}
	data, err := events.Encode(msg)
	if err != nil {
		return nil, fmt.Errorf("approve: %w", err)
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, answerTimeout)
		defer cancel()
	}
	reply, err := a.nc.RequestWithContext(ctx, events.AnswerSubject(to, events.AnswerAsApprover, a.cfg.Principal), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, ErrNotPending
	}
	if err != nil {
		return nil, fmt.Errorf("approve: the executor did not acknowledge the answer: %w", err)
	}
	ack, err := events.Decode[events.ConfirmAck](reply.Data)
	if err != nil {
		return nil, fmt.Errorf("approve: the executor's acknowledgement: %w", err)
	}
	return ack, nil
}

// apply applies one event, from the stream or as it was sent. Each comes
// both ways: the second copy changes nothing.
func (a *Approver) apply(subject string, data []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := false
	switch subject {
	case events.SubjectConfirm:
		req, err := events.Decode[events.ConfirmRequest](data)
		if err != nil {
			a.log.Warn("approve: ignoring a confirmation request that does not decode", "err", err)
			return
		}
		if req.AnswerTo == "" || a.byAnswerTo[req.AnswerTo] != nil || !a.firstCopy(req.ID) {
			// A copy, or one that cannot be answered: every request
			// has a token of its own, and none takes another's place.
			return
		}
		// Each round of a call (arguments modified and judged again)
		// is a request of its own; an earlier round ended with the
		// answer that modified it, or ends at its deadline.
		r := &Request{ConfirmRequest: *req, Deadline: req.Time.Add(time.Duration(req.DeadlineMillis) * time.Millisecond)}
		a.byAnswerTo[req.AnswerTo] = r
		a.pending = append(a.pending, r)
		changed = true
	case events.SubjectConfirmAnswered:
		ans, err := events.Decode[events.ConfirmAnswer](data)
		if err != nil {
			a.log.Warn("approve: ignoring an answered event that does not decode", "err", err)
			return
		}
		if r := a.byAnswerTo[ans.AnswerTo]; r != nil && r.Pending() && r.InvocationID == ans.InvocationID && a.firstCopy(ans.ID) {
			if ans.Of > 1 && ans.Approval < ans.Of {
				// One of several people the call needs: it waits on.
				r.Approvals = append(r.Approvals, *ans)
				r.Revision++
				changed = true
				break
			}
			r.Answer = ans
			changed = a.end(r, ans.Time)
		}
	case events.SubjectConfirmRejected:
		rej, err := events.Decode[events.ConfirmRejected](data)
		if err != nil {
			a.log.Warn("approve: ignoring a rejected event that does not decode", "err", err)
			return
		}
		if r := a.byAnswerTo[rej.AnswerTo]; r != nil && r.InvocationID == rej.InvocationID && a.firstCopy(rej.ID) {
			r.Rejected = append(r.Rejected, *rej)
			r.Revision++
			changed = true
		}
	case events.SubjectConfirmClosed:
		cl, err := events.Decode[events.ConfirmClosed](data)
		if err != nil {
			a.log.Warn("approve: ignoring a closed event that does not decode", "err", err)
			return
		}
		if r := a.byAnswerTo[cl.AnswerTo]; r != nil && r.Pending() && r.InvocationID == cl.InvocationID && a.firstCopy(cl.ID) {
			r.Closed = cl
			changed = a.end(r, cl.Time)
		}
	}
	if changed {
		a.notify()
	}
}

// appliedMemory is how many events' ids an approver remembers: far more
// than come between an event and its copy.
const appliedMemory = 8192

// firstCopy reports whether the event with envelope id is new, and
// remembers it; a.mu is held.
func (a *Approver) firstCopy(id string) bool {
	if _, ok := a.applied[id]; ok {
		return false
	}
	a.applied[id] = struct{}{}
	a.appliedOrder = append(a.appliedOrder, id)
	if len(a.appliedOrder) > appliedMemory {
		delete(a.applied, a.appliedOrder[0])
		a.appliedOrder = a.appliedOrder[1:]
	}
	return true
}

// end moves r from pending to recent; a.mu is held.
func (a *Approver) end(r *Request, at time.Time) bool {
	r.Ended = at
	if i := slices.Index(a.pending, r); i >= 0 {
		a.pending = slices.Delete(a.pending, i, i+1)
	}
	a.recent = slices.Insert(a.recent, 0, r)
	if len(a.recent) > a.cfg.Keep {
		for _, old := range a.recent[a.cfg.Keep:] {
			delete(a.byAnswerTo, old.AnswerTo)
		}
		a.recent = a.recent[:a.cfg.Keep]
	}
	return true
}

// notify wakes every Snapshot waiter; a.mu is held.
func (a *Approver) notify() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// expire closes requests whose executor said nothing past their
// deadline (it crashed, or its closed event was lost), so no queue keeps
// a request nobody waits for.
func (a *Approver) expire() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case now := <-t.C:
			a.mu.Lock()
			changed := false
			for _, r := range slices.Clone(a.pending) {
				if r.DeadlineMillis > 0 && now.After(r.Deadline.Add(orphanGrace)) {
					r.Closed = &events.ConfirmClosed{InvocationID: r.InvocationID, ErrorType: events.ErrConfirmationTimeout,
						Reason: "the deadline passed and the executor said nothing more"}
					changed = a.end(r, now.UTC())
				}
			}
			if changed {
				a.notify()
			}
			a.mu.Unlock()
		}
	}
}
