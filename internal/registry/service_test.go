package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.NATSLeaks()...) }

var registryID = events.Identity{ID: "registry@test", Role: "registry"}

func startService(t *testing.T, b *bus.Bus, s Settings) *Service {
	t.Helper()
	svc, err := Start(context.Background(), b.Conn(), b.JetStream(), Config{Settings: s, Identity: registryID, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatalf("start registry: %v", err)
	}
	t.Cleanup(func() { svc.Stop() })
	return svc
}

func client(b *bus.Bus) *Client {
	return NewClient(b.Conn(), events.Identity{ID: "cli@test", Role: "cli"})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func registerAll(t *testing.T, c *Client, reqs ...*events.RegisterRequest) {
	t.Helper()
	for _, req := range reqs {
		reply, err := c.Register(ctxT(t), req)
		if err != nil {
			t.Fatalf("register: %v", err)
		}
		for _, o := range reply.Tools {
			if o.Error != "" {
				t.Fatalf("tool %s rejected: %s", o.Requested, o.Error)
			}
		}
	}
}

func load(t *testing.T, b *bus.Bus) *catalog.Catalog {
	t.Helper()
	c, err := catalog.Load(ctxT(t), b.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatalf("load catalogue: %v", err)
	}
	return c
}

func TestTwoConnectionsSeeTheSameCatalogue(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	svc := startService(t, b, Settings{})
	provider := bustest.Connect(t, b)
	reader := bustest.Connect(t, b)

	registerAll(t, client(provider), builtinReq("exec@test", builtin.Specs()...), mcpReq("github", spec("read_file"), spec("create_issue")))

	local, remote := svc.Registry().Catalog(), load(t, reader)
	if !slices.Equal(remote.AllToolNames(), local.AllToolNames()) {
		t.Fatalf("reader sees %v, registry has %v", remote.AllToolNames(), local.AllToolNames())
	}
	if remote.Len() != len(builtin.Specs())+2 {
		t.Errorf("reader sees %d tools, want %d", remote.Len(), len(builtin.Specs())+2)
	}
	for f := catalog.Gemini; f <= catalog.MCP; f++ {
		if string(remote.Declarations(f)) != string(local.Declarations(f)) {
			t.Errorf("%s declarations differ between the registry and a reader", f)
		}
	}
	if tool, ok := remote.GetTool("str_replace"); !ok || tool.Name != "replace" {
		t.Errorf("reader resolves str_replace to %v", tool)
	}

	// A replica on a third connection follows changes as they happen.
	follower := bustest.Connect(t, b)
	rep, err := catalog.Follow(ctxT(t), follower.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	if rep.Catalog().Len() != remote.Len() {
		t.Fatalf("replica starts with %d tools, want %d", rep.Catalog().Len(), remote.Len())
	}
	if _, err := client(provider).Toggle(ctxT(t), &events.ToggleRequest{Enable: false, Names: []string{"run_shell_command"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client(provider).Remove(ctxT(t), &events.RemoveRequest{Server: "github"}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, 10*time.Second, "the replica sees the toggle and the removal", func() bool {
		c := rep.Catalog()
		_, shell := c.GetTool("run_shell_command")
		_, issue := c.Lookup("create_issue")
		return !shell && !issue
	})
}

func TestCatalogueSurvivesRegistryAndBusRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := bustest.Start(t, dir)
	svc := startService(t, b, Settings{})
	registerAll(t, client(b), builtinReq("exec@test", builtin.Specs()...), discoveredReq(spec("lint")), mcpReq("gh", spec("issue")))
	if _, err := client(b).Toggle(ctxT(t), &events.ToggleRequest{Enable: false, Names: []string{"glob"}}); err != nil {
		t.Fatal(err)
	}
	before := svc.Registry().Catalog().All()

	same := func(t *testing.T, after []*events.Tool) {
		t.Helper()
		if len(after) != len(before) {
			t.Fatalf("%d tools after restart, %d before", len(after), len(before))
		}
		for i := range before {
			a, _ := json.Marshal(after[i])
			w, _ := json.Marshal(before[i])
			if string(a) != string(w) {
				t.Errorf("after restart:\n%s\nbefore:\n%s", a, w)
			}
		}
	}

	// Registry restart on the same bus, with a key in the bucket that is
	// no shard (an older format's, or another writer's): it is purged,
	// and the catalogue stays as it was.
	kv, err := b.JetStream().KeyValue(ctxT(t), events.CatalogBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctxT(t), "cmVhZF9maWxl", []byte(`{"v":1,"name":"read_file"}`)); err != nil {
		t.Fatal(err)
	}
	svc.Stop()
	svc = startService(t, b, Settings{})
	same(t, svc.Registry().Catalog().All())
	same(t, load(t, b).All())
	if _, err := kv.Get(ctxT(t), "cmVhZF9maWxl"); err == nil {
		t.Error("the stray key is still there")
	}
	if _, active := svc.Registry().Catalog().GetTool("glob"); active {
		t.Error("the run-time toggle of glob was lost")
	}
	// New registrations continue the sequence, so the order holds.
	registerAll(t, client(b), discoveredReq(spec("fmt")))
	if names := svc.Registry().Catalog().AllToolNames(); !slices.Equal(names[len(names)-3:], []string{"lint", "fmt", "issue"}) {
		t.Errorf("order after restart: %v", names)
	}
	registerAll(t, client(b), &events.RegisterRequest{Provider: "discovery", Source: events.SourceDiscovered, Tools: []events.ToolSpec{spec("lint")}, Replace: true})
	before = svc.Registry().Catalog().All()

	// Whole bus restart from its data directory, with new settings.
	svc.Stop()
	bustest.Stop(t, b)
	b = bustest.Start(t, dir)
	changes := make(chan *nats.Msg, 10)
	sub, err := b.Conn().ChanSubscribe(events.SubjectCatalogChanged, changes)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	svc = startService(t, b, Settings{Exclude: []string{"lint"}})
	after := svc.Registry().Catalog()
	if tool, _ := after.Lookup("lint"); tool == nil || tool.Active {
		t.Fatalf("lint after restart with tools.exclude: %+v", tool)
	}
	if after.Len() != len(before) {
		t.Errorf("%d tools after the bus restart, want %d", after.Len(), len(before))
	}
	select {
	case m := <-changes:
		ev, err := events.Decode[events.CatalogChanged](m.Data)
		if err != nil || ev.Cause != "restore" || ev.Changes[0] != (events.Change{Op: events.OpDeactivated, Name: "lint", Warning: "excluded by tools.exclude in settings.json (take it out, or toolbus tools enable lint)"}) {
			t.Errorf("restore event %+v (%v)", ev, err)
		}
	case <-time.After(10 * time.Second):
		t.Error("no event for the change the new settings made")
	}
}

func TestEveryChangeIsAnEventInTheAuditStream(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	startService(t, b, Settings{})
	req := mcpReq("gh", spec("issue"))
	registerAll(t, client(b), req)
	if _, err := client(b).Remove(ctxT(t), &events.RemoveRequest{Names: []string{"issue"}}); err != nil {
		t.Fatal(err)
	}

	// Replay the audit stream: the request and both change events are in it.
	cons, err := b.JetStream().OrderedConsumer(ctxT(t), events.AuditStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	var changed []*events.CatalogChanged
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, msg.Subject())
		if msg.Subject() == events.SubjectCatalogChanged {
			ev, err := events.Decode[events.CatalogChanged](msg.Data())
			if err != nil {
				t.Fatalf("audit event does not decode: %v", err)
			}
			changed = append(changed, ev)
		}
	}
	want := []string{events.SubjectRegister, events.SubjectCatalogChanged, events.SubjectRegistryRemove, events.SubjectCatalogChanged}
	if !slices.Equal(subjects, want) {
		t.Fatalf("audit stream holds %v, want %v", subjects, want)
	}
	if changed[0].Cause != req.ID || changed[0].Changes[0] != (events.Change{Op: events.OpAdded, Name: "issue"}) {
		t.Errorf("first change event: %+v", changed[0])
	}
	if changed[1].Changes[0] != (events.Change{Op: events.OpRemoved, Name: "issue"}) || changed[1].Sender.ID != registryID.ID {
		t.Errorf("second change event: %+v", changed[1])
	}
}

func TestNoRegistryFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	// A deadline far longer than any test: the call must not wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := client(b).Register(ctx, builtinReq("exec", spec("x")))
	if !errors.Is(err, ErrNoRegistry) {
		t.Fatalf("got %v, want ErrNoRegistry", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call waited for its deadline")
	}
}

func TestMalformedRequestsGetAClearErrorAndChangeNothing(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	svc := startService(t, b, Settings{})
	registerAll(t, client(b), discoveredReq(spec("lint")))
	tests := []struct {
		subject, body, says string
	}{
		{events.SubjectRegister, `{"v":1,"type":"tool.register.request"`, "malformed envelope"},
		{events.SubjectRegister, `{"v":9,"type":"tool.register.request"}`, "unsupported envelope version"},
		{events.SubjectRegister, `{"v":1,"type":"tool.invocation","id":"x","sender":{"id":"a"}}`, `want "tool.register.request"`},
		{events.SubjectRegister, `{"v":1,"type":"tool.register.request","id":"x","sender":{"id":"a"},"provider":"p","source":"plugin"}`, `unknown source "plugin"`},
		{events.SubjectRegistryRemove, `{"v":1,"type":"tool.registry.remove","id":"x","sender":{"id":"a"}}`, "nothing selected"},
		{events.SubjectRegistryToggle, `not json at all`, "malformed envelope"},
	}
	for _, tt := range tests {
		msg, err := b.Conn().Request(events.Request(tt.subject), []byte(tt.body), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if got := msg.Header.Get("Nats-Service-Error"); !strings.Contains(got, tt.says) {
			t.Errorf("%s: error %q, want it to say %q", tt.body, got, tt.says)
		}
	}
	if names := svc.Registry().Catalog().AllToolNames(); !slices.Equal(names, []string{"lint"}) {
		t.Errorf("catalogue changed to %v", names)
	}
	registerAll(t, client(b), discoveredReq(spec("fmt")))
}

func TestRegistrationLargerThanOneMessageIsChunked(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	svc := startService(t, b, Settings{})
	req := &events.RegisterRequest{Provider: "discovery", Source: events.SourceDiscovered, Replace: true}
	desc := strings.Repeat("d", 1000)
	for i := range 3000 {
		req.Tools = append(req.Tools, events.ToolSpec{Name: fmt.Sprintf("tool_%04d", i), Description: desc})
	}
	if data, _ := json.Marshal(req); len(data) <= int(b.Conn().MaxPayload()) {
		t.Fatalf("request of %d bytes fits in one message; the test needs more", len(data))
	}
	registerAll(t, client(b), req)
	if n := svc.Registry().Catalog().Len(); n != 3000 {
		t.Fatalf("%d tools registered, want 3000", n)
	}
	// The same request without half its tools drops them, across chunks.
	req.Tools = req.Tools[:1500]
	reply, err := client(b).Register(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Removed) != 1500 || svc.Registry().Catalog().Len() != 1500 {
		t.Errorf("removed %d, left %d; want 1500 and 1500", len(reply.Removed), svc.Registry().Catalog().Len())
	}
	if n := load(t, b).Len(); n != 1500 {
		t.Errorf("bucket holds %d tools, want 1500", n)
	}
}

func sameCatalogue(t *testing.T, got, want *catalog.Catalog) {
	t.Helper()
	g, w := got.All(), want.All()
	if len(g) != len(w) {
		t.Fatalf("reader sees %d tools, registry has %d", len(g), len(w))
	}
	for i := range w {
		a, _ := json.Marshal(g[i])
		b, _ := json.Marshal(w[i])
		if string(a) != string(b) {
			t.Fatalf("reader sees\n%s\nregistry has\n%s", a, b)
		}
	}
}

func TestReadersSeeTheRegistrysCatalogue(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	svc := startService(t, b, Settings{})
	c := client(b)
	req := discoveredReq()
	for i := range 2000 {
		req.Tools = append(req.Tools, spec(fmt.Sprintf("tool_%04d", i)))
	}
	registerAll(t, c, req)
	reader := bustest.Connect(t, b)
	rep, err := catalog.Follow(ctxT(t), reader.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	sameCatalogue(t, rep.Catalog(), svc.Registry().Catalog())

	// Changes after the first read: a follower and a new reader see them
	// all the same.
	registerAll(t, c, mcpReq("gh", spec("issue"), spec("tool_0001")))
	if _, err := c.Remove(ctxT(t), &events.RemoveRequest{Names: []string{"tool_0002", "tool_0003"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Toggle(ctxT(t), &events.ToggleRequest{Enable: false, Names: []string{"tool_0004"}}); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	loaded, err := catalog.Load(ctxT(t), reader.JetStream(), slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if logged.Len() > 0 {
		t.Errorf("a clean catalogue logged: %s", logged.String())
	}
	sameCatalogue(t, loaded, svc.Registry().Catalog())
	testkit.EventuallyWithin(t, 10*time.Second, "the follower catches up", func() bool { return rep.Catalog().Len() == svc.Registry().Catalog().Len() })
	sameCatalogue(t, rep.Catalog(), svc.Registry().Catalog())

	// A shard with a line that does not decode, or with a tool that
	// belongs to another shard, costs that line only; a key that is no
	// shard is ignored.
	kv, err := b.JetStream().KeyValue(ctxT(t), events.CatalogBucket)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := svc.Registry().Catalog().Lookup("tool_0010")
	victim := catalog.ShardOf(target)
	entry, err := kv.Get(ctxT(t), victim)
	if err != nil {
		t.Fatal(err)
	}
	stray := "stray" // a tool of another shard: no host
	forged, _ := json.Marshal(&events.Tool{V: events.Version, Name: stray, Kind: events.KindRead, Source: events.SourceBuiltin,
		ExportName: stray, Parameters: json.RawMessage(`{}`)})
	damaged := append(append(slices.Clone(entry.Value()), "not json\n"...), append(forged, '\n')...)
	if _, err := kv.Put(ctxT(t), victim, damaged); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctxT(t), "tool_0010", forged); err != nil {
		t.Fatal(err)
	}
	logged.Reset()
	loaded, err = catalog.Load(ctxT(t), reader.JetStream(), slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sameCatalogue(t, loaded, svc.Registry().Catalog())
	for _, says := range []string{"does not decode", "wrong shard"} {
		if !strings.Contains(logged.String(), says) {
			t.Errorf("the reader did not say %q: %s", says, logged.String())
		}
	}
}
