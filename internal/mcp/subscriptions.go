package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// A caller subscribes to a resource of a server with a call of the
// resource's entry (events.OpSubscribe), which the policy judges as a
// read, and gives the subscription up with another (OpUnsubscribe). The
// executor that hosts the server keeps who holds which URI and keeps its
// session of the server subscribed to every URI someone holds: it
// subscribes at the first hold, unsubscribes when the last is given up,
// and subscribes again to every URI held when it connects to the server
// again. The server's notifications/resources/updated of a URI held goes
// onto the bus (events.MCPUpdatedSubject), where the facade hears it and
// tells the clients that subscribed; of a URI nobody holds, nowhere.
//
// A caller is its identity's id and session: an identity can give up
// only its own holds. Holds are bounded, so that no caller can have a
// server's session subscribed to every URI a template matches, and so
// are the updates a server can put on the bus.
const (
	// maxSubscribedURIs is how many URIs of one server the session may
	// be subscribed to at once.
	maxSubscribedURIs = 1024
	// maxHoldsPerCaller is how many of them one identity may hold (the
	// sessions of one MCP client of a facade are one identity).
	maxHoldsPerCaller = 256
	// maxSubscribedURI is the longest URI, in bytes, one may subscribe to.
	maxSubscribedURI = 2048
	// updateEvery is the least time between two updates of one server on
	// the bus: at most 20 a second. Updates of one URI that come while it
	// waits to be sent are sent once.
	updateEvery = 50 * time.Millisecond
)

// resourceSubs are the subscriptions to one server's resources on the
// executor that hosts it.
type resourceSubs struct {
	// op serialises the changes of the session's subscriptions, each
	// with the request to the server that makes it.
	op sync.Mutex

	mu        sync.Mutex
	holders   map[string]map[holder]bool // by URI, none empty
	perCaller map[string]int             // holds, by identity id
	// The URIs whose update waits to be sent, in the order they came,
	// each once.
	pending []string
	queued  map[string]bool
	wake    chan struct{} // a new update is pending
}

// holder is who holds a subscription: a caller's identity and session.
type holder struct{ id, session string }

func holderOf(caller events.Identity) holder { return holder{caller.ID, caller.Session} }

// subscribed is the output of a subscription taken or given up: MCP's
// empty result.
func subscribed(msg string) *tool.Output {
	return &tool.Output{LLMContent: msg, ReturnDisplay: msg, MCPResult: json.RawMessage(`{}`)}
}

