package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// BenchmarkSoak calls a no-op tool at a steady 5,000 calls/s through a
// node with identities and permissions on, for TOOLBUS_SOAK (a Go
// duration; 10s when unset, as the test command runs every benchmark
// once: `TOOLBUS_SOAK=10m go test ./internal/auth -run '^$' -bench Soak
// -benchtime 1x` is the ten-minute soak; TOOLBUS_SOAK_NODES=3 runs it on
// a 3-node cluster). It prints the process's
// resident memory, heap and goroutines as it goes, and counts calls
// lost: a call that did not succeed, or whose terminal result the audit
// stream does not hold exactly once (an auditor follows the stream
// during the soak, as `toolbus audit tail` would).
func BenchmarkSoak(b *testing.B) {
	duration := 10 * time.Second
	if s := os.Getenv("TOOLBUS_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("TOOLBUS_SOAK: %v", err)
		}
		duration = d
	}
	const rate = 5000 // calls per second
	dir := b.TempDir()
	if _, err := auth.Init(dir, auth.DefaultMembers()); err != nil {
		b.Fatal(err)
	}
	// TOOLBUS_SOAK_NODES=3 soaks a 3-node cluster with 3 copies of
	// everything: the executor on the first node, the callers on the
	// last, the auditor on the middle one.
	var nodes []*bus.Bus
	switch os.Getenv("TOOLBUS_SOAK_NODES") {
	case "", "1":
		node, err := busnode.Start(context.Background(), busnode.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Name: "soak", Logger: bustest.Quiet(),
			AuthConfig: filepath.Join(dir, auth.ServerConfigFile), NkeyFile: identity.SeedFile(dir, "bus")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { bustest.Stop(b, node) })
		nodes = []*bus.Bus{node.Bus}
	case "3":
		nodes = bustest.StartClusterWith(b, 3, 3, func(cfg *busnode.Config) {
			cfg.AuthConfig, cfg.NkeyFile = filepath.Join(dir, auth.ServerConfigFile), identity.SeedFile(dir, "bus")
		})
	default:
		b.Fatalf("TOOLBUS_SOAK_NODES=%q: 1 or 3", os.Getenv("TOOLBUS_SOAK_NODES"))
	}
	f := startBenchFleet(b, dir, nodes)

	total := int(duration.Seconds() * rate)
	results := newAuditCount(b, nodes[len(nodes)/2].URL(), dir, total)

	for range b.N {
		var failed atomic.Int64
		var done atomic.Int64
		work := make(chan int, rate)
		var wg sync.WaitGroup
		for range 256 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range work {
					if err := f.callID("soak-" + strconv.Itoa(n)); err != nil {
						if failed.Add(1) <= 5 {
							b.Logf("call %d: %v", n, err)
						}
					}
					done.Add(1)
				}
			}()
		}
		fmt.Printf("\n%-10s %12s %10s %10s %11s\n", "soak", "calls done", "RSS MB", "heap MB", "goroutines")
		sample := func(at time.Duration) (rss, heap float64, gr int) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			rss, heap, gr = residentMB(), float64(ms.HeapAlloc)/(1<<20), runtime.NumGoroutine()
			fmt.Printf("%-10s %12d %10.1f %10.1f %11d\n", at.Round(time.Second), done.Load(), rss, heap, gr)
			return
		}
		every := max(duration/20, time.Second)
		start := time.Now()
		next := start.Add(every)
		behind := 0
		var firstRSS, maxRSS, lastRSS float64
		var firstG, lastG int
		tick := time.NewTicker(time.Millisecond)
		for n := 0; n < total; {
			<-tick.C
			// As many calls as the schedule says are due by now.
			due := min(int(time.Since(start).Seconds()*rate)+1, total)
			for ; n < due; n++ {
				select {
				case work <- n:
				default:
					behind++
					work <- n
				}
			}
			if now := time.Now(); now.After(next) {
				rss, _, g := sample(now.Sub(start))
				if now.Sub(start) >= duration/2 {
					// The second half: the first half fills the
					// stream's two-minute window of message ids
					// (duplicates) and the server's caches.
					if firstRSS == 0 {
						firstRSS, firstG = rss, g
					}
					maxRSS, lastRSS, lastG = max(maxRSS, rss), rss, g
				}
				next = next.Add(every)
			}
		}
		tick.Stop()
		close(work)
		wg.Wait()
		took := time.Since(start)
		sample(took)
		stored, twice := results.wait(total)
		lost := int(failed.Load()) + (total - stored)
		fmt.Printf("%d calls in %s: %.0f calls/s (goal 5,000), %d not sent on schedule; %d failed, %d terminal results stored, %d stored twice: %d lost\n",
			total, took.Round(time.Millisecond), float64(total)/took.Seconds(), behind, failed.Load(), stored, twice, lost)
		fmt.Printf("second half: resident memory %.1f MB at its start, %.1f MB at the end, at most %.1f MB; goroutines %d then %d\n",
			firstRSS, lastRSS, maxRSS, firstG, lastG)
		b.ReportMetric(float64(lost), "lost")
		if lost != 0 || twice != 0 {
			b.Errorf("%d calls lost, %d results stored twice", lost, twice)
		}
	}
}

