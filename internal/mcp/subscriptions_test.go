package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/mcpsession"
)

// backendSubs records the subscriptions the server of a fleet is asked
// for.
type backendSubs struct {
	mu                       sync.Mutex
	subscribes, unsubscribes []string
}

func (b *backendSubs) record(to *[]string, uri string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*to = append(*to, uri)
}

// seen is what the server was asked: subscriptions and their ends.
func (b *backendSubs) seen() (subscribes, unsubscribes []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.subscribes), slices.Clone(b.unsubscribes)
}

// subscribableServer is newFeatureServer taking subscriptions, which it
// records in rec.
func subscribableServer(rec *backendSubs) *server.MCPServer {
	hooks := &server.Hooks{}
	hooks.AddAfterSubscribe(func(_ context.Context, _ any, req *mcp.SubscribeRequest, _ *mcp.EmptyResult) {
		rec.record(&rec.subscribes, req.Params.URI)
	})
	hooks.AddAfterUnsubscribe(func(_ context.Context, _ any, req *mcp.UnsubscribeRequest, _ *mcp.EmptyResult) {
		rec.record(&rec.unsubscribes, req.Params.URI)
	})
	return newFeatureServer(server.WithResourceCapabilities(true, true), server.WithHooks(hooks))
}

// updateLog is the notifications/resources/updated a client got.
type updateLog struct {
	mu   sync.Mutex
	uris []string
}

func listenUpdates(c *mcpclient.Client) *updateLog {
	u := &updateLog{}
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != mcp.MethodNotificationResourceUpdated {
			return
		}
		uri, _ := n.Params.AdditionalFields["uri"].(string)
		u.mu.Lock()
		u.uris = append(u.uris, uri)
		u.mu.Unlock()
	})
	return u
}

func (u *updateLog) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.uris)
}

// waitFor waits until the client got n updates of uri, and returns all
// it got.
func (u *updateLog) waitFor(t *testing.T, uri string, n int) []string {
	t.Helper()
	return u.waitSending(t, uri, n, nil)
}

// waitSending is waitFor, calling send before each look: a server drops
// a notification its session's stream cannot take at once.
func (u *updateLog) waitSending(t *testing.T, uri string, n int, send func()) []string {
	t.Helper()
	var got []string
	if !testkit.Poll(30*time.Second, func() bool {
		if send != nil {
			send()
		}
		got = u.got()
		count := 0
		for _, g := range got {
			if g == uri {
				count++
			}
		}
		return count >= n
	}) {
		t.Fatalf("%d updates of %s never came; got %q", n, uri, got)
	}
	return got
}

func subscribe(ctx context.Context, c *mcpclient.Client, uri string) error {
	req := mcp.SubscribeRequest{}
	req.Params.URI = uri
	return c.Subscribe(ctx, req)
}

func unsubscribe(ctx context.Context, c *mcpclient.Client, uri string) error {
	req := mcp.UnsubscribeRequest{}
	req.Params.URI = uri
	return c.Unsubscribe(ctx, req)
}

func resourceUpdated(s *server.MCPServer, uri string) {
	s.SendNotificationToAllClients(mcp.MethodNotificationResourceUpdated, map[string]any{"uri": uri})
}

