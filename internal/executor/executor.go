// Package executor runs tool calls. It takes invocations from tool.invoke,
// resolves the tool, validates the arguments against the tool's schema,
// asks the policy, asks an approver when the policy says ASK_USER, runs the
// tool under a deadline and sends exactly one result. Every step is an
// event on the bus.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/counters"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/protect"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/telemetry"
	"github.com/toolbus/toolbus/internal/tool"
)

// Defaults, from seed 004 and the confirmation protocol.
const (
	DefaultTimeout        = 120 * time.Second
	DefaultMaxTimeout     = 10 * time.Minute
	DefaultConfirmTimeout = 5 * time.Minute
	DefaultMaxContent     = 40000
	// DefaultOutputStoreBytes and DefaultOutputStoreTTL bound the object
	// store of whole outputs: a full store refuses new outputs (their
	// results are capped and say so) and never cuts into old ones; an
	// output stays a week, long enough to look into last week's session.
	// 1 GiB matches the audit stream's default size.
	DefaultOutputStoreBytes = 1 << 30
	DefaultOutputStoreTTL   = 7 * 24 * time.Hour
	// DefaultApproveHint is Config.ApproveHint when none is given: the
	// executor does not know where its fleet's console is.
	DefaultApproveHint = "run `toolbus confirm`, or open the web console (`toolbus console`)"
	// DefaultPresenceCheck is Config.PresenceCheck when none is given.
	DefaultPresenceCheck = 10 * time.Second
	// DefaultMaxPendingPerCaller is how many calls of one principal may
	// wait for a person's answer at once on one executor.
	DefaultMaxPendingPerCaller = 16
)

// workerIdle is how long a worker goroutine waits for the next call
// before it exits.
const workerIdle = 30 * time.Second

// queueGroup is the queue all executors share on tool.invoke.
const queueGroup = "executors"

