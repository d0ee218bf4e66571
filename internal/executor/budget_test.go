package executor

import (
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

func TestRecordBudget(t *testing.T) {
	t.Parallel()
	b := newRecordBudget(1000, 5000)
	now := time.Unix(1_000_000, 0)
	for i := range 5 {
		if !admits(b, "m", 1000, now) {
			t.Fatalf("call %d of a full bucket refused", i)
		}
	}
	if admits(b, "m", 1, now) {
		t.Fatal("admitted with nothing left")
	}
	if !admits(b, "a", 1000, now) {
		t.Fatal("another principal pays for the first")
	}
	// A second later there is 1000 more: one message, which may overdraw.
	if !admits(b, "m", 4000, now.Add(time.Second)) || admits(b, "m", 1, now.Add(time.Second)) {
		t.Fatal("the refill is not a second's rate, or an overdraft is not paid back first")
	}
	// A result spent after the fact is paid back before the next call.
	b.spend("a", 10_000, now)
	if admits(b, "a", 1, now.Add(5*time.Second)) {
		t.Fatal("admitted while still in debt")
	}
	if !admits(b, "a", 1, now.Add(7*time.Second)) {
		t.Fatal("refused once the debt is paid")
	}
	// The bucket never holds more than the burst.
	if !admits(b, "m", 5000, now.Add(time.Hour)) || admits(b, "m", 1, now.Add(time.Hour)) {
		t.Fatal("an idle hour gave more than the burst")
	}
	// Many principals seen once are forgotten once their buckets are
	// full again.
	for i := range 3000 {
		admits(b, fmt.Sprintf("p%d", i), 1, now)
	}
	admits(b, "late", 1, now.Add(time.Minute))
	if len(b.by) > 1100 {
		t.Errorf("the budget keeps %d principals", len(b.by))
	}
}

// TestTheBudgetForgetsFullBucketsAt1024: a budget keeps at most 1024
// principals' buckets before it forgets those that are full again, a
// bucket refilled to the byte included; one in debt it keeps.
func TestTheBudgetForgetsFullBucketsAt1024(t *testing.T) {
	t.Parallel()
	b := newRecordBudget(1000, 5000)
	now := time.Unix(1_000_000, 0)
	admits(b, "debtor", 9000, now)
	for i := range 1023 {
		admits(b, fmt.Sprintf("p%d", i), 1000, now)
	}
	// A second later each has its 5000 again, exactly.
	admits(b, "late", 1, now.Add(time.Second))
	if _, kept := b.by["debtor"]; len(b.by) != 2 || !kept {
		t.Errorf("after the 1025th principal the budget keeps %d (the debtor: %v), want the debtor and the newcomer", len(b.by), kept)
	}
}

// TestRefusalsAreToldInBatches: the first refusal of a principal is told
// at once, the next ones at most every refusalLogEvery, each telling how
// many came since.
func TestRefusalsAreToldInBatches(t *testing.T) {
	t.Parallel()
	b := newRecordBudget(1000, 5000)
	now := time.Unix(1_000_000, 0)
	if n := b.refused("m", now); n != 1 {
		t.Errorf("the first refusal tells %d, want 1", n)
	}
	for i := range 3 {
		if n := b.refused("m", now.Add(time.Duration(i+1)*time.Second)); n != 0 {
			t.Errorf("a refusal %d s after one told tells %d, want 0", i+1, n)
		}
	}
	if n := b.refused("m", now.Add(refusalLogEvery)); n != 4 {
		t.Errorf("a refusal %s after one told tells %d, want the 4 since", refusalLogEvery, n)
	}
	if n := b.refused("other", now.Add(refusalLogEvery)); n != 1 {
		t.Errorf("another principal's first refusal tells %d, want 1", n)
	}
}

// TestAFloodingCallerIsRefusedAndNothingOfItKept: a caller with a proven
// principal sends invocations of 8 KiB as fast as it can. Past its
// burst the executor refuses them at once, RATE_LIMITED, and records
// none of them; another caller's calls go on meanwhile.
func TestAFloodingCallerIsRefusedAndNothingOfItKept(t *testing.T) {
	t.Parallel()
	var log testkit.Buffer
	e := newEnv(t, func(c *Config) {
		// A pace of a byte a second: nothing refills the burst while the
		// test runs, however slowly a loaded machine runs it.
		c.IdentitiesEnforced, c.RecordRate, c.RecordBurst = true, 1, 64<<10
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	nc := bustest.Connect(t, e.bus).Conn()
	recorded := make(chan *nats.Msg, 1000)
	sub, err := nc.ChanSubscribe(events.SubjectInvoke+".*", recorded)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	call := func(principal, id, pattern string) *events.Result {
		t.Helper()
		return globAs(t, nc, principal, id, pattern)
	}
	big := strings.Repeat("x", 8<<10)
	limited, ran := 0, 0
	for i := range 40 {
		switch res := call("mallory", fmt.Sprintf("flood-%d", i), big); errType(res) {
		case events.ErrRateLimited:
			limited++
		default:
			ran++
		}
	}
	if limited == 0 || ran == 0 || ran > 12 {
		t.Fatalf("of 40 calls of 8 KiB against a burst of 64 KiB, %d ran and %d were refused", ran, limited)
	}
	if res := call("alice", "alice-1", "*.md"); res.Error != nil {
		t.Errorf("another caller during the flood: %s %s", errType(res), res.LLMContent)
	}
	// What mallory sends over its budget is refused unread, a malformed
	// invocation too.
	m, err := nc.Request(events.InvokeSubject("mallory"), []byte("{not an invocation"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := events.Decode[events.Result](m.Data); err != nil || errType(res) != events.ErrRateLimited {
		t.Fatalf("a malformed invocation over the budget: %+v %v", res, err)
	}
	limited++
	// The log tells the refusals in batches, each with how many it tells.
	told := 0
	for _, n := range regexp.MustCompile(`over its recording budget" principal=mallory refused=(-?\d+)`).FindAllStringSubmatch(log.String(), -1) {
		k, _ := strconv.Atoi(n[1])
		if k <= 0 {
			t.Errorf("the log tells %d refusals", k)
		}
		told += k
	}
	if told == 0 || told > limited {
		t.Errorf("the log tells %d of %d refusals:\n%s", told, limited, log.String())
	}
	// Every invocation is recorded before its result is sent; alice's
	// came after mallory's, on the same connection of the executor.
	kept := 0
	for done := false; !done; {
		select {
		case m := <-recorded:
			switch {
			case strings.HasSuffix(m.Subject, ".mallory"):
				kept++
			case strings.HasSuffix(m.Subject, ".alice"):
				done = true
			}
		case <-time.After(10 * time.Second):
			t.Fatal("alice's invocation was never recorded")
		}
	}
	if kept != ran {
		t.Errorf("%d of mallory's invocations were recorded, %d ran: a refused one must leave no record", kept, ran)
	}
}

// admits is b.admit's verdict alone.
func admits(b *recordBudget, principal string, n int, now time.Time) bool {
	ok, _ := b.admit(principal, n, now)
	return ok
}

func TestShareOfTheTrail(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, c := range []struct {
		maxBytes  int64
		maxAge    time.Duration
		executors int
		burst     float64
	}{
		{1 << 30, 30 * day, 1, 256 << 20},
		{1 << 30, 30 * day, 4, 64 << 20},
		{1 << 30, 0, 1, 256 << 20}, // kept for good: spread over the default retention
		{0, 30 * day, 1, 0},        // no cap: no bound
		{-1, 30 * day, 1, 0},       // no cap, as JetStream says it
	} {
		rate, burst := shareOf(c.maxBytes, c.maxAge, DefaultRecordShare, c.executors)
		age := c.maxAge
		if age == 0 {
			age = bus.DefaultAuditMaxAge
		}
		if burst != c.burst || (burst > 0 && int64(rate*age.Seconds()+0.5) != int64(burst)) {
			t.Errorf("shareOf(%d, %s, %d executors) = %.0f B/s, %.0f B; want a burst of %.0f refilled over %s", c.maxBytes, c.maxAge, c.executors, rate, burst, c.burst, age)
		}
	}

	b := newRecordBudget(1<<30, 1<<30) // a pace that never binds
	now := time.Unix(1_000_000, 0)
	if !admits(b, "m", 10<<20, now) {
		t.Fatal("refused before the trail was looked at")
	}
	b.resizeShare(1, 1000)
	if !admits(b, "m", 600, now) || !admits(b, "m", 600, now) || admits(b, "m", 1, now) {
		t.Fatal("the share, once known, is not a burst of 1000 with one message overdrawn")
	}
	if ok, retry := b.admit("m", 1, now); ok || retry < 200*time.Second {
		t.Errorf("refused with a retry after %s, want the 200 s that pay the debt back", retry)
	}
	b.resizeShare(1, 100)
	if !admits(b, "a", 100, now) || admits(b, "a", 1, now) {
		t.Error("a principal seen after a smaller share has more than it")
	}
	// A principal in debt of its share is not forgotten among many once
	// its pace is full again: it would come back with a whole share.
	later := now.Add(time.Minute)
	for i := range 3000 {
		admits(b, fmt.Sprintf("p%d", i), 1, later)
	}
	if admits(b, "m", 1, later) {
		t.Error("a principal's debt of its share was forgotten among many principals")
	}
	// Its share refills at its rate, 1 B/s: the 200 B it owed are paid
	// 200 s after it overdrew.
	if admits(b, "m", 1, now.Add(199*time.Second)) || !admits(b, "m", 1, now.Add(201*time.Second)) {
		t.Error("the share does not refill at its rate")
	}
}

// FuzzShareBoundsOnePrincipal: however a principal spreads its records
// over one retention, with a pace that never binds, the share lets it
// record at most its burst twice over (the burst, and the refill over
// the retention) and one message more: what docs/audit.md reckons with.
func FuzzShareBoundsOnePrincipal(f *testing.F) {
	f.Add(uint16(1000), uint32(60), int64(1))
	f.Add(uint16(65535), uint32(1), int64(7))
	f.Add(uint16(1), uint32(86400), int64(42))
	f.Fuzz(func(t *testing.T, size uint16, every uint32, seed int64) {
		const retention = 30 * 24 * time.Hour
		const maxBytes = 64 << 20
		rate, burst := shareOf(maxBytes, retention, DefaultRecordShare, 1)
		b := newRecordBudget(1<<40, 1<<40)
		b.resizeShare(rate, burst)
		gap := time.Duration(every%86400+1) * time.Second
		n := int(size) + 1
		var recorded float64
		start := time.Unix(seed, 0)
		for at := start; at.Sub(start) < retention; at = at.Add(gap) {
			if admits(b, "m", n, at) {
				recorded += float64(n)
			}
		}
		if limit := 2*burst + float64(n); recorded > limit {
			t.Fatalf("recorded %.0f bytes in one retention, more than %.0f", recorded, limit)
		}
	})
}

// TestTheRetryAfterPaysTheDebt: a refused principal is told to come back
// when the bucket it is short in (the pace, the share, or both, the
// later) is in credit again, and not before.
func TestTheRetryAfterPaysTheDebt(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	within := func(got, want time.Duration) bool { return got >= want && got <= want+10*time.Millisecond }

	pace := newRecordBudget(1000, 5000) // 1000 B/s, share unknown
	admits(pace, "m", 8000, now)        // 3000 overdrawn
	if ok, retry := pace.admit("m", 1, now); ok || !within(retry, 3*time.Second) {
		t.Errorf("3000 B over a pace of 1000 B/s: ok %v, retry after %s, want 3 s", ok, retry)
	}
	// Only full buckets are forgotten when many principals come: a
	// debt is kept however many come after it.
	for i := range 3000 {
		admits(pace, fmt.Sprintf("p%d", i), 1, now)
	}
	if admits(pace, "m", 1, now.Add(time.Second)) {
		t.Error("a principal's debt was forgotten among many principals")
	}

	share := newRecordBudget(1<<30, 1<<30) // a pace that never binds
	share.resizeShare(10, 100)
	admits(share, "m", 150, now) // 50 overdrawn
	if ok, retry := share.admit("m", 1, now); ok || !within(retry, 5*time.Second) {
		t.Errorf("50 B over a share of 10 B/s: ok %v, retry after %s, want 5 s", ok, retry)
	}

	both := newRecordBudget(1000, 1000)
	both.resizeShare(10, 1000)
	admits(both, "m", 3000, now) // 2000 over both: 2 s of pace, 200 s of share
	if ok, retry := both.admit("m", 1, now); ok || !within(retry, 200*time.Second) {
		t.Errorf("over both: ok %v, retry after %s, want the share's 200 s", ok, retry)
	}
	both.resizeShare(1000, 1000)
	admits(both, "n", 1500, now) // 500 over both: half a second each
	if ok, retry := both.admit("n", 1, now); ok || !within(retry, 500*time.Millisecond) {
		t.Errorf("over both alike: ok %v, retry after %s, want 0.5 s", ok, retry)
	}
	if ok, _ := both.admit("n", 1, now.Add(501*time.Millisecond)); !ok {
		t.Error("refused once the retry-after passed")
	}
}
