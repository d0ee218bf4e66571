package counters

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// open starts a Fleet named exec over conn, closed when the test ends.
func open(t *testing.T, conn *nats.Conn, exec string, maxKeys int) *Fleet {
	t.Helper()
	f, err := Open(conn, Config{Executor: exec, MaxKeys: maxKeys, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// heardAtLeast waits until f has taken in n messages of others.
func heardAtLeast(t *testing.T, f *Fleet, n int64) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%d messages heard", n), func() bool { return f.Heard() >= n })
}

func add(t *testing.T, f *Fleet, incs ...Increment) ([]int64, int) {
	t.Helper()
	counts, over, err := f.Add(incs...)
	if err != nil {
		t.Fatal(err)
	}
	return counts, over
}

func inc(key string, n int64) Increment {
	return Increment{Key: key, N: n, Until: time.Now().Add(time.Hour)}
}

// connections are n connections of their own to one bus.
func connections(t *testing.T, n int) []*nats.Conn {
	b := bustest.Start(t, "")
	out := make([]*nats.Conn, n)
	for i := range out {
		out[i] = bustest.Connect(t, b).Conn()
	}
	return out
}

// TestEachExecutorCountsTheOthers: what one executor counts is in its
// own count at once, and in the other's once its message has arrived;
// an executor's own message, echoed back by the bus, is not counted
// again.
func TestEachExecutorCountsTheOthers(t *testing.T) {
	conns := connections(t, 2)
	a, b := open(t, conns[0], "executor@a", 0), open(t, conns[1], "executor@b", 0)
	// Another executor on a's connection: its message comes to a after
	// a's own echo, so once a has heard it, a has had its echo.
	a2 := open(t, conns[0], "executor@a2", 0)

	if counts, over := add(t, a, inc("k", 1), inc("j", 5)); over != -1 || counts[0] != 1 || counts[1] != 5 {
		t.Fatalf("a's first increments: %v over %d, want [1 5] over -1", counts, over)
	}
	add(t, a2, inc("sentinel", 1))
	heardAtLeast(t, a, 1)
	if v := a.Value("k"); v != 1 {
		t.Errorf("a counts k %d after its own echo, want 1", v)
	}
	heardAtLeast(t, b, 2)
	if k, j := b.Value("k"), b.Value("j"); k != 1 || j != 5 {
		t.Errorf("b counts k %d and j %d, want 1 and 5", k, j)
	}
	if counts, _ := add(t, b, inc("k", 1)); counts[0] != 2 {
		t.Errorf("b's increment of k gives %d, want 2: a's and its own", counts[0])
	}
	heardAtLeast(t, a, 2)
	if v := a.Value("k"); v != 2 {
		t.Errorf("a counts k %d once b's increment arrived, want 2", v)
	}
}

// TestAnIncrementPastItsMostIsNotMade: an increment that would take its
// count past its Most is refused, and so are the call's others: nothing
// is added or told.
func TestAnIncrementPastItsMostIsNotMade(t *testing.T) {
	conns := connections(t, 2)
	a, b := open(t, conns[0], "executor@a", 0), open(t, conns[1], "executor@b", 0)
	limited := func(key string, n, most int64) Increment {
		in := inc(key, n)
		in.Most = most
		return in
	}
	for i := range 3 {
		if counts, over := add(t, a, limited("rate", 1, 3), inc("other", 1)); over != -1 || counts[0] != int64(i+1) {
			t.Fatalf("call %d within the limit: %v over %d", i+1, counts, over)
		}
	}
	counts, over := add(t, a, inc("other", 1), limited("rate", 1, 3))
	if over != 1 || counts[1] != 3 {
		t.Fatalf("the 4th call: %v over %d, want over 1 at count 3", counts, over)
	}
	if v := a.Value("other"); v != 3 {
		t.Errorf("the refused call's other increment was made: other is %d, want 3", v)
	}
	// Larger than what is left.
	if _, over := add(t, a, limited("bytes", 10, 16)); over != -1 {
		t.Fatal("10 bytes of 16 refused")
	}
	if counts, over := add(t, a, limited("bytes", 7, 16)); over != 0 || counts[0] != 10 {
		t.Errorf("7 bytes more: %v over %d, want refused at 10", counts, over)
	}
	// What a told b: three calls, and one more message after them; a
	// refused call told nothing.
	add(t, a, inc("sentinel", 1))
	heardAtLeast(t, b, 5)
	if r, o, by := b.Value("rate"), b.Value("other"), b.Value("bytes"); r != 3 || o != 3 || by != 10 {
		t.Errorf("b counts rate %d, other %d, bytes %d; want 3, 3, 10", r, o, by)
	}
	if n := b.Heard(); n != 5 {
		t.Errorf("b heard %d messages, want 5: refused calls tell nothing", n)
	}
}

// TestCountsAreForgottenAtTheirEnd: a count past its Until starts from
// zero, here and where it is told; a count told with an end already
// past is not taken in.
func TestCountsAreForgottenAtTheirEnd(t *testing.T) {
	conns := connections(t, 2)
	a := open(t, conns[0], "executor@a", 0)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	window := Increment{Key: "w", N: 1, Until: now.Add(time.Minute)}
	add(t, a, window)
	add(t, a, window)
	if v := a.Value("w"); v != 2 {
		t.Fatalf("w is %d, want 2", v)
	}
	advance(time.Minute)
	if v := a.Value("w"); v != 0 {
		t.Errorf("w is %d at its end, want 0", v)
	}
	// Nor is a limit held to a count forgotten.
	if counts, over := add(t, a, Increment{Key: "w", N: 1, Until: now.Add(time.Minute), Most: 1}); over != -1 || counts[0] != 1 {
		t.Errorf("w at its end, counted against a limit of 1: %v over %d, want 1 within it", counts, over)
	}
	a.mu.Lock()
	a.keys["w"].n, a.keys["w"].until = 0, 0
	a.mu.Unlock()
	window.Until = now.Add(time.Minute)
	if counts, _ := add(t, a, window); counts[0] != 1 {
		t.Errorf("w counted anew is %d, want 1", counts[0])
	}
	// A later Until keeps the count longer: a session's calls last
	// while it goes on.
	add(t, a, Increment{Key: "s", N: 1, Until: now.Add(time.Hour)})
	advance(59 * time.Minute)
	add(t, a, Increment{Key: "s", N: 1, Until: now.Add(time.Hour)})
	advance(59 * time.Minute)
	if v := a.Value("s"); v != 2 {
		t.Errorf("s is %d an hour after its first call, 59 minutes after its last, want 2", v)
	}

	// Told by another: an ended window is not taken in, an end far
	// ahead is held to maxKeep, a negative count never made is not made.
	raw := conns[1]
	tell := func(adds ...events.CountAdd) {
		t.Helper()
		data, err := events.EncodeCounted(&events.Counted{V: events.CountVersion, From: "executor@b#1", Adds: adds})
		if err != nil {
			t.Fatal(err)
		}
		if err := raw.Publish(events.CountSubject, data); err != nil {
			t.Fatal(err)
		}
	}
	ms := func(t time.Time) int64 { return t.UnixMilli() }
	tell(events.CountAdd{Key: "ended", N: 4, Until: ms(now)},
		events.CountAdd{Key: "far", N: 4, Until: ms(now.Add(1000 * time.Hour))},
		events.CountAdd{Key: "never", N: -4, Until: ms(now.Add(time.Hour))})
	heardAtLeast(t, a, 1)
	if e, f, n := a.Value("ended"), a.Value("far"), a.Value("never"); e != 0 || f != 4 || n != 0 {
		t.Errorf("told counts: ended %d, far %d, never %d; want 0, 4, 0", e, f, n)
	}
	advance(maxKeep)
	if v := a.Value("far"); v != 0 {
		t.Errorf("a count told to last 1000 hours is %d after %s, want 0", v, maxKeep)
	}
}

// checkOrder fails the test unless f's entries, from the oldest, are
// the keys of want, each linked both ways, and none other.
func checkOrder(t *testing.T, f *Fleet, want ...string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []string
	var prev *entry
	for e := f.oldest; e != nil && len(got) <= len(f.keys); e = e.newer {
		if e.older != prev || f.keys[e.key] != e {
			t.Fatalf("the list is broken at %s (after %v)", e.key, got)
		}
		got, prev = append(got, e.key), e
	}
	if f.newest != prev || len(got) != len(f.keys) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("from the oldest: %v (%d keys), want %v", got, len(f.keys), want)
	}
}

// TestPastMaxKeysTheOldestIsDropped: the count changed longest ago is
// dropped to make room, and counts from zero again.
func TestPastMaxKeysTheOldestIsDropped(t *testing.T) {
	conns := connections(t, 1)
	a := open(t, conns[0], "executor@a", 3)
	for _, step := range []struct {
		key   string
		order []string
	}{
		{"k1", []string{"k1"}},
		{"k1", []string{"k1"}},
		{"k2", []string{"k1", "k2"}},
		{"k2", []string{"k1", "k2"}},
		{"k3", []string{"k1", "k2", "k3"}},
		{"k2", []string{"k1", "k3", "k2"}},
		{"k1", []string{"k3", "k2", "k1"}},
		{"k3", []string{"k2", "k1", "k3"}},
	} {
		add(t, a, inc(step.key, 1))
		checkOrder(t, a, step.order...)
	}
	a.mu.Lock()
	a.keys, a.newest, a.oldest = map[string]*entry{}, nil, nil
	a.mu.Unlock()
	for _, k := range []string{"k1", "k2", "k3", "k1", "k4"} {
		add(t, a, inc(k, 1))
	}
	checkOrder(t, a, "k3", "k1", "k4")
	for k, want := range map[string]int64{"k1": 2, "k2": 0, "k3": 1, "k4": 1} {
		if v := a.Value(k); v != want {
			t.Errorf("%s is %d, want %d", k, v, want)
		}
	}
	if counts, _ := add(t, a, inc("k2", 1)); counts[0] != 1 {
		t.Errorf("k2 counted again is %d, want 1", counts[0])
	}
	if v := a.Value("k3"); v != 0 {
		t.Errorf("k3, now the oldest, is %d, want dropped", v)
	}
	checkOrder(t, a, "k1", "k4", "k2")
	// What is forgotten already goes first, wherever it is.
	var mu sync.Mutex
	now := time.Now()
	a.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	add(t, a, Increment{Key: "short", N: 1, Until: now.Add(time.Minute)})
	checkOrder(t, a, "k4", "k2", "short")
	add(t, a, inc("k4", 1))
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	add(t, a, inc("k2", 1))
	add(t, a, inc("k5", 1))
	checkOrder(t, a, "k4", "k2", "k5")
}

// TestATakenBackCountIsTakenBackEverywhere: a refused call's increments,
// taken back, are taken back from the other executors' counts too.
func TestATakenBackCountIsTakenBackEverywhere(t *testing.T) {
	conns := connections(t, 2)
	a, b := open(t, conns[0], "executor@a", 0), open(t, conns[1], "executor@b", 0)
	add(t, a, inc("k", 3))
	if counts, _ := add(t, a, inc("k", -2)); counts[0] != 1 {
		t.Errorf("k taken back is %d here, want 1", counts[0])
	}
	heardAtLeast(t, b, 2)
	if v := b.Value("k"); v != 1 {
		t.Errorf("k is %d where it was told, want 1", v)
	}
	if counts, _ := add(t, a, inc("k", -5)); counts[0] != 0 {
		t.Errorf("k taken back past zero is %d, want 0", counts[0])
	}
}

// TestClosedCountersCountNothing: a call is never judged on counts a
// closed Fleet would make up.
func TestClosedCountersCountNothing(t *testing.T) {
	conns := connections(t, 1)
	a := open(t, conns[0], "executor@a", 0)
	a.Close()
	if _, _, err := a.Add(inc("k", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Add on closed counters: %v, want ErrClosed", err)
	}
	conns[0].Close()
	b, err := Open(connections(t, 1)[0], Config{Executor: "executor@b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.nc.Close()
	if _, _, err := b.Add(inc("k", 1)); !errors.Is(err, ErrDisconnected) {
		t.Errorf("Add without a connection: %v, want ErrDisconnected", err)
	}
}

// TestBadIncrementsAndMessagesAreRefused: an increment no message could
// carry is an error; a message that does not read is dropped, counting
// nothing.
func TestBadIncrementsAndMessagesAreRefused(t *testing.T) {
	conns := connections(t, 2)
	a := open(t, conns[0], "executor@a", 0)
	for _, in := range []Increment{inc("k", events.MaxCountN), inc("k", -events.MaxCountN)} {
		if _, _, err := a.Add(in); err != nil {
			t.Errorf("Add(%q, %d): %v", in.Key, in.N, err)
		}
	}
	for _, in := range []Increment{inc("", 1), inc("a b", 1), inc("k", 0), inc("k", events.MaxCountN+1), inc("k", -events.MaxCountN-1)} {
		if _, _, err := a.Add(in); err == nil {
			t.Errorf("Add(%q, %d) made", in.Key, in.N)
		}
	}
	for _, bad := range []string{`{}`, `not json`, `{"v":1,"from":"x","adds":[{"k":"a>b","n":1,"until":99999999999999}]}`} {
		if err := conns[1].Publish(events.CountSubject, []byte(bad)); err != nil {
			t.Fatal(err)
		}
	}
	good, _ := events.EncodeCounted(&events.Counted{V: events.CountVersion, From: "x", Adds: []events.CountAdd{{Key: "k", N: 1, Until: time.Now().Add(time.Hour).UnixMilli()}}})
	if err := conns[1].Publish(events.CountSubject, good); err != nil {
		t.Fatal(err)
	}
	heardAtLeast(t, a, 1)
	if n, v := a.Heard(), a.Value("k"); n != 1 || v != 1 {
		t.Errorf("heard %d messages, k is %d; want only the good one: 1, 1", n, v)
	}
}

// BenchmarkMemory reports what DefaultMaxKeys counts hold:
// go test ./internal/counters -run '^$' -bench Memory -benchtime 1x
func BenchmarkMemory(b *testing.B) {
	bb := bustest.Start(b, "")
	conn := bustest.Connect(b, bb)
	for range b.N {
		measureMemory(b, conn)
	}
}

func measureMemory(b *testing.B, conn *bus.Bus) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f, err := Open(conn.Conn(), Config{Executor: "executor@bench", Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	until := time.Now().Add(time.Hour)
	// Keys as the executor names them: a prefix, a window, a hash.
	for i := range DefaultMaxKeys {
		f.mu.Lock()
		f.addLocked("r.5900000."+Key(fmt.Sprint(i)), 1, until.UnixNano(), time.Now().UnixNano())
		f.mu.Unlock()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MB")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(DefaultMaxKeys), "B/key")
	runtime.KeepAlive(f)
}