// Config configures an Executor.
type Config struct {
	Identity events.Identity
	// Observer hears what the pipeline does, for metrics; nil for none.
	Observer Observer
	// Traces is where the calls' spans go: OpenTelemetry's global
	// provider when nil (a no-op unless the process set one up,
	// internal/telemetry/export).
	Traces trace.TracerProvider
	// IdentitiesEnforced says the bus enforces a fleet's identities
	// (`toolbus init`): the principal on a binding subject is then
	// proven, and a caller naming another is refused. Without it every
	// sender is a claim (Identity.Proven is never set), whatever subject
	// it used: anyone may publish any. Set it exactly when the executor
	// itself connects with an identity of the fleet.
	IdentitiesEnforced bool
	// Tools are the built-in tools this executor hosts from the start;
	// Host adds other sets at run time (an MCP server's tools).
	Tools []tool.Tool
	// Policy is the policy in force at start. A set pushed to the policy
	// bucket replaces it before the first call, and so does every later
	// push or change of PolicyDir.
	Policy *policy.Policy
	// PolicyDir is a policy directory to follow; empty for none.
	PolicyDir string
	// PolicySigners are the keys whose signed revisions this executor
	// enforces when they are pushed; without them it enforces none, and
	// its readiness says so.
	PolicySigners *policy.Signers
	// Workspace is the root the tools are confined to, shown to the policy.
	Workspace string
	// WorkspaceName is what callers name the workspace by
	// (Invocation.Workspace); the catalogue lists it for each
	// workspace-bound tool this executor hosts. Defaults to Workspace.
	WorkspaceName string
	// Timeout is the deadline of a call (default 120 s); ToolTimeouts and
	// ServerTimeouts override it per tool and per MCP server; a call's own
	// timeoutMillis overrides all.
	Timeout time.Duration
	// MaxTimeout bounds the deadline a call may ask for itself (default
	// 10 minutes, as Claude Code bounds its Bash tool); the executor's own
	// settings above are not bound by it.
	MaxTimeout     time.Duration
	ToolTimeouts   map[string]time.Duration
	ServerTimeouts map[string]time.Duration
	// ConfirmTimeout is how long an approver may take (default 5 min).
	ConfirmTimeout time.Duration
	// ApproveHint says where a person approves this executor's calls,
	// as the end of a sentence: "open the console at http://…/ or run
	// `toolbus confirm`" (default DefaultApproveHint). A call denied
	// because nobody is there to ask, or nobody answered in time, says
	// it, and so does the message that tells a caller its call waits.
	ApproveHint string
	// PresenceCheck is how often a call that waits for an approver asks
	// whether one is still there (default 10 s): when none is, twice in a
	// row, the call is denied, as one that came with nobody there is.
	PresenceCheck time.Duration
	// MaxContent caps llmContent in characters (default 40,000); the whole
	// output goes to the object store.
	MaxContent int
	// MaxOutput is how many bytes of output a call keeps at most (default
	// tool.DefaultMaxOutput, 64 MiB); a tool that prints more keeps the
	// first MaxOutput bytes and says so. Memory does not depend on it:
	// tools spool large output to temporary files.
	MaxOutput int64
	// OutputStoreBytes and OutputStoreTTL configure the object store of
	// whole outputs (defaults 1 GiB and 7 days), also when it exists
	// already: the last executor to start sets them for the fleet.
	OutputStoreBytes int64
	OutputStoreTTL   time.Duration
	// IDTTL is how long an invocation id stays taken, fleet-wide
	// (default DefaultIDTTL); the last executor to start sets it.
	IDTTL time.Duration
	// LimitLease is how long a call's slot of a limit of calls at once
	// (or its place in the limit's line) stays taken without this
	// executor renewing it, which it does every third of it (default
	// DefaultLimitLease): how long an executor that died holds slots.
	LimitLease time.Duration
	// MaxPendingPerCaller bounds the calls of one principal waiting for
	// a person's answer on this executor (default
	// DefaultMaxPendingPerCaller): past it a call that would ask is
	// refused (events.ErrTooManyPending), so one caller cannot fill the
	// approvers' queues, or this executor's memory, with requests.
	MaxPendingPerCaller int
	// RecordRate and RecordBurst bound the bytes one principal may have
	// this executor record in the audit trail, a second and at once
	// (defaults DefaultRecordRate, DefaultRecordBurst; budget.go says
	// why). They apply where identities are enforced.
	RecordRate, RecordBurst int
	// RecordShare is the share of the audit stream's cap one principal
	// may have recorded at once, refilled at that share over the
	// stream's retention, across the fleet (default DefaultRecordShare;
	// budget.go says why). It applies where identities are enforced.
	RecordShare float64
	// TrailHighWater is the audit stream's fill (bytes over its cap)
	// from which the executor refuses every call it would record
	// (events.ErrAuditFull), and TrailCheckEvery how often it looks
	// (defaults DefaultTrailHighWater, DefaultTrailCheckEvery; trail.go
	// says why).
	TrailHighWater  float64
	TrailCheckEvery time.Duration
	// RecordWindow is how many of its records the executor may have sent
	// that the audit stream has not acknowledged yet (default
	// bus.RecordMaxPending). With the window full it leaves the queue
	// groups of new calls until half of it is acknowledged (intake.go).
	RecordWindow int
	// Hooks are the user's hooks (internal/hooks: Claude Code's and Gemini
	// CLI's, read from their settings files): run around every call
	// whose tool they match, after the policy's decision and before any
	// approver is asked, and after the tool ran. A pre hook can block a
	// call or have a person asked about it; it never makes a call more
	// allowed than the policy did. Nil for none.
	Hooks *hooks.Set
	// Protected are the files the executor runs as code of the settings'
	// owner (internal/protect: the hooks', the discovery command's, the
	// stdio MCP servers'); the policy is shown which of a call's paths
	// are among them (input.protected). SetProtected replaces them. Nil
	// for none.
	Protected *protect.Set
	// Starter starts the processes of the executor's own parts (the
	// command hooks): the node's one starter, which confines every
	// process toolbus starts. Command hooks need one; it stays the
	// caller's to close.
	Starter *proctree.Starter
	Logger  *slog.Logger
}

