package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// UnreadyAfter is how many connections to a server must fail in a row,
// the first try and its retries, before Health reports it down: a server
// that a retry a second or two later reaches is no news.
const UnreadyAfter = 3

// Backoff between connections to a server that failed or went away:
// doubling from minBackoff to maxBackoff, and back to minBackoff once a
// session has lasted stableAfter.
const (
	minBackoff  = time.Second
	maxBackoff  = 30 * time.Second
	stableAfter = time.Minute
)

// Timeouts of the steps of a connection. Listing tools may be slow (a
// server that starts through npx downloads first); each step gets the
// server's own timeout when that is shorter.
const (
	connectTimeout = 60 * time.Second
	pingEvery      = 15 * time.Second
	pingTimeout    = 10 * time.Second
	relistEvery    = time.Second
)

// server runs the connection to one configured server for as long as the
// server is in the configuration: it connects, lists the tools and hosts
// them, watches the session, and connects again with backoff when the
// session ends. It owns its sessions: one at a time, each closed before
// the next and when the server stops.
type server struct {
	m   *Manager
	cfg ServerConfig

	sess atomic.Pointer[session] // the session calls use; nil when none
	// up is closed, and replaced, each time a session starts serving
	// calls (awaitSession); guarded by mu.
	up   chan struct{}
	subs resourceSubs // the subscriptions to its resources (subscriptions.go)
	// callers are the sessions of callers whose requests the server may
	// ask (callersession.go).
	callers callerSessions

	mu     sync.Mutex
	status events.MCPServerStatus
	// hostedWith is what the last hosting of the tools warned of, so that
	// listing the same tools again says nothing new.
	hostedWith string
	// failures counts the connections in a row that failed before the
	// server was connected, the last with lastErr; downSince is when it
	// was last connected, or its runner started (Health).
	failures  int
	lastErr   error
	downSince time.Time

	// discover asks the runner to list the tools again (or, when
	// disconnected, to connect at once); the reply is the outcome.
	discover chan chan discovered
	stop     chan struct{}
	done     chan struct{}
}

// discovered is what a discovery ended with.
type discovered struct {
	tools    []string // the catalogue names of the server's tools
	features int      // how many of its prompts and resources are hosted
	warnings []string
	err      error
}

func newServer(m *Manager, cfg ServerConfig) *server {
	s := &server{m: m, cfg: cfg, discover: make(chan chan discovered), stop: make(chan struct{}), done: make(chan struct{}), downSince: time.Now(),
		up: make(chan struct{})}
	s.status = events.MCPServerStatus{Executor: m.id.ID, Server: cfg.Name, Transport: string(cfg.Transport), Trust: cfg.Trust}
	return s
}

// current is the session calls go to, nil when the server is not
// connected.
func (s *server) current() *session { return s.sess.Load() }

// unavailable says why a call cannot reach the server.
func (s *server) unavailable() string {
	st := s.snapshot()
	msg := fmt.Sprintf("MCP server %q is %s", s.cfg.Name, st.State)
	if st.Error != "" {
		msg += ": " + st.Error
	}
	if st.NextAttempt != nil {
		msg += fmt.Sprintf("; it is tried again in %s", time.Until(*st.NextAttempt).Round(time.Second))
	}
	return msg + "."
}

// down says why the server is down past its retries: not connected
// (nor disabled), after UnreadyAfter connections in a row failed. ""
// while it is up, or still on its first tries.
func (s *server) down() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	if st.State == events.MCPConnected || st.State == events.MCPDisabled || s.failures < UnreadyAfter {
		return ""
	}
	// The same words while it stays down, whether it is between two
	// tries or in one: the log says it once.
	msg := fmt.Sprintf("MCP server %q is down since %s", s.cfg.Name, s.downSince.UTC().Format(time.RFC3339))
	if s.lastErr != nil {
		msg += ": " + s.lastErr.Error()
	}
	return msg
}

func (s *server) snapshot() events.MCPServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// setState records a new state and publishes it.
func (s *server) setState(state events.MCPState, err error, next time.Time, tools int) {
	s.mu.Lock()
	st := &s.status
	if st.State != state {
		st.Since = time.Now().UTC()
	}
	st.State, st.Error, st.NextAttempt = state, "", nil
	if err != nil {
		st.Error = err.Error()
	}
	if !next.IsZero() {
		st.NextAttempt = &next
	}
	if tools >= 0 {
		st.Tools = tools
	}
	snap := *st
	s.mu.Unlock()
	s.m.publish(&snap)
}