// callID calls the no-op tool as invocation id.
func (f *benchFleet) callID(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := f.client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: "noop", Args: json.RawMessage(`{}`)}, nil)
	if err == nil && res.Error != nil {
		err = fmt.Errorf("%s: %s", res.Error.Type, res.Error.Message)
	}
	return err
}

func residentMB() float64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			return kb / 1024
		}
	}
	return 0
}

// auditCount follows the audit stream's results as an auditor and marks
// the soak's invocations that have one, in bit sets (the soak's ids are
// numbered): a map of millions of ids would itself be the memory growth
// the soak looks for.
type auditCount struct {
	mu          sync.Mutex
	seen, twice []uint64
	stored, dup int
	changed     chan struct{}
}

func newAuditCount(b *testing.B, url, dir string, total int) *auditCount {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	auditor, err := bus.Connect(ctx, bus.Config{URL: url, Name: "auditor", NkeyFile: identity.SeedFile(dir, "auditor"), Logger: bustest.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bustest.Stop(b, auditor) })
	stream, err := auditor.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		b.Fatal(err)
	}
	a := &auditCount{seen: make([]uint64, total/64+1), twice: make([]uint64, total/64+1), changed: make(chan struct{}, 1)}
	count := func(m *bus.StoredMsg) error {
		res, err := events.Decode[events.Result](m.Data)
		if err != nil || res.Late {
			return nil
		}
		n, err := strconv.Atoi(strings.TrimPrefix(res.InvocationID, "soak-"))
		if err != nil || n < 0 || n >= total {
			return nil
		}
		a.mu.Lock()
		if a.seen[n/64]&(1<<(n%64)) != 0 {
			a.twice[n/64] |= 1 << (n % 64)
			a.dup++
		} else {
			a.seen[n/64] |= 1 << (n % 64)
			a.stored++
		}
		a.mu.Unlock()
		select {
		case a.changed <- struct{}{}:
		default:
		}
		return nil
	}
	// An auditor makes no consumer: it reads on by direct get from the
	// last result it read, a little later when there was nothing new.
	following, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		next := stream.CachedInfo().State.LastSeq + 1
		for following.Err() == nil {
			last, _ := bus.Read(following, auditor.JetStream(), events.AuditStream, bus.Range{From: next, Subjects: []string{events.SubjectResult}}, count)
			if last > 0 {
				next = last + 1
				continue
			}
			select {
			case <-following.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return a
}

// wait waits until the stream holds a result for each of total calls,
// or nothing came for ten seconds, and says how many it holds and how
// many twice.
func (a *auditCount) wait(total int) (stored, twice int) {
	for {
		a.mu.Lock()
		stored, twice = a.stored, a.dup
		a.mu.Unlock()
		if stored >= total {
			return
		}
		select {
		case <-a.changed:
		case <-time.After(10 * time.Second):
			return
		}
	}
}