// Executor runs the invocations of the tools it hosts. Stop it with Stop.
// Its state is grouped by concern, each group in the file of its own
// concern: judging (decisions.go), hosting (hosting.go), outputStore
// (output.go) and liveness (claims.go).
type Executor struct {
	cfg      Config
	observer Observer
	tracer   trace.Tracer
	nc       *nats.Conn
	js       jetstream.JetStream
	id       events.Identity
	log      *slog.Logger
	home     string
	catalog  *catalog.Replica

	judging
	hosting
	outputStore
	liveness

	subs []*nats.Subscription
	// intake is the queue groups of new calls (intake.go).
	intake intake
	// beforeAccept, set by tests only, holds an invocation up where load
	// would: before the executor has looked at it.
	beforeAccept atomic.Pointer[func(*nats.Msg)]
	svc          micro.Service
	// rec records the requests this executor takes and the events of
	// its calls in the audit stream, and makes sure they are stored.
	rec *bus.Recorder

	invokerOnce sync.Once
	invoker     *invoke.Client // runs the calls of batches

	// toolRuns counts tool runs still going, including those whose call
	// ended without them because they ignored their deadline.
	toolRuns atomic.Int64

	// recent is the callers' keys of the calls this executor accepted
	// lately, and ids the fleet's bucket of retry tickets (ids.go).
	recent *recentIDs
	ids    *takenIDs
	// counts counts the calls of sessions, for the loop guards
	// (sessions.go), and the rates the policy limits (limits.go); exact
	// the rates it asks to be exact, and slots holds the slots of the
	// limits of calls at once.
	counts *counters.Fleet
	exact  *counters.Exact
	slots  *counters.Slots
	// budget bounds what each principal has recorded (budget.go); nil
	// where identities are not enforced.
	budget *recordBudget
	// trail is how full the audit stream is (trail.go).
	trail trail
	// callerRecords holds a slot for each caller's record being stored
	// (callerrecord.go).
	callerRecords chan struct{}

	mu      sync.Mutex
	running map[string]*call // by callKey
	// asking counts, by principal, the calls waiting for a person's
	// answer (confirm), bounded by Config.MaxPendingPerCaller.
	asking   map[string]int
	batches  map[string]batchRun // batches coordinated here, by id
	wg       sync.WaitGroup      // every call and background goroutine
	workers  *workers            // the goroutines calls and tool runs run on
	stopping chan struct{}
}