// run is the server's runner goroutine.
func (s *server) run() {
	defer close(s.done)
	if s.cfg.Disabled != "" {
		s.setState(events.MCPDisabled, errors.New(s.cfg.Disabled), time.Time{}, 0)
		s.idle()
		return
	}
	backoff := s.m.backoff
	logged, attempts := "", 0 // the failed attempts in a row, and the reason last warned of
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.mu.Lock()
			s.status.Restarts++
			s.mu.Unlock()
		}
		s.setState(events.MCPConnecting, nil, time.Time{}, -1)
		began := time.Now()
		err := s.session()
		if s.stopped() {
			return
		}
		if time.Since(began) > stableAfter {
			backoff = s.m.backoff
			logged, attempts = "", 0
		}
		s.mu.Lock()
		if s.status.State == events.MCPConnected { // it was, until now
			s.failures, s.downSince = 0, time.Now()
		} else {
			s.failures++
		}
		s.lastErr = err
		s.mu.Unlock()
		next := time.Now().Add(backoff)
		s.setState(events.MCPDisconnected, err, next, -1)
		// A server that stays down says so once, again when the reason
		// changes, and every tenth attempt; the attempts between are
		// debug.
		level := slog.LevelDebug
		if msg := fmt.Sprint(err); msg != logged || attempts%10 == 0 {
			level, logged = slog.LevelWarn, msg
		}
		attempts++
		s.m.log.Log(context.Background(), level, "MCP server disconnected", "server", s.cfg.Name, "err", err, "attempt", attempts, "retry in", backoff)
		if !s.wait(backoff) {
			return
		}
		backoff = min(2*backoff, max(maxBackoff, s.m.backoff))
	}
}

// session connects, hosts the tools and serves until the session ends or
// the server stops; it returns why the session ended.
func (s *server) session() error {
	relist := make(chan struct{}, 1)
	listChanged := func() {
		select {
		case relist <- struct{}{}:
		default:
		}
	}
	ctx, cancel := s.stepContext(connectTimeout)
	// The session every caller shares declares what toolbus can pass
	// on, as a caller's own session does: a server may list tools by the
	// capabilities its client declared, and every transport must list
	// the same. A request that comes on it for a call whose caller cannot
	// answer, or for no call toolbus can tell, is refused at once.
	sess, err := dial(ctx, &s.cfg, s.m.starter, s.m.log, listChanged, askable(events.ServerRequestMethods))
	cancel()
	if err != nil {
		return err
	}
	defer sess.Close()
	updated := s.subs.updated
	sess.onUpdated.Store(&updated)
	stopUpdates := make(chan struct{})
	var publishing sync.WaitGroup
	publishing.Go(func() { s.publishUpdates(stopUpdates) })
	defer publishing.Wait()
	defer close(stopUpdates)
	found := s.list(sess)
	if found.err != nil {
		return found.err
	}
	s.sess.Store(sess)
	defer s.sess.Store(nil)
	s.mu.Lock()
	close(s.up)
	s.up = make(chan struct{})
	s.mu.Unlock()
	ctx, cancel = s.stepContext(connectTimeout)
	s.subs.resubscribe(ctx, s, sess)
	cancel()
	s.setState(events.MCPConnected, nil, time.Time{}, len(found.tools))
	listed := time.Now()
	var relistLater <-chan time.Time
	relistNow := func() error {
		listed = time.Now()
		found := s.list(sess)
		if found.err == nil {
			s.setState(events.MCPConnected, nil, time.Time{}, len(found.tools))
		}
		return found.err
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-s.stop:
			return nil
		case <-sess.dead:
			return sess.cause
		case reply := <-s.discover:
			listed = time.Now()
			found := s.list(sess)
			reply <- found
			if found.err != nil {
				return found.err
			}
			s.setState(events.MCPConnected, nil, time.Time{}, len(found.tools))
		case <-relist:
			// notifications/tools/list_changed: this server alone, and
			// at most once every relistEvery, however often a server
			// says it, so that none can keep the registry busy.
			if wait := time.Until(listed.Add(relistEvery)); wait > 0 {
				if relistLater == nil {
					relistLater = time.After(wait)
				}
				continue
			}
			if err := relistNow(); err != nil {
				return err
			}
		case <-relistLater:
			relistLater = nil
			if err := relistNow(); err != nil {
				return err
			}
		case <-ping.C:
			ctx, cancel := s.stepContext(pingTimeout)
			err := sess.client.Ping(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("the server did not answer a ping: %w", err)
			}
		}
	}
}

