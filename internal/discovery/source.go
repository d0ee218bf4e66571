package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/tool"
)

// HostFunc hosts tools as the executor's whole discovered set, in place
// of the set it hosted before (none: the discovered tools are dropped),
// as one change of the catalogue. It returns the catalogue names the
// tools got and warnings about tools that were not hosted. The
// executor's Host is one; cmd wires it.
type HostFunc func(ctx context.Context, tools []tool.Tool) (names, warnings []string, err error)

// Options configure a Source.
type Options struct {
	Settings Settings
	// Workspace is the directory both commands run in: the root of the
	// hosting executor's workspace.
	Workspace string
	// Identity is the hosting executor's: the status entry and the
	// discovery subject are its.
	Identity events.Identity
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Host     HostFunc
	// Reserved, when set, names the tools the executor hosts otherwise
	// (its built-ins): a discovered tool of such a name is left out with
	// a warning, so that a project's command cannot stand in for
	// read_file under its name.
	Reserved func(name string) bool
	// Environ is the environment the commands' is filtered from (see
	// FilterEnv); nil means os.Environ().
	Environ []string
	// Starter starts both commands and every process they start: the
	// node's one starter, whose sandbox keeps the project's code, run
	// with a model's arguments, from toolbus's secrets and ports. It
	// stays the caller's to close; nil starts nothing
	// (proctree.ErrNoConfinement).
	Starter *proctree.Starter
	Logger  *slog.Logger
	// Now is the clock of the cache and the idle expiry; nil means
	// time.Now.
	Now func() time.Time
}

// Source runs an executor's discovery command and hosts what it finds on
// the executor (seed 000 discoverAndRegisterToolsFromCommand), with the
// cache of seed 000's CachedToolRegistry and the idle expiry of its
// ManagedToolRegistry. It discovers when it starts, when its settings
// change, every Settings.Interval, and when asked on the bus
// (events.DiscoverSubject). A discovery that fails changes no tool: the
// set of the last one that succeeded stays hosted. One discovery runs at
// a time. Stop ends it; its methods are safe for concurrent use.
type Source struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	environ []string
	kv      jetstream.KeyValue
	sub     *nats.Subscription
	starter *proctree.Starter

	// runMu orders discoveries, expiries and settings changes: each
	// decides from the hosted set and replaces it.
	runMu sync.Mutex

	mu       sync.Mutex // guards what follows
	settings Settings
	last     *found  // the last discovery that succeeded
	hosted   []*Tool // the tools hosted now
	status   events.DiscoveryStatus
	stopped  bool

	wake chan struct{} // settings changed: the loop re-reads them
	stop chan struct{}
	wg   sync.WaitGroup
}

// Result is what one discovery did.
type Result struct {
	// Names are the catalogue names of the discovered tools now hosted.
	Names []string
	// Warnings are declarations that were skipped and tools the registry
	// or the executor refused, and why.
	Warnings []string
	// Cached says the declarations came from the cache, found at
	// CachedAt, without running the command.
	Cached   bool
	CachedAt time.Time
}

// ErrNotConfigured is returned by Discover when the settings name no
// discovery command.
var ErrNotConfigured = errors.New("no tools.discoveryCommand is configured")