// withDefaults is cfg with every unset limit at its default.
func (cfg Config) withDefaults() Config {
	if cfg.Identity.Role == "" {
		// The registry watches what registers as an executor.
		cfg.Identity.Role = "executor"
	}
	setDefault(&cfg.Timeout, DefaultTimeout)
	setDefault(&cfg.MaxTimeout, DefaultMaxTimeout)
	setDefault(&cfg.ConfirmTimeout, DefaultConfirmTimeout)
	if cfg.ApproveHint == "" {
		cfg.ApproveHint = DefaultApproveHint
	}
	setDefault(&cfg.PresenceCheck, DefaultPresenceCheck)
	setDefault(&cfg.MaxContent, DefaultMaxContent)
	setDefault(&cfg.MaxOutput, tool.DefaultMaxOutput)
	setDefault(&cfg.OutputStoreBytes, DefaultOutputStoreBytes)
	setDefault(&cfg.OutputStoreTTL, DefaultOutputStoreTTL)
	setDefault(&cfg.IDTTL, DefaultIDTTL)
	setDefault(&cfg.LimitLease, DefaultLimitLease)
	setDefault(&cfg.MaxPendingPerCaller, DefaultMaxPendingPerCaller)
	setDefault(&cfg.RecordRate, DefaultRecordRate)
	setDefault(&cfg.RecordBurst, DefaultRecordBurst)
	setDefault(&cfg.TrailCheckEvery, DefaultTrailCheckEvery)
	if cfg.RecordShare <= 0 {
		cfg.RecordShare = DefaultRecordShare
	}
	if cfg.TrailHighWater <= 0 {
		cfg.TrailHighWater = DefaultTrailHighWater
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	return cfg
}

// setDefault sets *v to def when it is not positive.
func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Validate reports what is missing or wrong in cfg.
func (cfg Config) Validate() error {
	if cfg.Identity.ID == "" {
		return errors.New("executor: no identity given")
	}
	if cfg.Policy == nil {
		return errors.New("executor: no policy given")
	}
	if cfg.RecordShare > 1 || cfg.TrailHighWater > 1 {
		return fmt.Errorf("executor: RecordShare (%g) and TrailHighWater (%g) are shares of the audit stream's cap, at most 1", cfg.RecordShare, cfg.TrailHighWater)
	}
	if !cfg.Hooks.Empty() {
		if err := cfg.Hooks.Validate(); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	return nil
}

// Start loads the catalogue and the allowlist, registers the hosted tools
// and starts taking invocations. On failure, what it started is stopped,
// in one place.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (_ *Executor, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	home, _ := os.UserHomeDir()
	e := &Executor{cfg: cfg, nc: nc, js: js, id: cfg.Identity, log: cfg.Logger, home: home, observer: cfg.Observer, tracer: telemetry.TracerOf(cfg.Traces),
		hosting: hosting{sets: make(map[string]*toolSet)},
		outputStore: outputStore{storing: semaphore.NewWeighted(storeInFlight), reads: make(chan struct{}, outputReadsAtOnce),
			readers: map[string]int{}, readsByToken: map[string]*outputRead{}},
		running: make(map[string]*call), batches: make(map[string]batchRun), asking: make(map[string]int),
		workers: newWorkers(workerIdle), stopping: make(chan struct{}), callerRecords: make(chan struct{}, callerRecordsAtOnce), recent: newRecentIDs()}
	if cfg.IdentitiesEnforced {
		e.budget = newRecordBudget(cfg.RecordRate, cfg.RecordBurst)
	}
	defer func() {
		switch {
		case err == nil:
		case len(e.subs) > 0 || len(e.intake.specs) > 0:
			e.Stop(context.Background()) // it may have taken calls, and is listed
		default:
			e.closeFollowers()
		}
	}()
	if err := e.hostBuiltins(); err != nil { // fills the lookup table
		return nil, err
	}
	if !cfg.Hooks.Empty() {
		if cfg.Hooks.Commands() && cfg.Starter == nil {
			return nil, fmt.Errorf("executor: command hooks and no starter to confine them: %w", proctree.ErrNoConfinement)
		}
		if e.hookRuns, err = hooks.NewRunner(cfg.Workspace, cfg.Starter); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		e.hooks = cfg.Hooks
	}
	e.protected.Store(cfg.Protected)
	e.SetPolicy(cfg.Policy)
	if err := e.follow(ctx); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	// Listen before the tools are listed: a tool in the catalogue must be
	// callable, also when another executor forwards a call to this one.
	if err := e.subscribe(); err != nil {
		return nil, err
	}
	if err := e.registerBuiltins(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// follow opens what the executor keeps and follows on the bus: the output
// store, the allowlist, the catalogue, the recorder of its events and the
// policy pushed to the fleet (closeFollowers closes them).
func (e *Executor) follow(ctx context.Context) (err error) {
	// Every call is recorded: with no audit stream, none is taken.
	if err := bus.AwaitAudit(ctx, e.js, e.log); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	// nats.go makes an object store's stream with DiscardNew: a full store
	// refuses the chunks of a new object (and Put removes those it took)
	// instead of dropping the oldest chunks, which would corrupt objects
	// stored before. An existing bucket gets the limits on update.
	if _, err = bus.EnsureObjectStore(ctx, e.js, jetstream.ObjectStoreConfig{
		Bucket:      events.OutputBucket,
		Description: "toolbus: whole outputs of calls whose result was capped",
		Storage:     jetstream.FileStorage,
		TTL:         e.cfg.OutputStoreTTL,
		MaxBytes:    e.cfg.OutputStoreBytes,
	}); err != nil {
		return fmt.Errorf("output store: %w", err)
	}
	if e.outputs, err = e.openBulk(ctx); err != nil {
		return fmt.Errorf("output store: %w", err)
	}
	if e.ids, err = openTakenIDs(ctx, e.js, e.cfg.IDTTL); err != nil {
		return err
	}
	if e.slots, err = counters.OpenSlots(ctx, e.js, e.id.ID, e.cfg.LimitLease, e.log); err != nil {
		return err
	}
	if e.exact, err = counters.OpenExact(ctx, e.nc, e.js, e.log); err != nil {
		return err
	}
	if e.counts, err = counters.Open(e.nc, counters.Config{Executor: e.id.ID, Logger: e.log}); err != nil {
		return err
	}
	if e.allowlist, err = openAllowlist(ctx, e.js, e.log); err != nil {
		return err
	}
	if e.catalog, err = catalog.Follow(ctx, e.js, e.log); err != nil {
		return err
	}
	e.trail.log = e.log
	full := func() { e.trail.setFull("the stream refused a record for want of room", e.trail.Fill()) }
	if e.rec, err = bus.NewRecorder(e.nc, e.log, bus.WhenFull(full), bus.WindowOf(e.cfg.RecordWindow)); err != nil {
		return err
	}
	e.watchTrail(ctx)
	// The policy bucket republishes its changes, for those that follow
	// it without a consumer; a bucket made before is brought to that.
	if err := policy.EnsureBucket(ctx, e.js); err != nil {
		return err
	}
	e.shadow = newShadowing(e, shadowQueue)
	e.watcher, err = policy.Watch(ctx, e.js, policy.WatchConfig{Dir: e.cfg.PolicyDir, Own: e.cfg.Policy, Signers: e.cfg.PolicySigners,
		Apply: e.enforce, Shadow: e.shadow.set, Report: e.reportPolicy, Logger: e.log})
	return err
}

func (e *Executor) subscribe() error {
	handlers := []struct {
		subject, queue string
		handle         nats.MsgHandler
	}{
		{events.InvokeSubject("*"), queueGroup, func(m *nats.Msg) { e.take(m, false) }},
		// The calls of the facades' clients. The batch subjects match
		// too, and are the batch subscription's: no principal is named
		// "batch" (events.ValidPrincipal). A queue group of its own: the
		// server picks one member of a group among all the group's
		// subscriptions a message matches, which would hand a batch to
		// this one, which drops it, as often as not.
		{events.InvokeSubject(events.ClientWildcard), queueGroup + "-clients", func(m *nats.Msg) {
			if _, batch := strings.CutPrefix(m.Subject, events.RequestPrefix+events.SubjectInvokeBatch+"."); !batch {
				e.take(m, false)
			}
		}},
		{events.InvokeBatchSubject("*"), queueGroup, e.acceptBatch},
		{events.ExecSubject(e.id.ID), "", func(m *nats.Msg) { e.take(m, true) }},
		{events.Request(events.SubjectCancel), "", e.handleCancel},
		{events.CancelSubject("*"), "", e.handleCancel},
		{events.CancelSubject(events.ClientWildcard), "", e.handleCancel},
		{events.ClaimAllSubject, "", e.handleClaim},
		{events.SubjectCatalogChanged, "", e.handleCatalogChanged},
		{events.ClaimSubject(e.id.ID), "", e.handleClaim},
		{events.OutputSubject("*"), queueGroup, e.handleOutputRead},
		{events.OutputSubject(events.ClientWildcard), queueGroup, e.handleOutputRead},
		{events.OutputAnswerSubject("*", e.id.ID), "", e.handleOutputAnswer},
		{events.OutputAnswerSubject(events.ClientWildcard, e.id.ID), "", e.handleOutputAnswer},
		{events.CallerRecordSubject("*"), queueGroup, e.handleCallerRecord},
		{events.CallerRecordSubject(events.ClientWildcard), queueGroup, e.handleCallerRecord},
		{events.RevokeSubject("*"), queueGroup, e.handleRevoke},
	}
	e.intake.nc = e.nc
	for _, h := range handlers {
		if h.queue != "" && (h.subject == events.InvokeSubject("*") || h.subject == events.InvokeSubject(events.ClientWildcard) || h.subject == events.InvokeBatchSubject("*")) {
			// New calls: the intake, left while the trail lags (intake.go).
			if err := e.intake.add(queueSub{h.subject, h.queue, h.handle}); err != nil {
				return err
			}
			continue
		}
		sub, err := e.nc.QueueSubscribe(h.subject, h.queue, h.handle)
		if err != nil {
			return fmt.Errorf("executor: subscribe %s: %w", h.subject, err)
		}
		// Calls run on their own goroutines; the subscription only hands
		// them out, so its pending limits can stay generous.
		_ = sub.SetPendingLimits(1<<20, 1<<30)
		e.subs = append(e.subs, sub)
		if h.subject == events.ExecSubject(e.id.ID) {
			e.invokeSubs = append(e.invokeSubs, sub)
		}
	}
	svc, err := micro.AddService(e.nc, micro.Config{Name: events.ExecutorService, Version: registry.ServiceVersion,
		Description: "toolbus executor", Metadata: map[string]string{"id": e.id.ID}})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.svc = svc
	return nil
}

// SetPolicy puts p in force for every call that reaches the policy step
// from now on.
func (e *Executor) SetPolicy(p *policy.Policy) { e.enforce(policy.Only(p)) }

// enforce puts en in force for every call that starts from now on.
func (e *Executor) enforce(en *policy.Enforced) {
	e.enforced.Store(en)
	e.observer.PolicyRevision(en.Stable.Revision())
}

// policyFor is the policy that decides a call of principal, which starts
// now.
func (e *Executor) policyFor(principal string) *policy.Policy {
	return e.enforced.Load().For(principal, e.workspaceName())
}

// Observer hears what the pipeline does, for metrics (internal/metrics).
// Its methods are called on the invoke path: they must be cheap, and
// safe for concurrent use.
type Observer interface {
	// Stage reports the time a call spent in a stage: admit, validate,
	// policy, confirm (waiting for an answer), execute or record (trace.go).
	Stage(stage string, d time.Duration)
	// Finished reports a call's terminal result: its tool, the policy's
	// last verdict ("" when the call ended before the policy was asked)
	// and its outcome, OK or the error type.
	Finished(tool string, verdict events.Verdict, outcome string)
	// PolicyRevision reports the policy revision put in force.
	PolicyRevision(revision string)
}

// noObserver is the Observer of an executor given none.
type noObserver struct{}

func (noObserver) Stage(string, time.Duration)             {}
func (noObserver) Finished(string, events.Verdict, string) {}
func (noObserver) PolicyRevision(string)                   {}

// Policy is the policy in force.
func (e *Executor) Policy() *policy.Policy { return e.enforced.Load().Stable }

// Enforced is what is in force: the policy, and during a staged rollout
// the revision rolled out and its share.
func (e *Executor) Enforced() *policy.Enforced { return e.enforced.Load() }

// ID is the executor's id: in the catalogue's hosts, on its subjects and
// in its MCP servers' status.
func (e *Executor) ID() string { return e.id.ID }

// Catalog is the executor's view of the catalogue.
func (e *Executor) Catalog() *catalog.Catalog { return e.catalog.Catalog() }

// Hooks is the user's hooks the executor runs, nil for none.
func (e *Executor) Hooks() *hooks.Set { return e.hooks }

// SetProtected replaces the protected paths (Config.Protected), for the
// calls judged from now on: an MCP server's command changed, say. Safe
// for concurrent use.
func (e *Executor) SetProtected(s *protect.Set) { e.protected.Store(s) }

// Stop stops taking invocations, gives running calls until ctx ends to
// finish, then cancels them (their callers get CANCELLED), and releases
// everything the executor started.
func (e *Executor) Stop(ctx context.Context) error {
	// Under mu, so that no call is admitted (wg.Add) after this point:
	// accept checks stopping under the same lock.
	e.mu.Lock()
	select {
	case <-e.stopping:
		e.mu.Unlock()
		return nil
	default:
		close(e.stopping)
	}
	e.mu.Unlock()
	// A Host in progress finishes first; later ones see stopping.
	e.hostMu.Lock()
	e.hostMu.Unlock()
	var errs []error
	errs = append(errs, e.intake.stop())
	for _, s := range e.subs {
		if err := s.Drain(); err != nil {
			errs = append(errs, err)
		}
	}
	if e.svc != nil {
		errs = append(errs, e.svc.Stop())
	}
	e.leave()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		e.mu.Lock()
		for _, c := range e.running {
			c.interrupt(errShutdown)
		}
		e.mu.Unlock()
		<-done
	}
	// Idle workers exit now; a worker still running a tool that ignored
	// its deadline exits when the tool returns, and is not waited for.
	e.workers.stop(e.toolRuns.Load() == 0)
	if e.invoker != nil {
		errs = append(errs, e.invoker.Close())
	}
	e.closeFollowers()
	return errors.Join(errs...)
}

// leave takes this executor off the hosts of its tools, once it takes
// no more calls: a tool it alone hosted leaves the catalogue, and comes
// back when an executor hosts it again (this one, restarted). Calls for
// a workspace only this executor had then fail at once, saying so,
// instead of being sent to it. A registry that is not there, or slow,
// is not waited for long: the executor is stopping either way.
func (e *Executor) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := &events.RemoveRequest{Header: events.Header{Sender: e.id}, Provider: e.id.ID}
	if _, err := registry.NewClient(e.nc, e.id).Remove(ctx, req); err != nil && !errors.Is(err, nats.ErrNoResponders) {
		e.log.Warn("leaving: the registry did not take this executor off its tools' hosts", "err", err)
	}
}

// openBulk opens the executor's second connection, for whole outputs, and
// the output store over it. Megabytes of an output queued on the
// executor's own connection would hold up every heartbeat, claim and
// result behind them: with 64 outputs of 20 MB stored at once, a
// heartbeat took 3 to 7 seconds to go out, and callers took running calls
// for lost. The connection is made as the executor's own was, with its
// options (server, credentials).
func (e *Executor) openBulk(ctx context.Context) (jetstream.ObjectStore, error) {
	opts := e.nc.Opts
	opts.Name += " (outputs)"
	// Not its handlers: they are the first connection's, and other
	// parts' too (nats.go's micro services stop every service of a
	// connection from its closed handler, so closing this copy stopped
	// the registry and approver that share the first connection in
	// `toolbus up`).
	opts.ClosedCB, opts.DisconnectedErrCB, opts.ReconnectedCB, opts.AsyncErrorCB = nil, nil, nil, nil
	opts.DisconnectedCB, opts.ConnectedCB, opts.DiscoveredServersCB, opts.LameDuckModeHandler = nil, nil, nil, nil
	bulk, err := opts.Connect()
	if err != nil {
		return nil, err
	}
	e.bulk = bulk
	js, err := jetstream.New(bulk)
	if err != nil {
		return nil, err
	}
	return js.ObjectStore(ctx, events.OutputBucket)
}

func (e *Executor) closeFollowers() {
	if e.slots != nil {
		e.slots.Close()
	}
	if e.bulk != nil {
		e.bulk.Close()
	}
	if e.watcher != nil {
		e.watcher.Stop()
	}
	if e.shadow != nil {
		e.shadow.close() // its last counts go to the recorder, closed below
	}
	if e.catalog != nil {
		e.catalog.Close()
	}
	if e.allowlist != nil {
		e.allowlist.close()
	}
	if e.counts != nil {
		e.counts.Close()
	}
	e.stopTrail()
	if e.rec != nil {
		// Every call has ended: what they recorded gets a few seconds
		// more to be stored (a stream leader being elected).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := e.rec.Close(ctx); err != nil {
			e.log.Error("stopping with records the audit stream did not acknowledge", "err", err)
		}
		cancel()
	}
}

