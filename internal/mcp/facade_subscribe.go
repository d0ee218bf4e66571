package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
)

// The facade takes its clients' subscriptions to the resources it serves
// (resources/subscribe, resources/unsubscribe) and tells each client that
// subscribed to a URI when its server says the resource changed
// (notifications/resources/updated), and no other client.
//
// A subscription is a call of the resource's entry (events.OpSubscribe),
// which the policy judges as a read of the URI and the audit records; the
// executor hosting the server subscribes its session of the server
// (subscriptions.go) and publishes the server's updates on the bus, which
// the facade follows. The facade holds one subscription at the executor
// for each caller (identity and session) and URI, however many of its
// client sessions share them, and gives it up (events.OpUnsubscribe) when
// the last of them unsubscribes or ends, or the facade closes.
//
// mcp-go has a client session record subscriptions only when the
// session's own type takes them (SessionWithResourceSubscriptions), which
// none of its transports' sessions does, and no hook of a subscription
// can refuse it. The one hook that can refuse a request is the one every
// request passes first (OnRequestInitialization), whose refusal is always
// an invalid request (-32600), with the reason as its message: a
// subscription is taken there. Unsubscribing cannot fail, and follows
// mcp-go's own handling of it.
//
// A client of protocol 2026-07-28 subscribes in subscriptions/listen,
// whose stream mcp-go's streamable HTTP serves with a session of that
// request alone, which takes no subscriptions and which no notification
// to a session reaches: mcp-go v1.2.1 can send such a client no update of
// a resource, and the facade does not say it has subscribed it.

// maxSessionSubscriptions is how many URIs one client session may be
// subscribed to.
const maxSessionSubscriptions = 64

// releaseTimeout bounds giving up a subscription at the executor when
// its client session has ended or the facade closes.
const releaseTimeout = 10 * time.Second

// subscriptions are the facade's clients' subscriptions.
type subscriptions struct {
	mu       sync.Mutex
	sessions map[string]map[string]*subscription // by MCP session id, then URI
	byURI    map[updateKey]map[string]bool       // the sessions subscribed, by server and URI
	holds    map[holdKey]*hold
	closed   bool
	// Subscriptions given up in the background (sessions that ended).
	releasing sync.WaitGroup
}

// subscription is one client session's subscription to a URI.
type subscription struct {
	server string
	hold   holdKey
}

// updateKey is what an update names: a server and a URI of it.
type updateKey struct{ server, uri string }

// holdKey is a subscription the facade holds at an executor: a caller, as
// the executor tells holders apart (its identity's id and session), and
// an entry's URI.
type holdKey struct{ caller, session, entry, uri string }

// hold is the facade's subscription at an executor, which its client
// sessions share.
type hold struct {
	caller events.Identity
	// mu serialises the calls that take and give up the hold.
	mu sync.Mutex
	// Under subscriptions.mu: how many client sessions share it, whether
	// the executor holds it for the facade, and how many goroutines use
	// it (the hold is forgotten when none does and it holds nothing).
	sessions int
	taken    bool
	users    int
}

// use is the hold of k, made for caller when there is none, counted in
// use until done. The caller holds s.mu.
func (s *subscriptions) use(k holdKey, caller events.Identity) *hold {
	if s.holds == nil {
		s.holds = map[holdKey]*hold{}
	}
	h := s.holds[k]
	if h == nil {
		h = &hold{caller: caller}
		s.holds[k] = h
	}
	h.users++
	return h
}

// done ends a use of hold h of k.
func (s *subscriptions) done(k holdKey, h *hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.users--; h.users == 0 && h.sessions == 0 && !h.taken {
		delete(s.holds, k)
	}
}

// drop forgets session sid's subscription sub to uri. The caller holds
// s.mu.
func (s *subscriptions) drop(sid, uri string, sub *subscription) {
	if subs := s.sessions[sid]; subs != nil {
		delete(subs, uri)
		if len(subs) == 0 {
			delete(s.sessions, sid)
		}
	}
	k := updateKey{sub.server, uri}
	if sids := s.byURI[k]; sids != nil {
		delete(sids, sid)
		if len(sids) == 0 {
			delete(s.byURI, k)
		}
	}
	if h := s.holds[sub.hold]; h != nil {
		h.sessions--
	}
}

