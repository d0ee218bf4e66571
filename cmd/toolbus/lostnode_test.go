package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	tb "github.com/toolbus/toolbus/pkg/toolbus"
)

// partPID reads the pid of a part local-fleet.sh started.
func partPID(t *testing.T, dir, name string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "run", name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// commandOf is how process pid was started.
func commandOf(t *testing.T, pid int) []string {
	t.Helper()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
}

// relaunch starts part name again as args, with env, its output added to
// its log, and its pid where the script's stop finds it.
func relaunch(t *testing.T, dir, name string, args, env []string) {
	t.Helper()
	back := exec.Command(args[0], args[1:]...)
	back.Env = append(os.Environ(), env...)
	logf, err := os.OpenFile(filepath.Join(dir, "log", name+".log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	back.Stdout, back.Stderr = logf, logf
	if err := back.Start(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "run", name+".pid"), []byte(strconv.Itoa(back.Process.Pid)+"\n"), 0o644)
	go back.Wait()
}

// A call made under load, and how it went.
type loadCall struct {
	id    string
	probe bool
	start time.Time
	end   time.Time
	err   error
}

// lostNode kills, with SIGKILL, the bus node that leads the audit stream
// while agents call through the fleet, a call after another on each of
// several connections. Calls go on through the other nodes, and the
// audit stream holds every invocation an executor took with exactly one
// terminal result: each call that got a result, and each that failed
// and was taken, is there once, with one. The node then comes back.
func lostNode(t *testing.T, dir string, node func(int) string) {
	t.Helper()
	ctx := context.Background()
	ids := func(name string) string { return filepath.Join(dir, "identities", name+".nk") }
	urls := []string{node(0), node(1), node(2)}
	admin, err := bus.Connect(ctx, bus.Config{URL: strings.Join(urls, ","), Name: "lost-node-admin", NkeyFile: ids("admin"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	stream, err := admin.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	leader := stream.CachedInfo().Cluster.Leader // bus1, bus2 or bus3
	if !strings.HasPrefix(leader, "bus") {
		t.Fatalf("the audit stream's leader is %q", leader)
	}
	victim := leader
	vi, _ := strconv.Atoi(strings.TrimPrefix(victim, "bus"))
	pid := partPID(t, dir, victim)
	args := commandOf(t, pid)

	// Four agents' connections, one starting on each node and one more
	// on the victim, calling one after another.
	const agents = 4
	var (
		mu     sync.Mutex
		calls  []*loadCall
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		killed time.Time
	)
	// callOnce makes one call of the load on c, and keeps how it went.
	callOnce := func(c *tb.Client, id string, probe bool) {
		lc := &loadCall{id: id, start: time.Now(), probe: probe}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, lc.err = c.Invoke(cctx, "read_file", map[string]any{"file_path": "README.md"},
			tb.WithWorkspace("one"), tb.WithInvocationID(lc.id), tb.WithTimeout(time.Minute))
		cancel()
		lc.end = time.Now()
		mu.Lock()
		calls = append(calls, lc)
		mu.Unlock()
	}
	for a := range agents {
		first := urls[a%3]
		if a == 3 {
			first = node(vi - 1)
		}
		var rest []string
		for _, u := range urls {
			if u != first {
				rest = append(rest, u)
			}
		}
		c, err := tb.Connect(ctx, first+","+strings.Join(rest, ","), tb.WithIdentityFile(ids("agent")),
			tb.WithIdentity(tb.Identity{ID: "agent"}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				callOnce(c, fmt.Sprintf("lost-node-%d-%d", a, n), false)
			}
		}()
	}
	// A prober starts a call every 100 ms without waiting for the last:
	// the first of its calls begun after the kill that succeeds says when
	// the fleet takes calls again (the agents' calls in flight at the
	// kill may wait out the caller's silence limit first).
	probe, err := tb.Connect(ctx, strings.Join(urls, ","), tb.WithIdentityFile(ids("agent")), tb.WithIdentity(tb.Identity{ID: "agent"}))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				callOnce(probe, fmt.Sprintf("lost-node-probe-%d", n), true)
			}()
		}
	}()
	okSince := func(at time.Time) (n int, first time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range calls {
			if c.err == nil && c.start.After(at) {
				n++
				if c.probe && (first.IsZero() || c.end.Before(first)) {
					first = c.end
				}
			}
		}
		return n, first
	}
	waitOK := func(at time.Time, want int, what string) time.Time {
		var n int
		var first time.Time
		if !testkit.Poll(2*time.Minute, func() bool {
			n, first = okSince(at)
			return n >= want
		}) {
			close(stop)
			wg.Wait()
			t.Fatalf("%s: %d calls succeeded in two minutes, want %d", what, n, want)
		}
		return first
	}
	began := time.Now()
	// A thousand calls take a second or two: the kill comes once every
	// client is well under way.
	waitOK(began, 1000, "before the kill")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	resumed := waitOK(killed, 1000, "after the kill")
	close(stop)
	wg.Wait()

	// What each call got, and what the audit stream holds of it: the
	// records sent again after the kill may still be on their way.
	var succeeded []string
	for _, c := range calls {
		if c.err == nil {
			succeeded = append(succeeded, c.id)
		}
	}
	results := audittest.ResultsOf(t, admin.JetStream(), succeeded)
	var invoked map[string]int
	testkit.Poll(time.Minute, func() bool {
		invoked = audittest.Invocations(t, admin.JetStream())
		for _, id := range succeeded {
			if invoked[id] == 0 {
				return false
			}
		}
		return true
	})
	var failed []string
	var ok, missing, doubled, unended int
	for _, c := range calls {
		r := results[c.id]
		terminal := 0
		if r != nil {
			terminal = r.Terminal
		}
		switch {
		case c.err == nil && invoked[c.id] == 0:
			missing++
			t.Errorf("%s got its result, but the audit stream has no record of the invocation", c.id)
		case invoked[c.id] > 1:
			doubled++
			t.Errorf("%s is recorded %d times", c.id, invoked[c.id])
		case invoked[c.id] == 1 && terminal != 1:
			unended++
			t.Errorf("%s is recorded with %d terminal results (err %v)", c.id, terminal, c.err)
		}
		if c.err == nil {
			ok++
		} else {
			failed = append(failed, fmt.Sprintf("%s: %v", c.id, c.err))
		}
	}
	// What the trail says of a call that failed: where it waited, or
	// where its result went.
	shown := 0
	for _, c := range calls {
		if c.err == nil || shown >= 3 {
			continue
		}
		shown++
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := audit.Show(sctx, admin.JetStream(), c.id, began.Add(-time.Minute))
		cancel()
		if err != nil {
			t.Logf("%s (began %s after the load, %s before the kill): %v; no record: %v", c.id, c.start.Sub(began).Round(time.Millisecond),
				killed.Sub(c.start).Round(time.Millisecond), c.err, err)
			continue
		}
		var timeline []string
		for _, ev := range r.Events {
			timeline = append(timeline, fmt.Sprintf("%s %s %s: %s", ev.Time.Sub(c.start).Round(time.Millisecond), ev.Type, ev.Sender, ev.Summary))
		}
		t.Logf("%s (began %s after the load, %s before the kill): %v; its timeline:\n%s", c.id, c.start.Sub(began).Round(time.Millisecond),
			killed.Sub(c.start).Round(time.Millisecond), c.err, strings.Join(timeline, "\n"))
	}
	sort.Strings(failed)
	if len(failed) > 8 {
		byError := map[string]int{}
		for _, f := range failed {
			_, e, _ := strings.Cut(f, ": ")
			byError[e]++
		}
		failed = failed[:0]
		for e, n := range byError {
			failed = append(failed, fmt.Sprintf("%d× %s", n, e))
		}
	}
	t.Logf("lost node %s (the audit stream's leader) under load: %d calls, %d succeeded, %d failed %v; the first probe begun after the kill succeeded %s after it; "+
		"audit: %d invocations missing, %d recorded twice, %d without exactly one terminal result",
		victim, len(calls), ok, len(failed), failed, resumed.Sub(killed).Round(time.Millisecond), missing, doubled, unended)
	// The node comes back, as it was started, and takes its place.
	relaunch(t, dir, victim, args, nil)
	testkit.EventuallyWithin(t, time.Minute, "a call through "+victim+" after it came back", func() bool {
		_, _, code := toolbusWith(t, []string{"TOOLBUS_IDENTITY=" + ids("agent")}, "call", "read_file", "--workspace", "one",
			"--args", `{"file_path":"README.md"}`, "--nats", node(vi-1))
		return code == 0
	})
}