// A client of the facade that subscribes to a resource, or to a URI a
// template names, is told when its server says it changed, and only of
// what it subscribed to; a client that did not subscribe is told
// nothing, and after unsubscribing nothing more. The server's session is
// subscribed once for both clients, and unsubscribed when the last of
// them gives up, by unsubscribing or by ending its session. A URI
// nothing names is not subscribed to.
func TestFacadeSubscriptionsToResources(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := &backendSubs{}
	backend := subscribableServer(rec)
	_, a, url, f := featureFleetOf(t, backend, nil, true)
	b := connectHTTP(t, url, "", "other-client")
	seen := subscriptionCalls(t, f)
	updatesA, updatesB := listenUpdates(a), listenUpdates(b)

	for _, uri := range []string{"notes://readme", "notes://day/7"} {
		if err := subscribe(ctx, a, uri); err != nil {
			t.Fatalf("subscribe to %s: %v", uri, err)
		}
	}
	resourceUpdated(backend, "notes://logo") // nobody subscribed
	resourceUpdated(backend, "notes://day/8")
	resourceUpdated(backend, "notes://readme")
	resourceUpdated(backend, "notes://day/7")
	if got := updatesA.waitFor(t, "notes://day/7", 1); !slices.Equal(got, []string{"notes://readme", "notes://day/7"}) {
		t.Errorf("the client that subscribed got updates of %q, want notes://readme and notes://day/7", got)
	}

	// The other client subscribes too: the server's session is
	// subscribed already.
	if err := subscribe(ctx, b, "notes://readme"); err != nil {
		t.Fatal(err)
	}
	if subs, _ := rec.seen(); !slices.Equal(subs, []string{"notes://readme", "notes://day/7"}) {
		t.Errorf("the server was asked to subscribe to %q, want each URI once", subs)
	}
	if err := unsubscribe(ctx, a, "notes://readme"); err != nil {
		t.Fatal(err)
	}
	if _, unsubs := rec.seen(); len(unsubs) != 0 {
		t.Errorf("the server was asked to unsubscribe from %q while another client holds it", unsubs)
	}
	resourceUpdated(backend, "notes://readme")
	resourceUpdated(backend, "notes://day/7")
	updatesB.waitFor(t, "notes://readme", 1)
	if got := updatesA.waitFor(t, "notes://day/7", 2); !slices.Equal(got, []string{"notes://readme", "notes://day/7", "notes://day/7"}) {
		t.Errorf("after unsubscribing from notes://readme the client got %q", got)
	}
	if got := updatesB.got(); !slices.Equal(got, []string{"notes://readme"}) {
		t.Errorf("the other client got %q, want the one update of what it subscribed to", got)
	}

	// A URI no resource or template names.
	if err := subscribe(ctx, a, "notes://nowhere"); err == nil || !strings.Contains(err.Error(), "resource not found") {
		t.Errorf("a subscription to a URI nothing names: %v", err)
	}
	// Unsubscribing from what one does not hold is nothing.
	if err := unsubscribe(ctx, b, "notes://day/7"); err != nil {
		t.Errorf("unsubscribe from a URI not subscribed to: %v", err)
	}

	// The last client that holds notes://readme goes away.
	b.Close()
	testkit.Eventually(t, "the server's session unsubscribed from notes://readme", func() bool {
		_, unsubs := rec.seen()
		return slices.Equal(unsubs, []string{"notes://readme"})
	})

	// Every subscription was a call of the resource's entry, in the
	// audit trail; the ends of the facade's holds too.
	var ops []string
	for _, inv := range seen() {
		ops = append(ops, fmt.Sprintf("%s %s %s", inv.Op, inv.Tool, inv.Args))
	}
	want := []string{
		`subscribe resource.readme {"uri":"notes://readme"}`,
		`subscribe resource.day {"uri":"notes://day/7"}`,
		`subscribe resource.readme {"uri":"notes://readme"}`,
		`unsubscribe resource.readme {"uri":"notes://readme"}`,
		`unsubscribe resource.readme {"uri":"notes://readme"}`,
	}
	if !slices.Equal(ops, want) {
		t.Errorf("the calls recorded:\n%s\nwant\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
}

// subscriptionCalls collects the invocations of subscriptions on the bus,
// as the audit stream keeps them.
func subscriptionCalls(t *testing.T, f *fleet) func() []*events.Invocation {
	t.Helper()
	var mu sync.Mutex
	var got []*events.Invocation
	nc := bustest.Connect(t, f.bus).Conn()
	sub, err := nc.Subscribe(events.InvokeSubject("*"), func(m *nats.Msg) {
		if inv, err := events.Decode[events.Invocation](m.Data); err == nil && inv.Op != events.OpRun {
			mu.Lock()
			got = append(got, inv)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	t.Cleanup(func() { sub.Unsubscribe() })
	return func() []*events.Invocation {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// A subscription is judged as a read: one to a key file is denied
// whatever the server's trust, and its updates reach nobody; one to a
// resource of a server that is not trusted asks, which with no approver
// is a refusal. A server that does not take subscriptions says so.
func TestFacadeJudgesSubscriptions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	backend := subscribableServer(&backendSubs{})
	_, trusted, _, _ := featureFleetOf(t, backend, nil, true)
	updates := listenUpdates(trusted)
	if err := subscribe(ctx, trusted, "file:///home/ada/.ssh/id_rsa"); err == nil || !strings.Contains(err.Error(), "POLICY_DENIED") {
		t.Errorf("a subscription to a key file of a trusted server: %v", err)
	}
	if err := subscribe(ctx, trusted, "notes://readme"); err != nil {
		t.Fatal(err)
	}
	resourceUpdated(backend, "file:///home/ada/.ssh/id_rsa")
	resourceUpdated(backend, "notes://readme")
	if got := updates.waitFor(t, "notes://readme", 1); !slices.Equal(got, []string{"notes://readme"}) {
		t.Errorf("the client got updates of %q, want notes://readme alone", got)
	}

	_, untrusted, _, _ := featureFleetOf(t, subscribableServer(&backendSubs{}), nil, false)
	if err := subscribe(ctx, untrusted, "notes://readme"); err == nil || !strings.Contains(err.Error(), "POLICY_DENIED") || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("a subscription to a resource of a server that is not trusted, no approver: %v", err)
	}

	_, plain, _, _ := featureFleetOf(t, newFeatureServer(), nil, true)
	if err := subscribe(ctx, plain, "notes://readme"); err == nil || !strings.Contains(err.Error(), "does not declare resources.subscribe") {
		t.Errorf("a subscription to a resource of a server that takes none: %v", err)
	}
}

// A server that says its resources changed as fast as it can puts a
// bounded number of updates on the bus: one every 50 ms at most, each URI
// once while it waits; the clients subscribed are told of each URI.
func TestResourceUpdateFloodIsBounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	backend := subscribableServer(&backendSubs{})
	_, client, _, f := featureFleetOf(t, backend, nil, true)
	updates := listenUpdates(client)
	uris := []string{"notes://readme", "notes://day/1", "notes://day/2", "notes://day/3", "notes://day/last"}
	for _, uri := range uris {
		if err := subscribe(ctx, client, uri); err != nil {
			t.Fatal(err)
		}
	}
	nc := bustest.Connect(t, f.bus).Conn()
	var mu sync.Mutex
	published := 0
	sub, err := nc.Subscribe(events.SubjectMCPUpdatedAll, func(*nats.Msg) {
		mu.Lock()
		published++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()

	began := time.Now()
	const sent = 2000
	for i := range sent {
		resourceUpdated(backend, uris[i%(len(uris)-1)])
	}
	updates.waitSending(t, "notes://day/last", 1, func() { resourceUpdated(backend, "notes://day/last") })
	elapsed := time.Since(began)
	mu.Lock()
	n := published
	mu.Unlock()
	if bound := int(elapsed/(50*time.Millisecond)) + 1; n > bound {
		t.Errorf("%d updates of %d sent reached the bus in %s, more than one every 50 ms (%d)", n, sent+1, elapsed, bound)
	}
	for _, uri := range uris {
		if !slices.Contains(updates.got(), uri) {
			t.Errorf("the client was never told of %s", uri)
		}
	}
	t.Logf("%d updates sent, %d published, in %s", sent+1, n, elapsed)
}

// A client of protocol 2026-07-28 asks for a resource's updates in
// subscriptions/listen, whose stream mcp-go v1.2.1 cannot send them on:
// the facade's acknowledgement establishes what it serves (list
// changes) and not the resource.
func TestFacadeAcknowledgesNoResourceSubscriptionToAModernClient(t *testing.T) {
	t.Parallel()
	_, _, url, _ := featureFleetOf(t, subscribableServer(&backendSubs{}), nil, true)
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPLogger(bustest.Quiet()), transport.WithHTTPHeaders(testAuth))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr)
	mcpsession.InitializeModern(t, c, "modern-client", "1.0")
	acks := make(chan map[string]any, 1)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == mcp.MethodNotificationSubscriptionsAcknowledged {
			established, _ := n.Params.AdditionalFields["notifications"].(map[string]any)
			acks <- established
		}
	})
	stop, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ResourcesListChanged: true, ResourceSubscriptions: []string{"notes://readme"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case got := <-acks:
		if want := map[string]any{"resourcesListChanged": true}; !reflect.DeepEqual(got, want) {
			t.Errorf("the facade established %v, want %v", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("subscriptions/listen was never acknowledged")
	}
}

// A server whose session with the executor ends (it forgot it) is
// connected to again, and its new session subscribed again to what the
// clients hold: their updates keep coming.
func TestSubscriptionsOutliveTheServersSession(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := &backendSubs{}
	backend := subscribableServer(rec)
	amnesia := &amnesiac{}
	_, client, _, f := featureFleetOf(t, backend, amnesia.wrap, true)
	updates := listenUpdates(client)
	if err := subscribe(ctx, client, "notes://readme"); err != nil {
		t.Fatal(err)
	}
	amnesia.forget()
	// A read that fails on the forgotten session ends it.
	var res *events.Result
	if !testkit.Poll(60*time.Second, func() bool {
		res = f.call(t, "resource.readme", `{"uri":"notes://readme"}`, nil)
		return res.Error == nil
	}) {
		t.Fatalf("the resource was never read again after the server forgot its session: %+v", res)
	}
	testkit.Eventually(t, "the new session subscribed to notes://readme", func() bool {
		subs, _ := rec.seen()
		return slices.Equal(subs, []string{"notes://readme", "notes://readme"})
	})
	updates.waitSending(t, "notes://readme", 1, func() { resourceUpdated(backend, "notes://readme") })
}

// amnesiac answers 404, as a server that restarted does, to a request of
// a session it knew before forget.
type amnesiac struct {
	mu               sync.Mutex
	known, forgotten map[string]bool
}

func (a *amnesiac) forget() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgotten, a.known = a.known, nil
}

func (a *amnesiac) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		gone := a.forgotten[r.Header.Get("Mcp-Session-Id")]
		a.mu.Unlock()
		if gone {
			http.Error(w, "unknown session", http.StatusNotFound)
			return
		}
		h.ServeHTTP(&sessionRecorder{ResponseWriter: w, record: func(id string) {
			a.mu.Lock()
			if a.known == nil {
				a.known = map[string]bool{}
			}
			a.known[id] = true
			a.mu.Unlock()
		}}, r)
	})
}
