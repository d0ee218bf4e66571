package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// startWorkspace starts another executor as id, on a connection of its
// own (returned, for a test to cut), hosting the built-in tools over a
// new workspace named name whose README.md says so.
func (e *env) startWorkspace(t *testing.T, id, name string) (*Executor, *bus.Bus) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# workspace "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := builtin.NewWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	conn := bustest.Connect(t, e.bus)
	return startOn(t, conn, ws, func(c *Config) { c.Identity, c.WorkspaceName = events.Identity{ID: id}, name }), conn
}

// readIn reads README.md in workspace through the env's client.
func (e *env) readIn(t *testing.T, workspace string) *events.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.client.Invoke(ctx, &events.Invocation{Tool: "read_file", Workspace: workspace, Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// hostedFor waits until every executor's catalogue says read_file's
// hosts are want (by workspace).
func hostedFor(t *testing.T, want map[string]string, exs ...*Executor) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("read_file's hosts are %v", want), func() bool {
		for _, ex := range exs {
			rf, ok := ex.Catalog().GetTool("read_file")
			if !ok || len(rf.Workspaces) != len(want) {
				return false
			}
			for h, w := range want {
				if rf.Workspaces[h] != w {
					return false
				}
			}
		}
		return true
	})
}

// A call of a workspace-bound tool runs in the workspace it names, on
// any executor of that workspace and on no other; one that names none
// while there are several is refused, never sent to one of them; one
// whose workspace has no executor left fails at once, saying so.
func TestCallsGoToTheirWorkspace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.WorkspaceName = "one" })
	two, _ := e.startWorkspace(t, "executor@two", "two")
	twoAgain, _ := e.startWorkspace(t, "executor@two-again", "two")
	hostedFor(t, map[string]string{"executor@test": "one", "executor@two": "two", "executor@two-again": "two"}, e.exec, two, twoAgain)

	read := func(workspace string) *events.Result { return e.readIn(t, workspace) }
	served := map[string]int{}
	for range 30 {
		res := read("two")
		if res.Error != nil || !strings.Contains(res.LLMContent, "# workspace two") {
			t.Fatalf("a call for workspace two: %+v", res)
		}
		served[res.Sender.ID]++
	}
	if served["executor@two"] == 0 || served["executor@two-again"] == 0 || len(served) != 2 {
		t.Errorf("workspace two's executors did not share its calls: %v", served)
	}
	if res := read("one"); res.Error != nil || !strings.Contains(res.LLMContent, "# hello") {
		t.Fatalf("a call for workspace one: %+v", res)
	}
	if res := read(""); errType(res) != events.ErrInvalidParams || !strings.Contains(res.Error.Message, `"one", "two"`) {
		t.Errorf("a call naming no workspace, with two to choose from: %+v", res.Error)
	}
	if res := read("three"); errType(res) != events.ErrInvalidParams || !strings.Contains(res.Error.Message, `workspace "three"`) {
		t.Errorf("a call for a workspace nobody has: %+v", res.Error)
	}

	// Workspace two's executors go: its calls fail at once; a call that
	// names none now has one workspace to go to.
	for _, ex := range []*Executor{two, twoAgain} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ex.Stop(ctx)
		cancel()
	}
	hostedFor(t, map[string]string{"executor@test": "one"}, e.exec)
	start := time.Now()
	if res := read("two"); errType(res) != events.ErrInvalidParams || !strings.Contains(res.Error.Message, `workspace "two"`) {
		t.Errorf("a call for a workspace whose executors are gone: %+v", res.Error)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("note: the refusal took %s", d) // reported, not asserted: tests do not assert on time
	}
	if res := read(""); res.Error != nil || !strings.Contains(res.LLMContent, "# hello") {
		t.Errorf("a call naming no workspace, with one left: %+v", res)
	}
}

// An executor that stops leaves the parts that share its connection
// running (`toolbus up` runs the registry, an executor and the console's
// approver over one): its second connection, for outputs, used to carry
// the first one's closed handler, through which nats.go's micro package
// stopped every service of the first connection.
func TestStoppingAnExecutorLeavesItsNeighboursRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.exec.Stop(ctx)
	if _, err := e.bus.Conn().Request("$SRV.PING."+events.RegistryService, nil, 2*time.Second); err != nil {
		t.Fatalf("the registry on the executor's connection: %v", err)
	}
}