// sessionsOf is the client sessions subscribed to uri of server.
func (s *subscriptions) sessionsOf(server, uri string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sids := s.byURI[updateKey{server, uri}]
	out := make([]string, 0, len(sids))
	for sid := range sids {
		out = append(out, sid)
	}
	return out
}

// subscriptionHooks are the mcp-go hooks through which the facade sees
// its clients' subscriptions and their sessions' ends.
func (f *Facade) subscriptionHooks(h *mcpserver.Hooks) {
	h.AddOnRequestInitialization(f.takeSubscription)
	h.AddAfterUnsubscribe(func(ctx context.Context, _ any, req *mcp.UnsubscribeRequest, _ *mcp.EmptyResult) {
		if s := mcpserver.ClientSessionFromContext(ctx); s != nil {
			f.unsubscribe(ctx, s.SessionID(), req.Params.URI)
		}
	})
	h.AddOnUnregisterSession(func(_ context.Context, s mcpserver.ClientSession) { f.endSession(s.SessionID()) })
	// mcp-go acknowledges a subscriptions/listen of the resources the
	// client asks for, which the facade cannot send it updates of: the
	// acknowledgement must not name them.
	h.AddBeforeSubscriptionsListen(func(_ context.Context, _ any, req *mcp.SubscriptionsListenRequest) {
		req.Params.Notifications.ResourceSubscriptions = nil
	})
}

// takeSubscription takes a resources/subscribe request of protocol
// 2025-11-25 or before, which mcp-go then acknowledges, or refuses it with
// the reason. Any other request, and one mcp-go refuses itself (no URI,
// one of 2026-07-28, which has no such method), is mcp-go's.
func (f *Facade) takeSubscription(ctx context.Context, _ any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok || !bytes.Contains(raw, []byte("subscribe")) {
		return nil
	}
	var req struct {
		Method string `json:"method"`
		Params struct {
			URI  string         `json:"uri"`
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &req) != nil || req.Method != string(mcp.MethodResourcesSubscribe) || req.Params.URI == "" {
		return nil
	}
	if v, _ := req.Params.Meta[mcp.MetaKeyProtocolVersion].(string); mcp.IsModernProtocol(v) {
		return nil
	}
	return f.subscribe(ctx, req.Params.URI)
}

// subscribe subscribes the client session of ctx to uri, when a resource
// or template the facade serves names it and the policy allows its
// caller to read it.
func (f *Facade) subscribe(ctx context.Context, uri string) error {
	cs := mcpserver.ClientSessionFromContext(ctx)
	if cs == nil || cs.SessionID() == "" {
		return errors.New("toolbus: a subscription to a resource needs a session")
	}
	sid := cs.SessionID()
	ref, ok := f.resourceFor(uri)
	if !ok {
		return fmt.Errorf("resource not found: no resource or resource template names %s", uri)
	}
	caller := f.caller(ctx)
	k := holdKey{caller.ID, caller.Session, ref.entry, uri}
	s := &f.subs
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("toolbus: the facade is closing")
	}
	if subs := s.sessions[sid]; subs[uri] == nil && len(subs) >= maxSessionSubscriptions {
		s.mu.Unlock()
		return fmt.Errorf("toolbus: a session may subscribe to %d resources at most", maxSessionSubscriptions)
	}
	h := s.use(k, caller)
	s.mu.Unlock()
	defer s.done(k, h)

	h.mu.Lock()
	defer h.mu.Unlock()
	args, err := json.Marshal(map[string]string{"uri": uri})
	if err != nil {
		return err
	}
	// Every subscription is judged and recorded, also one of a URI the
	// facade holds already for this caller.
	if _, _, err := f.callFeature(ctx, ref.entry, args, events.OpSubscribe, nil); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h.taken = true
	if s.closed {
		// Close gives it up, once this call lets go of the hold.
		return errors.New("toolbus: the facade is closing")
	}
	if s.sessions[sid][uri] != nil {
		return nil // subscribed already
	}
	if s.sessions == nil {
		s.sessions, s.byURI = map[string]map[string]*subscription{}, map[updateKey]map[string]bool{}
	}
	if s.sessions[sid] == nil {
		s.sessions[sid] = map[string]*subscription{}
	}
	s.sessions[sid][uri] = &subscription{server: ref.server, hold: k}
	uk := updateKey{ref.server, uri}
	if s.byURI[uk] == nil {
		s.byURI[uk] = map[string]bool{}
	}
	s.byURI[uk][sid] = true
	h.sessions++
	return nil
}