// Start checks opts, runs the first discovery and hosts its tools, and
// starts following the interval, the idle expiry and the bus's discovery
// requests. A failed first discovery is no error of Start: it is logged
// and in the status, and the next one (by the interval, a settings change
// or a request) may succeed. Settings that do not validate are.
func Start(ctx context.Context, opts Options) (*Source, error) {
	if opts.Host == nil || opts.Conn == nil || opts.JS == nil || opts.Identity.ID == "" {
		return nil, errors.New("discovery: Options needs Host, Conn, JS and Identity")
	}
	if err := opts.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	s := &Source{opts: opts, log: opts.Logger, now: opts.Now, environ: opts.Environ, starter: opts.Starter,
		settings: opts.Settings, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.starter == nil {
		s.starter = new(proctree.Starter)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.environ == nil {
		s.environ = os.Environ()
	}
	s.status = events.DiscoveryStatus{Executor: opts.Identity.ID, Workspace: opts.Workspace, State: events.DiscoveryPending}
	var err error
	s.kv, err = bus.EnsureKeyValue(ctx, opts.JS, jetstream.KeyValueConfig{
		Bucket:      events.DiscoveryStatusBucket,
		Description: "toolbus: the state of every executor's discovery command",
		TTL:         events.DiscoveryStatusTTL,
		History:     1,
		Storage:     jetstream.MemoryStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("discovery: status bucket: %w", err)
	}
	if s.sub, err = opts.Conn.Subscribe(events.DiscoverSubject(opts.Identity.ID), s.handleDiscover); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if opts.Settings.Configured() {
		if _, err := s.Discover(ctx, true); err != nil {
			s.log.Error("tool discovery failed; no discovered tools until a discovery succeeds", "command", opts.Settings.DiscoveryCommand, "err", err)
		}
	}
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

// Discover runs the discovery command, or takes the cached result when
// it is younger than Settings.CacheTTL and force is not set, and hosts the
// tools found in place of the discovered set. When the discovery fails,
// the set stays as it was and the error says why.
func (s *Source) Discover(ctx context.Context, force bool) (*Result, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.mu.Lock()
	settings, last, stopped := s.settings, s.last, s.stopped
	s.mu.Unlock()
	if stopped {
		return nil, errors.New("discovery: stopped")
	}
	if !settings.Configured() {
		return nil, ErrNotConfigured
	}
	env := FilterEnv(s.environ, settings.CallEnv)
	key := settings.DiscoveryCommand + "\x00" + strings.Join(env, "\x00")
	res := &Result{}
	f := last
	if force || f == nil || f.key != key || settings.CacheTTL <= 0 || s.now().Sub(f.at) >= settings.CacheTTL {
		var err error
		if f, err = s.run(ctx, settings, env, key); err != nil {
			return nil, err
		}
	} else {
		res.Cached, res.CachedAt = true, f.at
	}
	names, warnings, err := s.host(ctx, settings, env, f)
	res.Names, res.Warnings = names, warnings
	return res, err
}

// run runs the discovery command once and parses its output; the status
// says how it went.
func (s *Source) run(ctx context.Context, settings Settings, env []string, key string) (*found, error) {
	ctx, cancel := context.WithTimeout(ctx, DiscoveryTimeout)
	defer cancel()
	started := s.now()
	f, err := discover(ctx, s.starter, settings.DiscoveryCommand, s.opts.Workspace, env)
	s.mu.Lock()
	s.status.Runs++
	s.status.LastRun = &started
	s.status.DiscoveryCommand, s.status.CallCommand = settings.DiscoveryCommand, settings.CallCommand
	if err != nil {
		s.status.State, s.status.Error = events.DiscoveryFailed, err.Error()
		st := s.status
		s.mu.Unlock()
		s.publish(&st)
		return nil, err
	}
	f.at, f.key = started, key
	s.last = f
	s.mu.Unlock()
	return f, nil
}

// host makes the tools of f and hosts them as the discovered set, all but
// those reserved.
func (s *Source) host(ctx context.Context, settings Settings, env []string, f *found) (names, warnings []string, err error) {
	caller, err := NewCaller(settings.CallCommand, s.opts.Workspace, env, s.starter)
	if err != nil {
		return nil, nil, err
	}
	caller.now = s.now
	warnings = slices.Clone(f.warnings)
	tools := make([]*Tool, 0, len(f.specs))
	for _, spec := range f.specs {
		if s.opts.Reserved != nil && s.opts.Reserved(spec.Name) {
			warnings = append(warnings, fmt.Sprintf("tool %q: the executor hosts a tool of that name already; skipped", spec.Name))
			continue
		}
		tools = append(tools, caller.NewTool(spec, settings.DiscoveryCommand))
	}
	names, hostWarnings, err := s.opts.Host(ctx, asTools(tools))
	warnings = append(warnings, hostWarnings...)
	s.mu.Lock()
	s.hosted = tools
	s.status.State, s.status.Error = events.DiscoveryOK, ""
	if err != nil {
		s.status.State, s.status.Error = events.DiscoveryFailed, "hosting the tools failed: "+err.Error()
	}
	s.status.DiscoveryCommand, s.status.CallCommand = settings.DiscoveryCommand, settings.CallCommand
	s.status.Tools, s.status.Expired, s.status.Warnings = len(tools), 0, warnings
	at := f.at
	s.status.LastSuccess = &at
	st := s.status
	s.mu.Unlock()
	s.publish(&st)
	if err != nil {
		return names, warnings, fmt.Errorf("discovery: hosting the tools: %w", err)
	}
	return names, warnings, nil
}

func asTools(ts []*Tool) []tool.Tool {
	out := make([]tool.Tool, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// expireIdle drops the hosted tools not called for Settings.IdleExpiry
// before now, as one change; the next discovery brings them back.
func (s *Source) expireIdle(now time.Time) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	s.mu.Lock()
	expiry, hosted := s.settings.IdleExpiry, s.hosted
	s.mu.Unlock()
	if expiry <= 0 {
		return
	}
	keep := make([]*Tool, 0, len(hosted))
	for _, t := range hosted {
		if now.Sub(t.LastUsed()) < expiry {
			keep = append(keep, t)
		}
	}
	if len(keep) == len(hosted) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := s.opts.Host(ctx, asTools(keep)); err != nil {
		s.log.Warn("idle discovered tools were not dropped", "err", err)
		return
	}
	s.mu.Lock()
	s.hosted = keep
	s.status.Expired += len(hosted) - len(keep)
	s.status.Tools = len(keep)
	st := s.status
	s.mu.Unlock()
	s.log.Info("idle discovered tools dropped until the next discovery", "dropped", len(hosted)-len(keep), "kept", len(keep))
	s.publish(&st)
}

// Apply makes settings the discovery settings, as a settings file that
// changed gives them: a new discovery command (or environment) is run at
// once; a new call command re-hosts the last result with it; no command
// drops the discovered tools. Settings that do not validate are refused
// and change nothing.
func (s *Source) Apply(ctx context.Context, settings Settings) error {
	if err := settings.Validate(); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	s.runMu.Lock()
	s.mu.Lock()
	old := s.settings
	s.settings = settings
	last := s.last
	stopped := s.stopped
	s.mu.Unlock()
	s.runMu.Unlock()
	if stopped {
		return nil
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	env := FilterEnv(s.environ, settings.CallEnv)
	key := settings.DiscoveryCommand + "\x00" + strings.Join(env, "\x00")
	switch {
	case !settings.Configured():
		if !old.Configured() {
			return nil
		}
		s.runMu.Lock()
		defer s.runMu.Unlock()
		_, _, err := s.opts.Host(ctx, nil)
		s.mu.Lock()
		s.hosted, s.last = nil, nil
		s.status = events.DiscoveryStatus{Executor: s.opts.Identity.ID, Workspace: s.opts.Workspace, State: events.DiscoveryPending}
		s.mu.Unlock()
		_ = s.kv.Delete(ctx, events.DiscoveryStatusKey(s.opts.Identity.ID))
		return err
	case old.DiscoveryCommand == settings.DiscoveryCommand && old.CallCommand == settings.CallCommand && slices.Equal(old.CallEnv, settings.CallEnv):
		return nil // timings only: the loop has them
	case last != nil && last.key == key:
		s.runMu.Lock()
		defer s.runMu.Unlock()
		_, _, err := s.host(ctx, settings, env, last)
		return err
	}
	_, err := s.Discover(ctx, true)
	return err
}

// Status is the state of the discovery.
func (s *Source) Status() events.DiscoveryStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Warnings = slices.Clone(st.Warnings)
	return st
}

// Tools are the discovered tools hosted now.
func (s *Source) Tools() []*Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hosted)
}

// loop re-discovers every interval, expires idle tools and keeps the
// status entry from expiring, until Stop.
func (s *Source) loop() {
	defer s.wg.Done()
	refresh := time.NewTicker(events.DiscoveryStatusRefresh)
	defer refresh.Stop()
	for {
		s.mu.Lock()
		interval, expiry, configured := s.settings.Interval, s.settings.IdleExpiry, s.settings.Configured()
		s.mu.Unlock()
		var tick, check <-chan time.Time
		var timers []*time.Timer
		if configured && interval > 0 {
			t := time.NewTimer(interval)
			timers, tick = append(timers, t), t.C
		}
		if configured && expiry > 0 {
			t := time.NewTimer(min(max(expiry/4, 10*time.Millisecond), time.Minute))
			timers, check = append(timers, t), t.C
		}
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-tick:
			ctx, cancel := context.WithTimeout(context.Background(), DiscoveryTimeout+time.Minute)
			if _, err := s.Discover(ctx, false); err != nil && !errors.Is(err, ErrNotConfigured) {
				s.log.Error("tool discovery failed; the discovered tools stay as they were", "err", err)
			}
			cancel()
		case <-check:
			s.expireIdle(s.now())
		case <-refresh.C:
			if configured {
				st := s.Status()
				s.store(&st)
			}
		}
		for _, t := range timers {
			t.Stop()
		}
	}
}

// handleDiscover answers a discovery request, off the subscription's
// goroutine: a discovery takes a while.
func (s *Source) handleDiscover(msg *nats.Msg) {
	reply := &events.DiscoverReply{Header: events.Header{Sender: s.opts.Identity}}
	req, err := events.Decode[events.DiscoverRequest](msg.Data)
	if err != nil {
		reply.RequestID, reply.Error = "unknown", "malformed discovery request: "+err.Error()
		s.respond(msg, reply)
		return
	}
	reply.RequestID = req.ID
	s.mu.Lock()
	stopped := s.stopped
	if !stopped {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if stopped {
		reply.Error = "the executor is stopping"
		s.respond(msg, reply)
		return
	}
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), DiscoveryTimeout+time.Minute)
		defer cancel()
		s.log.Info("tool discovery requested", "by", req.Sender.ID, "force", req.Force)
		// Every request an executor acts on is in the audit trail: one
		// that cannot be recorded is refused.
		if err := bus.RecordRequestOnce(ctx, s.opts.Conn, msg); err != nil {
			reply.Error = "the request cannot be recorded in the audit stream: " + err.Error()
			s.respond(msg, reply)
			return
		}
		res, err := s.Discover(ctx, req.Force)
		if res != nil {
			reply.Tools, reply.Warnings, reply.Cached = res.Names, res.Warnings, res.Cached
			if res.Cached {
				at := res.CachedAt.UTC()
				reply.CachedAt = &at
			}
		}
		if err != nil {
			reply.Error = err.Error()
		}
		s.respond(msg, reply)
	}()
}