// An executor that dies without stopping is taken off its tools' hosts
// by the registry once it misses its pings: calls for its workspace then
// fail at once, saying so, and the others' go on. One that comes back
// registers again: restarted, or, its connection back, when it hears
// that the registry took it for lost.
func TestALostExecutorLeavesAndComesBack(t *testing.T) {
	// Its own bus; it waits out the liveness timers, which overlap with
	// other tests' waits.
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.WorkspaceName = "one" })
	doomed, conn := e.startWorkspace(t, "executor@doomed", "two")
	hostedFor(t, map[string]string{"executor@test": "one", "executor@doomed": "two"}, e.exec)
	read := func(workspace string) *events.Result { return e.readIn(t, workspace) }
	if res := read("two"); res.Error != nil {
		t.Fatalf("before: %+v", res.Error)
	}
	// Its connection drops, with no goodbye, once the registry knows it.
	testkit.Eventually(t, "the registry watches executor@doomed", func() bool { return e.reg.Watching("executor@doomed") })
	conn.Conn().Close()
	hostedFor(t, map[string]string{"executor@test": "one"}, e.exec)
	if res := read("two"); errType(res) != events.ErrInvalidParams || !strings.Contains(res.Error.Message, `workspace "two"`) {
		t.Errorf("a call for the lost executor's workspace: %+v", res.Error)
	}
	if res := read("one"); res.Error != nil {
		t.Errorf("a call for the other workspace: %+v", res.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	doomed.Stop(ctx)
	cancel()

	// It comes back: restarted, it registers at start.
	back, backConn := e.startWorkspace(t, "executor@doomed", "two")
	hostedFor(t, map[string]string{"executor@test": "one", "executor@doomed": "two"}, e.exec, back)
	if res := read("two"); res.Error != nil || !strings.Contains(res.LLMContent, "# workspace two") {
		t.Errorf("after it came back: %+v", res)
	}

	// Taken for lost while it was there after all: it registers again.
	reg := registry.NewClient(e.bus.Conn(), events.Identity{ID: "test"})
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := reg.Remove(ctx, &events.RemoveRequest{Header: events.Header{Sender: events.Identity{ID: "test"}}, Provider: "executor@doomed"}); err != nil {
		t.Fatal(err)
	}
	hostedFor(t, map[string]string{"executor@test": "one"}, e.exec)
	data, _ := events.Encode(&events.CatalogChanged{Header: events.Header{Sender: events.Identity{ID: "registry"}}, Cause: events.LostCause("executor@doomed"),
		Changes: []events.Change{{Op: events.OpUpdated, Name: "read_file"}}})
	e.bus.Conn().Publish(events.SubjectCatalogChanged, data)
	hostedFor(t, map[string]string{"executor@test": "one", "executor@doomed": "two"}, e.exec)

	// Taken for lost by the registry (it stops answering pings), it
	// hears so and registers again; then it dies before it ever answers
	// a ping again. The registry watches it from its registration: it is
	// taken off once more.
	testkit.Eventually(t, "the registry watches executor@doomed", func() bool { return e.reg.Watching("executor@doomed") })
	back.svc.Stop()
	hostedFor(t, map[string]string{"executor@test": "one"}, e.exec)
	hostedFor(t, map[string]string{"executor@test": "one", "executor@doomed": "two"}, e.exec)
	backConn.Conn().Close()
	hostedFor(t, map[string]string{"executor@test": "one"}, e.exec)
}

// The decision cache keeps a proven caller and a claim to its name apart:
// a policy that allows only proven callers must deny the claim, even
// right after it allowed the same call to the caller itself.
func TestAClaimNeverReusesAProvenCallersVerdict(t *testing.T) {
	t.Parallel()
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": `package toolbus

decision := {"verdict": "ALLOW", "reason": "proven", "remember": false} if {
	input.caller.proven
} else := {"verdict": "DENY", "reason": "a claim", "remember": false}
`})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Policy, c.IdentitiesEnforced = pol, true })
	nc := bustest.Connect(t, e.bus).Conn()
	call := func(subject, id string) *events.Result {
		t.Helper()
		data, err := events.Encode(&events.Invocation{Header: events.Header{ID: id, Sender: events.Identity{ID: "agent"}},
			Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)})
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.Request(subject, data, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		res, err := events.Decode[events.Result](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call(events.InvokeSubject("agent"), "proven"); res.Error != nil {
		t.Fatalf("the proven caller: %+v", res.Error)
	}
	if res := call(events.InvokeSubject(""), "claim"); errType(res) != events.ErrPolicyDenied {
		t.Fatalf("a claim to the proven caller's name got %s: %s", errType(res), res.LLMContent)
	}
}

// hostsFor against the plain grouping it stands for, on every small
// catalogue entry: two hosts, each with no workspace or one of two.
func TestHostsForMatchesTheGrouping(t *testing.T) {
	t.Parallel()
	wss := []string{"", "a", "b"}
	for _, w1 := range wss {
		for _, w2 := range wss {
			for _, asked := range wss {
				tl := &events.Tool{Name: "read_file", Source: events.SourceBuiltin, Hosts: []string{"x", "y"}, Workspaces: map[string]string{}}
				if w1 != "" {
					tl.Workspaces["x"] = w1
				}
				if w2 != "" {
					tl.Workspaces["y"] = w2
				}
				var want []string
				switch {
				case asked != "":
					for h, w := range map[string]string{"x": w1, "y": w2} {
						if w == asked {
							want = append(want, h)
						}
					}
				case w1 == w2:
					want = []string{"x", "y"}
				}
				got, err := hostsFor(tl, asked)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) || (err == nil) != (len(want) > 0) {
					t.Errorf("hosts x:%q y:%q, asked %q: %v %v, want %v", w1, w2, asked, got, err, want)
				}
			}
		}
	}
}

// The invoke path's common case, every host of the one workspace, costs
// no allocation.
func TestHostsForAllocatesNothingInTheCommonCase(t *testing.T) {
	tl := &events.Tool{Name: "read_file", Source: events.SourceBuiltin, Hosts: []string{"x", "y"}, Workspaces: map[string]string{"x": "a", "y": "a"}}
	for _, asked := range []string{"", "a"} {
		if n := testing.AllocsPerRun(100, func() { hostsFor(tl, asked) }); n != 0 {
			t.Errorf("asked %q: %v allocations", asked, n)
		}
	}
}