// subscribe makes caller a holder of uri, subscribing the server's
// session to it when caller is the first.
func (r *resourceSubs) subscribe(ctx context.Context, s *server, uri string, caller events.Identity) (*tool.Output, error) {
	if len(uri) > maxSubscribedURI {
		return tool.Failed(events.ErrInvalidParams, fmt.Sprintf("a URI to subscribe to is at most %d bytes", maxSubscribedURI)), nil
	}
	h := holderOf(caller)
	r.op.Lock()
	defer r.op.Unlock()
	r.mu.Lock()
	held := r.holders[uri]
	switch {
	case held[h]:
		r.mu.Unlock()
		return subscribed("Subscribed to " + uri + " already."), nil
	case r.perCaller[h.id] >= maxHoldsPerCaller:
		r.mu.Unlock()
		return tool.Failed(events.ErrExecutionFailed, fmt.Sprintf("%s holds %d subscriptions to resources of MCP server %q, as many as one caller may", h.id, maxHoldsPerCaller, s.cfg.Name)), nil
	case len(held) == 0 && len(r.holders) >= maxSubscribedURIs:
		r.mu.Unlock()
		return tool.Failed(events.ErrExecutionFailed, fmt.Sprintf("MCP server %q has subscriptions to %d resources, as many as toolbus keeps", s.cfg.Name, maxSubscribedURIs)), nil
	}
	r.mu.Unlock()
	if len(held) == 0 {
		sess := s.current()
		if sess == nil {
			return tool.Failed(events.ErrExecutionFailed, s.unavailable()), nil
		}
		if !takesSubscriptions(sess) {
			return tool.Failed(events.ErrExecutionFailed, fmt.Sprintf("MCP server %q takes no subscriptions to its resources (it does not declare resources.subscribe)", s.cfg.Name)), nil
		}
		out, err := s.request(ctx, string(mcp.MethodResourcesSubscribe), map[string]any{"uri": uri}, func(json.RawMessage) string { return "" })
		if err != nil || out.Err != nil {
			return out, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holders == nil {
		r.holders, r.perCaller = map[string]map[holder]bool{}, map[string]int{}
	}
	if r.holders[uri] == nil {
		r.holders[uri] = map[holder]bool{}
	}
	r.holders[uri][h] = true
	r.perCaller[h.id]++
	return subscribed("Subscribed to " + uri + "."), nil
}

// unsubscribe gives up caller's hold of uri, unsubscribing the server's
// session from it when it was the last. A URI caller does not hold is
// given up already.
func (r *resourceSubs) unsubscribe(ctx context.Context, s *server, uri string, caller events.Identity) *tool.Output {
	h := holderOf(caller)
	r.op.Lock()
	defer r.op.Unlock()
	r.mu.Lock()
	held := r.holders[uri]
	if !held[h] {
		r.mu.Unlock()
		return subscribed("Not subscribed to " + uri + ".")
	}
	delete(held, h)
	if r.perCaller[h.id]--; r.perCaller[h.id] == 0 {
		delete(r.perCaller, h.id)
	}
	last := len(held) == 0
	if last {
		delete(r.holders, uri)
	}
	r.mu.Unlock()
	if sess := s.current(); last && sess != nil {
		// The hold is given up whatever the server says: an update of a
		// URI nobody holds goes nowhere.
		if _, err := sess.rawRequest(ctx, string(mcp.MethodResourcesUnsubscribe), map[string]any{"uri": uri}); err != nil {
			s.m.log.Debug("resources/unsubscribe failed", "server", s.cfg.Name, "uri", uri, "err", err)
		}
	}
	return subscribed("Unsubscribed from " + uri + ".")
}

// resubscribe subscribes a new session of the server to every URI held.
func (r *resourceSubs) resubscribe(ctx context.Context, s *server, sess *session) {
	r.op.Lock()
	defer r.op.Unlock()
	r.mu.Lock()
	uris := make([]string, 0, len(r.holders))
	for uri := range r.holders {
		uris = append(uris, uri)
	}
	r.mu.Unlock()
	if len(uris) == 0 {
		return
	}
	if !takesSubscriptions(sess) {
		s.m.log.Warn("MCP server takes no subscriptions to its resources any more: the subscriptions held get no updates", "server", s.cfg.Name, "subscriptions", len(uris))
		return
	}
	for _, uri := range uris {
		if _, err := sess.rawRequest(ctx, string(mcp.MethodResourcesSubscribe), map[string]any{"uri": uri}); err != nil {
			s.m.log.Warn("a subscription to a resource was not taken again: it gets no updates", "server", s.cfg.Name, "uri", uri, "err", err)
		}
	}
}

// takesSubscriptions says whether the server of sess declares
// resources.subscribe.
func takesSubscriptions(sess *session) bool {
	caps := sess.client.GetServerCapabilities()
	return caps.Resources != nil && caps.Resources.Subscribe
}

// updated queues the update of uri, which the server says changed, when
// someone holds it, and at most once.
func (r *resourceSubs) updated(uri string) {
	r.mu.Lock()
	if len(r.holders[uri]) == 0 || r.queued[uri] {
		r.mu.Unlock()
		return
	}
	if r.queued == nil {
		r.queued = map[string]bool{}
	}
	r.queued[uri] = true
	r.pending = append(r.pending, uri)
	wake := r.wakeup()
	r.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// wakeup is the channel that says an update is pending. The caller holds
// r.mu.
func (r *resourceSubs) wakeup() chan struct{} {
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
	return r.wake
}

// next takes the oldest pending update of a URI still held.
func (r *resourceSubs) next() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.pending) > 0 {
		uri := r.pending[0]
		r.pending = r.pending[1:]
		delete(r.queued, uri)
		if len(r.holders[uri]) > 0 {
			return uri, true
		}
	}
	r.pending = nil
	return "", false
}

// publishUpdates sends the server's updates onto the bus, one every
// updateEvery at most, until stop closes.
func (s *server) publishUpdates(stop <-chan struct{}) {
	s.subs.mu.Lock()
	wake := s.subs.wakeup()
	s.subs.mu.Unlock()
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-stop:
			return
		case <-wake:
		}
		for {
			uri, ok := s.subs.next()
			if !ok {
				break
			}
			s.publishUpdate(uri)
			pause.Reset(updateEvery)
			select {
			case <-stop:
				return
			case <-pause.C:
			}
		}
	}
}

// publishUpdate says on the bus that uri changed.
func (s *server) publishUpdate(uri string) {
	data, err := events.Encode(&events.MCPResourceUpdated{Header: events.Header{Sender: s.m.id}, Executor: s.m.id.ID, Server: s.cfg.Name, URI: uri})
	if err == nil {
		err = s.m.nc.Publish(events.MCPUpdatedSubject(s.cfg.Name), data)
	}
	if err != nil {
		s.m.log.Warn("a resource's update was not published", "server", s.cfg.Name, "uri", uri, "err", err)
	}
}
