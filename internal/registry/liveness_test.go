package registry

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// answerAsExecutor answers the registry's pings as executor id on nc, as
// an executor's service does, until the returned service is stopped.
func answerAsExecutor(t *testing.T, nc *nats.Conn, id string) micro.Service {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{Name: events.ExecutorService, Version: ServiceVersion, Metadata: map[string]string{"id": id}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	return svc
}

// registerAsExecutor registers tool as executor id's own built-in, as an
// executor does.
func registerAsExecutor(t *testing.T, nc *nats.Conn, id, tool string) {
	t.Helper()
	c := NewClient(nc, events.Identity{ID: id, Role: "executor"})
	if _, err := c.Register(ctxT(t), &events.RegisterRequest{Provider: id, Source: events.SourceBuiltin, Tools: []events.ToolSpec{spec(tool)}, Replace: true}); err != nil {
		t.Fatal(err)
	}
}

// hosts is who the catalogue bucket says hosts tool.
func hosts(t *testing.T, b *bus.Bus, tool string) []string {
	t.Helper()
	if found, ok := load(t, b).Lookup(tool); ok {
		return found.Hosts
	}
	return nil
}

// roundsDone is how many ping rounds svc has done.
func (s *Service) roundsDone() int {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	return s.rounds
}

// The registry's pings go nowhere while its own connection is away: a
// bus that is down for longer than LostAfter pings takes no executor for
// lost. (It did, and its save failing while the bus was down, told none
// of them: the next save after the bus came back took their tools out
// of the catalogue for good, every call then TOOL_NOT_FOUND.)
func TestABusOutageTakesNoExecutorForLost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(listen string) *busnode.Node {
		node, err := busnode.Start(context.Background(), busnode.Config{Listen: listen, DataDir: dir, Name: t.Name(), Logger: bustest.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return node
	}
	// Stopped after the connections: they are closed while it runs.
	var node *busnode.Node
	t.Cleanup(func() {
		if node != nil {
			bustest.Stop(t, node)
		}
	})
	node = start("127.0.0.1:0")
	url := node.URL()
	connect := func() *bus.Bus {
		b, err := bus.Connect(context.Background(), bus.Config{URL: url, Name: t.Name(), Logger: bustest.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bustest.Stop(t, b) })
		return b
	}
	regBus, exBus := connect(), connect()
	svc := startService(t, regBus, Settings{})
	if err := regBus.Conn().Flush(); err != nil { // the server has its subscriptions
		t.Fatal(err)
	}
	answerAsExecutor(t, exBus.Conn(), "executor@outage")
	registerAsExecutor(t, exBus.Conn(), "executor@outage", "outage_tool")
	if !svc.Watching("executor@outage") {
		t.Fatal("the registry does not watch the executor that registered")
	}

	bustest.Stop(t, node)
	node = nil
	testkit.Eventually(t, "the registry's connection is away", func() bool { return !regBus.Conn().IsConnected() })
	away := svc.roundsDone()
	testkit.Eventually(t, "more ping rounds than LostAfter with the bus away", func() bool { return svc.roundsDone() > away+LostAfter })
	node = start(strings.TrimPrefix(url, "nats://"))
	testkit.Eventually(t, "both connections are back", func() bool { return regBus.Conn().IsConnected() && exBus.Conn().IsConnected() })

	// Any registration saves the catalogue: what the registry holds is
	// written.
	registerAll(t, client(regBus), discoveredReq(spec("after_outage")))
	if got := hosts(t, regBus, "outage_tool"); !slices.Equal(got, []string{"executor@outage"}) {
		t.Errorf("after the outage, outage_tool is hosted by %v, want executor@outage", got)
	}
	if !svc.Watching("executor@outage") {
		t.Error("the registry stopped watching the executor")
	}
}

// An executor taken for lost may not hear it (its connection was away
// when the registry said so): each time it answers again, until it has
// registered again, the registry tells it once more.
func TestALostExecutorIsToldAgainWhenItAnswers(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	svc := startService(t, b, Settings{})
	exConn := bustest.Connect(t, b).Conn()
	answering := answerAsExecutor(t, exConn, "executor@deaf")
	registerAsExecutor(t, exConn, "executor@deaf", "deaf_tool")
	testkit.Eventually(t, "the registry has seen it answer", func() bool { return svc.roundsDone() > 0 })

	answering.Stop()
	testkit.Eventually(t, "the registry takes it for lost", func() bool { return !svc.Watching("executor@deaf") })
	// The round that took it for lost has said so, unheard.
	lostAt := svc.roundsDone()
	testkit.Eventually(t, "the round after", func() bool { return svc.roundsDone() > lostAt })
	if got := hosts(t, b, "deaf_tool"); len(got) != 0 {
		t.Fatalf("deaf_tool is still hosted by %v", got)
	}

	told := make(chan *nats.Msg, 16)
	sub, err := exConn.ChanSubscribe(events.SubjectCatalogChanged, told)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	answerAsExecutor(t, exConn, "executor@deaf")
	for heard := false; !heard; {
		select {
		case m := <-told:
			ev, err := events.Decode[events.CatalogChanged](m.Data)
			heard = err == nil && ev.Cause == events.LostCause("executor@deaf")
		case <-ctxT(t).Done():
			t.Fatal("the executor answering again was not told it had been taken for lost")
		}
	}
	registerAsExecutor(t, exConn, "executor@deaf", "deaf_tool")
	if got := hosts(t, b, "deaf_tool"); !slices.Equal(got, []string{"executor@deaf"}) {
		t.Errorf("registered again, deaf_tool is hosted by %v", got)
	}
	svc.watchMu.Lock()
	_, stillLost := svc.lost["executor@deaf"]
	svc.watchMu.Unlock()
	if stillLost {
		t.Error("registered again, it is still told it was lost")
	}
}