// resourceFor is the entry of the resource the facade serves under uri,
// or else of the first template that matches it.
func (f *Facade) resourceFor(uri string) (featureRef, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ref, ok := f.features.resourceRefs[uri]; ok {
		return ref, true
	}
	for _, t := range f.features.templateRefs {
		if t.template.Match(uri) != nil {
			return t.featureRef, true
		}
	}
	return featureRef{}, false
}

// unsubscribe ends client session sid's subscription to uri, if it has
// one; the facade's hold at the executor is given up when no session
// shares it any more.
func (f *Facade) unsubscribe(ctx context.Context, sid, uri string) {
	s := &f.subs
	s.mu.Lock()
	sub := s.sessions[sid][uri]
	if sub == nil {
		s.mu.Unlock()
		return
	}
	s.drop(sid, uri, sub)
	h := s.use(sub.hold, events.Identity{})
	s.mu.Unlock()
	f.settle(ctx, sub.hold, h)
}

// endSession ends the subscriptions of client session sid, which has
// ended, giving up in the background the holds no other session shares.
func (f *Facade) endSession(sid string) {
	s := &f.subs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return // Close gives everything up
	}
	for uri, sub := range s.sessions[sid] {
		s.drop(sid, uri, sub)
		h := s.use(sub.hold, events.Identity{})
		s.releasing.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			defer cancel()
			f.settle(ctx, sub.hold, h)
		})
	}
}

// settle gives up hold h of k at the executor when the executor holds it
// and no client session shares it, and ends a use of it.
func (f *Facade) settle(ctx context.Context, k holdKey, h *hold) {
	s := &f.subs
	defer s.done(k, h)
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	release := h.taken && h.sessions == 0
	s.mu.Unlock()
	if !release {
		return
	}
	args, err := json.Marshal(map[string]string{"uri": k.uri})
	if err != nil {
		return
	}
	inv := &events.Invocation{Header: events.Header{Sender: h.caller}, Tool: k.entry, Args: args, Workspace: f.cfg.Workspace, Op: events.OpUnsubscribe}
	res, err := f.invoker(inv.Sender).InvokeAs(ctx, inv, &invoke.Watch{})
	switch {
	case err != nil:
		f.log.Warn("mcp facade: a subscription to a resource was not given up", "resource", k.entry, "uri", k.uri, "err", err)
	case res.Error != nil:
		f.log.Warn("mcp facade: a subscription to a resource was not given up", "resource", k.entry, "uri", k.uri, "err", res.Error.Message)
	}
	// Given up or not, it is not the facade's any more: a hold the
	// executor kept goes with its session of the server.
	s.mu.Lock()
	h.taken = false
	s.mu.Unlock()
}

// followUpdates has the facade hear the updates of every server's
// resources and tell the client sessions subscribed to them.
func (f *Facade) followUpdates() (*nats.Subscription, error) {
	return f.cfg.Conn.Subscribe(events.SubjectMCPUpdatedAll, func(m *nats.Msg) {
		u, err := events.Decode[events.MCPResourceUpdated](m.Data)
		if err != nil {
			f.log.Debug("mcp facade: an update of a resource does not decode", "err", err)
			return
		}
		for _, sid := range f.subs.sessionsOf(u.Server, u.URI) {
			err := f.srv.SendNotificationToSpecificClient(sid, mcp.MethodNotificationResourceUpdated, map[string]any{"uri": u.URI})
			if errors.Is(err, mcpserver.ErrSessionNotFound) {
				// It ended while it subscribed.
				f.endSession(sid)
			}
		}
	})
}

// closeSubscriptions gives up every subscription the facade holds at the
// executors, and takes no more.
func (f *Facade) closeSubscriptions() {
	s := &f.subs
	s.mu.Lock()
	s.closed = true
	s.sessions, s.byURI = nil, nil
	type use struct {
		k holdKey
		h *hold
	}
	var all []use
	for k, h := range s.holds {
		h.sessions = 0
		h.users++
		all = append(all, use{k, h})
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	for _, u := range all {
		s.releasing.Go(func() { f.settle(ctx, u.k, u.h) })
	}
	s.releasing.Wait()
}
