package auth_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestOnlyExecutorsTellCounts: an attacker has heard what an executor
// tells the fleet of a victim's call (the victim's session and its
// repeats, as count keys) and tells the executors the same counts, each
// pushed a million past the budgets, so that every further call of the
// victim's session is denied. The bus refuses it from an agent and from
// every member but an executor, and the victim's calls go on. Were the
// bus to let it through, the executor would take it in: the same count
// told by another executor denies the victim's next call.
func TestOnlyExecutorsTellCounts(t *testing.T) {
	f := startFleet(t)
	agent := f.as(t, "agent")
	victim := invoke.NewClient(agent.Conn(), events.Identity{ID: "agent", Role: "agent", Session: "s1"}, agent.Principal())
	defer victim.Close()
	read := func() *events.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := victim.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// What the executor tells of the victim's call, heard as another
	// executor hears it.
	other := f.as(t, "executor2")
	sub, err := other.Conn().SubscribeSync(events.CountSubject)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() // what it did not read would hold up the connection's drain
	if err := other.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if res := read(); res.Error != nil {
		t.Fatalf("the victim's first call: %s", res.LLMContent)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the executor told nothing of the victim's call: %v", err)
	}
	told, err := events.DecodeCounted(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	forged := *told
	forged.From = "executor2#forged" // not the executor's own, which it skips
	forged.Adds = append([]events.CountAdd(nil), told.Adds...)
	for i := range forged.Adds {
		forged.Adds[i].N = 1_000_000
	}
	data, err := events.EncodeCounted(&forged)
	if err != nil {
		t.Fatal(err)
	}
	heard := f.executor.Counts().Heard()
	for _, member := range []string{"mallory", "eve", "trent", "facade2", "registry", "approver"} {
		if err := f.as(t, member).Conn().Publish(events.CountSubject, data); err != nil {
			t.Fatal(err)
		}
		f.violated(t, member, "tell the executors a count", events.CountSubject)
	}
	// A count of nothing, told by an executor after the refusals: once
	// the executor has it, it has whatever the bus let through before.
	sentinel, err := events.EncodeCounted(&events.Counted{V: events.CountVersion, From: "executor2#sentinel",
		Adds: []events.CountAdd{{Key: "sentinel", N: 1, Until: time.Now().Add(time.Hour).UnixMilli()}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Conn().Publish(events.CountSubject, sentinel); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the executor heard the sentinel", func() bool { return f.executor.Counts().Value("sentinel") == 1 })
	if n := f.executor.Counts().Heard(); n != heard+1 {
		t.Errorf("the executor heard %d count messages, want the sentinel alone", n-heard)
	}
	if res := read(); res.Error != nil {
		t.Fatalf("the victim's call after the refused counts: %s %s", res.Error.Type, res.LLMContent)
	}

	// The defence gone: the same count from an executor is taken in.
	heard = f.executor.Counts().Heard()
	if err := other.Conn().Publish(events.CountSubject, data); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the executor heard the forged count", func() bool { return f.executor.Counts().Heard() > heard })
	res := read()
	if res.Error == nil || res.Error.Type != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "past its budget") {
		t.Errorf("the victim's call after an executor's forged count: %+v %q, want denied past its budget", res.Error, res.LLMContent)
	}
	f.clean(t, "executor", "executor2", "agent")
}