// list lists the server's tools and hosts those the configuration keeps,
// in place of those hosted before.
func (s *server) list(sess *session) discovered {
	ctx, cancel := s.stepContext(connectTimeout)
	defer cancel()
	var defs []listedTool
	// A server that offers prompts or resources alone declares no tools,
	// and may answer tools/list -32601.
	if sess.client.GetServerCapabilities().Tools != nil {
		var err error
		if defs, err = sess.listTools(ctx); err != nil {
			return discovered{err: fmt.Errorf("list tools: %w", sess.explainIfDead(err))}
		}
	}
	var tools []tool.Tool
	var found discovered
	for _, def := range defs {
		if !s.cfg.Keeps(def.Name) {
			continue
		}
		t, err := newServerTool(s, def)
		if err != nil {
			found.warnings = append(found.warnings, err.Error())
			continue
		}
		for _, why := range t.left {
			found.warnings = append(found.warnings, fmt.Sprintf("%s: %s", def.Name, why))
		}
		tools = append(tools, t)
	}
	features, warnings, err := s.features(ctx, sess)
	if err != nil {
		return discovered{err: sess.explainIfDead(err)}
	}
	found.warnings = append(found.warnings, warnings...)
	names, warnings, err := s.m.host(ctx, s.cfg.Name, s.cfg.Trust, append(tools, features...))
	found.warnings = append(found.warnings, warnings...)
	for _, t := range tools {
		if name, ok := names[t.Spec().Name]; ok {
			found.tools = append(found.tools, name)
		}
	}
	found.features = len(names) - len(found.tools)
	s.mu.Lock()
	said := strings.Join(found.warnings, "\n")
	fresh := said != s.hostedWith
	s.hostedWith = said
	s.mu.Unlock()
	if fresh {
		logHosting(s.m.log, s.cfg.Name, found.warnings)
	}
	if err != nil {
		found.err = fmt.Errorf("register tools: %w", err)
	}
	return found
}

// stepContext bounds one step of a session: by d, or by the server's
// own timeout when shorter, and by the server's stop.
func (s *server) stepContext(d time.Duration) (context.Context, context.CancelFunc) {
	if s.cfg.Timeout > 0 {
		d = min(d, s.cfg.Timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// wait waits d before the next connection; a discovery request cuts it
// short. It reports false when the server stops.
func (s *server) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	case reply := <-s.discover:
		// Connect now; the caller hears how the connection went from
		// the status, since listing happens in the next session.
		reply <- discovered{err: errReconnecting}
		return true
	}
}

var errReconnecting = errors.New("the server was disconnected; connecting to it again now (see toolbus mcp status)")

// idle serves a disabled server until it stops: discovery requests are
// answered with why it is disabled.
func (s *server) idle() {
	for {
		select {
		case <-s.stop:
			return
		case reply := <-s.discover:
			reply <- discovered{err: fmt.Errorf("the server is disabled: %s", s.cfg.Disabled)}
		}
	}
}

// rediscover lists the server's tools again (seed 000
// discoverToolsForServer).
func (s *server) rediscover(ctx context.Context) discovered {
	reply := make(chan discovered, 1)
	select {
	case s.discover <- reply:
	case <-s.done:
		return discovered{err: errors.New("the server was removed")}
	case <-ctx.Done():
		return discovered{err: ctx.Err()}
	}
	select {
	case found := <-reply:
		return found
	case <-ctx.Done():
		return discovered{err: ctx.Err()}
	}
}

// awaitSession waits until the server has a session that has not ended,
// ctx ends or the server stops.
func (s *server) awaitSession(ctx context.Context) error {
	for {
		s.mu.Lock()
		up := s.up
		s.mu.Unlock()
		if sess := s.current(); sess != nil && !sess.ended() {
			return nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-s.stop:
			return fmt.Errorf("MCP server %q stopped", s.cfg.Name)
		}
	}
}

// check pings a session a call failed on, and ends it when the server
// does not answer: the runner then connects again.
func (s *server) check(sess *session) {
	ctx, cancel := s.stepContext(pingTimeout)
	defer cancel()
	if err := sess.client.Ping(ctx); err != nil {
		sess.end(fmt.Errorf("the session broke: %w", err))
	}
}

func (s *server) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// close stops the runner and waits for it: its session is closed, a
// stdio server's processes ended and reaped.
func (s *server) close() {
	close(s.stop)
	<-s.done
	s.callers.close()
}

// logHosting says in one line per server what did not go as the server
// declared: the tools renamed because another source had their names, and
// those not hosted or trimmed, each with a few examples. `toolbus tools
// discover --server` lists them all.
func logHosting(log *slog.Logger, server string, warnings []string) {
	if len(warnings) == 0 {
		return
	}
	var renamed, other []string
	for _, w := range warnings {
		if strings.Contains(w, "; registered as ") {
			renamed = append(renamed, w)
		} else {
			other = append(other, w)
		}
	}
	examples := func(ws []string) string {
		if len(ws) > 3 {
			return strings.Join(ws[:3], " | ") + fmt.Sprintf(" | and %d more", len(ws)-3)
		}
		return strings.Join(ws, " | ")
	}
	attrs := []any{"server", server}
	if len(renamed) > 0 {
		attrs = append(attrs, "renamed", len(renamed), "renamed_examples", examples(renamed))
	}
	if len(other) > 0 {
		attrs = append(attrs, "not_as_declared", len(other), "examples", examples(other))
	}
	attrs = append(attrs, "all", "toolbus tools discover --server "+server)
	log.Warn("MCP server: tools hosted with changes", attrs...)
}
