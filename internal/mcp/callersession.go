package mcp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// Caller sessions. A streamable-HTTP server may send a request of its own
// on the session's standalone stream rather than on the call's (mcp-go's
// servers send every sampling/createMessage there), where it names no
// call. On the session every executor shares among all callers, such a
// request is refused: it may be any caller's. So a call whose caller can
// answer requests runs on a session of that caller's own, which declares
// to the server what the caller's client declared (sampling, elicitation)
// and nothing else: a request on it is that caller's, and goes to its one
// call in flight (serverAsks.oneCaller). The shared session declares
// both, as a stdio session does, so that a server that lists tools by its
// client's capabilities lists the same whatever the transport; a request
// on it that is not on a call's own stream, or is for a caller that
// cannot answer, is refused at once.
//
// A caller session opens on the caller's first such call (initialize, the
// standalone stream: docs/mcp.md says what it costs), serves its later
// calls, and closes after callerIdle without one, when the server stops,
// or when the server forgets it (it is opened again on the next call). At
// most maxCallerSessions are open per server; a call past that runs on
// the shared session, where only requests on its own stream reach it.

const (
	callerIdle        = 2 * time.Minute
	maxCallerSessions = 64
)

// callerSessions are a server's sessions of one caller each, by caller
// and the methods they answer.
type callerSessions struct {
	mu     sync.Mutex
	m      map[string]*callerSession
	closed bool
}

type callerSession struct {
	ready chan struct{} // closed once dialled: sess or err is set
	sess  *session
	err   error
	calls int         // the calls on it now
	idle  *time.Timer // closes it when no call came for callerIdle
}

// callerKey names a caller's sessions: its id, its session, and whether
// the bus proved the id (with identities, an id names its principal, and
// no other principal may use it; unproven callers that claim the same id
// and session share a session, as they share everything a claim gives).
func callerKey(caller events.Identity) string {
	return fmt.Sprintf("%t\x00%s\x00%s", caller.Proven, caller.ID, caller.Session)
}

// callerSession is the session of caller that declares methods, opened
// when there is none, and the release to call when the call ends; nil
// when there is none to be had: the call then runs on the shared session.
func (s *server) callerSession(ctx context.Context, caller string, methods []string) (*session, func()) {
	cs := &s.callers
	key := caller + "\x00" + strings.Join(methods, ",")
	for {
		cs.mu.Lock()
		if cs.closed {
			cs.mu.Unlock()
			return nil, nil
		}
		c := cs.m[key]
		if c == nil {
			if len(cs.m) >= maxCallerSessions {
				cs.mu.Unlock()
				s.m.log.Warn("MCP server: as many caller sessions as one server may have are open; the call runs on the shared session", "server", s.cfg.Name)
				return nil, nil
			}
			c = &callerSession{ready: make(chan struct{}), calls: 1}
			if cs.m == nil {
				cs.m = map[string]*callerSession{}
			}
			cs.m[key] = c
			cs.mu.Unlock()
			s.dialCaller(ctx, key, c, methods)
			if c.err != nil {
				return nil, nil
			}
			return c.sess, func() { cs.release(key, c) }
		}
		c.calls++
		if c.idle != nil {
			c.idle.Stop()
			c.idle = nil
		}
		cs.mu.Unlock()
		select {
		case <-c.ready:
		case <-ctx.Done():
			cs.release(key, c)
			return nil, nil
		}
		if c.err != nil {
			cs.release(key, c)
			return nil, nil
		}
		select {
		case <-c.sess.dead:
			// The server forgot it, or it broke: a new one.
			cs.drop(key, c)
			cs.release(key, c)
			continue
		default:
		}
		return c.sess, func() { cs.release(key, c) }
	}
}

// dialCaller opens c, a session that declares methods, and marks it
// ready; one that fails is dropped (the next call tries again).
func (s *server) dialCaller(ctx context.Context, key string, c *callerSession, methods []string) {
	step, cancel := s.stepContext(connectTimeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	sess, err := dial(step, &s.cfg, s.m.starter, s.m.log, nil, askable(methods))
	if err == nil {
		sess.asking.mu.Lock()
		sess.asking.oneCaller = true
		sess.asking.mu.Unlock()
	}
	s.callers.mu.Lock()
	c.sess, c.err = sess, err
	s.callers.mu.Unlock()
	if err != nil {
		s.m.log.Warn("MCP server: a caller session did not open; the call runs on the shared session", "server", s.cfg.Name, "err", err)
		s.callers.drop(key, c)
		close(c.ready)
		s.callers.release(key, c)
		return
	}
	close(c.ready)
}

// release ends a call on c; the last one starts its idle timer.
func (cs *callerSessions) release(key string, c *callerSession) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.calls--
	if c.calls > 0 {
		return
	}
	if cs.m[key] != c || c.sess == nil {
		// Dropped, or never opened: nothing will take it again.
		if c.sess != nil {
			go c.sess.Close()
		}
		return
	}
	c.idle = time.AfterFunc(callerIdle, func() {
		cs.mu.Lock()
		idle := cs.m[key] == c && c.calls == 0
		if idle {
			delete(cs.m, key)
		}
		cs.mu.Unlock()
		if idle {
			c.sess.Close()
		}
	})
}

// drop takes c out of the pool; it closes once its last call ends.
func (cs *callerSessions) drop(key string, c *callerSession) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m[key] == c {
		delete(cs.m, key)
	}
}

// close closes every caller session that no call uses; one in use closes
// when its call ends. No new one opens.
func (cs *callerSessions) close() {
	cs.mu.Lock()
	var idle []*session
	for key, c := range cs.m {
		delete(cs.m, key)
		if c.idle != nil {
			c.idle.Stop()
		}
		if c.calls == 0 && c.sess != nil {
			idle = append(idle, c.sess)
		}
	}
	cs.closed = true
	cs.mu.Unlock()
	for _, sess := range idle {
		sess.Close()
	}
}