func (s *Source) respond(msg *nats.Msg, reply *events.DiscoverReply) {
	data, err := events.Encode(reply)
	if err == nil {
		err = msg.Respond(data)
	}
	if err != nil {
		s.log.Warn("discovery reply not sent", "err", err)
	}
}

// publish records the status in the bucket and as an event.
func (s *Source) publish(st *events.DiscoveryStatus) {
	if data := s.store(st); data != nil {
		if err := s.opts.Conn.Publish(events.SubjectDiscoveryStatus, data); err != nil {
			s.log.Warn("discovery status not published", "err", err)
		}
	}
}

// store writes the status, newly stamped, to the bucket and returns it
// encoded (nil when it does not encode).
func (s *Source) store(st *events.DiscoveryStatus) []byte {
	st.Sender = s.opts.Identity
	st.ID, st.Time = "", time.Time{}
	data, err := events.Encode(st)
	if err != nil {
		s.log.Error("discovery status does not encode", "err", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.kv.Put(ctx, events.DiscoveryStatusKey(s.opts.Identity.ID), data); err != nil {
		s.log.Warn("discovery status not stored", "err", err)
	}
	return data
}

// Stop stops following the interval, the expiry and the bus, waits for a
// discovery in progress, and removes the status entry. The discovered
// tools stay in the catalogue, hosted by the executor's id, as its
// built-ins do. Stop the executor first: calls that start after Stop
// cannot start their command.
func (s *Source) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	s.sub.Unsubscribe()
	close(s.stop)
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.kv.Delete(ctx, events.DiscoveryStatusKey(s.opts.Identity.ID))
}

// ReadStatus reads every executor's discovery status from the bucket, by
// executor; entries that do not decode are left out and said in
// malformed. With no bucket yet (no executor has a discovery command)
// there are none.
func ReadStatus(ctx context.Context, js jetstream.JetStream) (states []*events.DiscoveryStatus, malformed []error, err error) {
	kv, err := js.KeyValue(ctx, events.DiscoveryStatusBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, nil, err
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue // expired since it was listed
		}
		st, err := events.Decode[events.DiscoveryStatus](e.Value())
		if err != nil {
			malformed = append(malformed, fmt.Errorf("discovery status entry %s: %w", key, err))
			continue
		}
		states = append(states, st)
	}
	slices.SortFunc(states, func(a, b *events.DiscoveryStatus) int { return strings.Compare(a.Executor, b.Executor) })
	return states, malformed, nil
}