var errShutdown = errors.New("the executor is shutting down")

// anyPrincipal stands for the sender of a cancel that may cancel any
// call; it is no principal's token (those never hold a space).
const anyPrincipal = "any call"

// mayCancel says a cancel from canceller reaches a call of owner.
func mayCancel(canceller, owner string) bool {
	return canceller == anyPrincipal || canceller == owner
}

// abandonKey is how a call given up before it came is remembered: with
// who gave it up, so that nobody else's call of that id is refused, and
// its attempt, so that a retry is not refused for its first attempt's
// give-up.
func abandonKey(canceller, id string, attempt int) string {
	return canceller + "\x00" + id + "\x00" + strconv.Itoa(events.AttemptOf(attempt))
}

// reportPolicy publishes what became of a policy set here.
func (e *Executor) reportPolicy(status, revision, source string, err error) {
	ev := &events.PolicyEvent{Header: events.Header{Sender: e.id}, Status: status, Revision: revision, Source: source}
	if err != nil {
		ev.Error = err.Error()
	}
	e.publish(events.SubjectPolicyPrefix+status, ev)
}

func (e *Executor) handleCancel(m *nats.Msg) {
	req, err := events.Decode[events.CancelRequest](m.Data)
	if err != nil {
		e.log.Warn("ignoring a malformed cancel request", "err", err)
		return
	}
	// A cancel on SubjectCancel itself may cancel any call: only admins
	// and executors may send one in a fleet. One on CancelSubject only
	// the calls of the principal it names.
	canceller := anyPrincipal
	if m.Subject != events.Request(events.SubjectCancel) {
		canceller = e.principalOf(m, false)
	}
	e.mu.Lock()
	var c *call
	if canceller == anyPrincipal {
		c = e.runningByID(req.InvocationID)
	} else {
		c = e.running[callKey(canceller, req.InvocationID)]
	}
	if c != nil && req.GaveUp && c.attempt != events.AttemptOf(req.Attempt) {
		// A give-up of another attempt of the call (the first, lost,
		// while its retry runs here) is not this one's.
		c = nil
	}
	var stopBatch context.CancelCauseFunc
	if b, ok := e.batches[req.InvocationID]; ok && mayCancel(canceller, b.principal) {
		stopBatch = b.stop
	}
	finished := c == nil && stopBatch == nil && e.finished.has(req.InvocationID)
	if req.GaveUp && c == nil && stopBatch == nil && !finished {
		// The call may still be on its way here: it will be refused.
		e.abandoned.add(abandonKey(canceller, req.InvocationID, req.Attempt))
	}
	e.mu.Unlock()
	reason := req.Reason
	if reason == "" {
		reason = "cancelled by " + req.Sender.ID
	}
	answer := events.ClaimUnknown
	switch {
	case c != nil:
		answer = "cancelled"
		if req.GaveUp {
			// Either the result is marked Late, or it is on its way
			// already and is the call's terminal result: the caller
			// hears which, and publishes a result of its own only in
			// the first case.
			answer = events.GaveUpLate
			if !c.abandon() {
				answer = events.GaveUpSent
			}
		}
		c.interrupt(errors.New(reason))
	case stopBatch != nil:
		answer = "cancelled"
		if req.GaveUp {
			// The batch stops, and its calls' results, late ones
			// included, are recorded from here (runBatch).
			answer = events.GaveUpSent
			stopBatch(errBatchAbandoned)
		}
	case finished:
		answer = events.GaveUpSent
		if kept, ok := e.sent.get(req.InvocationID); ok && req.GaveUp && mayCancel(canceller, kept.principal) {
			// Its result may have been lost on the way (a bus node
			// went with it): sent again before the answer, the
			// caller takes it instead of giving up.
			if err := e.nc.Publish(kept.reply, kept.data); err != nil {
				e.log.Warn("result not sent again", "invocation", req.InvocationID, "err", err)
			}
		}
	}
	if answer != events.ClaimUnknown {
		// The executor that acted on it, naming the call it reached.
		var id string
		if c != nil {
			id = c.id
		}
		e.recordRequest(m, id)
	}
	if m.Reply != "" {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(events.ExecutorHeader, e.id.ID)
		reply.Data = []byte(answer)
		_ = m.RespondMsg(reply)
	}
}

// recordRequest records a request this executor took (events.Request),
// and returns the stream's answer to wait on. A record that could not be
// sent at all is one the stream refused.
func (e *Executor) recordRequest(m *nats.Msg, id string) bus.Receipt {
	rc, err := e.rec.RecordRequest(m, id)
	if err != nil {
		e.log.Error("request not recorded", "subject", m.Subject, "err", err)
		return bus.Refused(err)
	}
	return rc
}

// note publishes an event of a call's way, without waiting to hear that
// the audit stream has it: a decision, a step. What the audit trail must
// hold of every call across the loss of a node, the invocation and its
// terminal result (which carries the verdict acted on), is recorded; an
// acknowledgement for these too costs throughput (measured, 64 callers:
// 19,700 calls/s with every event acknowledged, 21,600–22,400 with these
// two not; 25,000–28,000 with no acknowledgement at all).
func (e *Executor) note(subject string, ev events.Envelope) {
	data, err := events.Encode(ev)
	if err == nil {
		err = e.nc.Publish(subject, data)
	}
	if err != nil {
		e.log.Error("event not published", "subject", subject, "err", err)
	}
}

// publish records an event, logging rather than failing the call when the
// bus refuses it.
func (e *Executor) publish(subject string, ev events.Envelope) {
	data, err := events.Encode(ev)
	if err == nil {
		err = e.rec.RecordEncoded(subject, data)
	}
	if err != nil {
		e.log.Error("event not published", "subject", subject, "err", err)
	}
}
