// Package measure times operations for the benchmarks, which print
// ratios against a baseline measured in the same run: operations are
// timed in turn, so that whatever else the machine does at the moment
// weighs on each alike.
//
// Only benchmarks import this package.
package measure

import (
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// QuickEnv names the environment variable that has every benchmark take
// a sample a twentieth of its size (Samples): scripts/test.sh sets it, as
// its run of the benchmarks checks that each compiles and runs, and its
// figures are not quoted. Run by hand, the benchmarks take their whole
// samples.
const QuickEnv = "TOOLBUS_BENCH_QUICK"

// Quick reports whether QuickEnv is set.
func Quick() bool { return os.Getenv(QuickEnv) != "" }

// Samples is the size of a sample whose full size is n: n, or with
// QuickEnv set, a twentieth of it, but no fewer than 50 (or n, when n is
// fewer), so that a median and a 99th percentile still mean something.
// Interleaved and Throughput apply it to their counts; a benchmark that
// prints a count, or takes a sample of its own, calls it too.
func Samples(n int) int {
	if !Quick() {
		return n
	}
	return max(n/20, min(n, 50))
}

// Latency is an operation's median and 99th percentile.
type Latency struct{ P50, P99 time.Duration }

// Percentiles returns the p50 and p99 of samples, which it sorts.
func Percentiles(samples []time.Duration) Latency {
	slices.Sort(samples)
	return Latency{samples[len(samples)/2], samples[len(samples)*99/100]}
}

// Interleaved times ops in turn, Samples(n) rounds of one call each after
// a tenth as many rounds of warm-up, and returns each one's latency, in
// the order given.
func Interleaved(n int, ops ...func()) []Latency {
	n = Samples(n)
	for range n / 10 {
		for _, op := range ops {
			op()
		}
	}
	samples := make([][]time.Duration, len(ops))
	for i := range samples {
		samples[i] = make([]time.Duration, n)
	}
	for round := range n {
		start := time.Now()
		for i, op := range ops {
			op()
			end := time.Now()
			samples[i][round], start = end.Sub(start), end
		}
	}
	out := make([]Latency, len(ops))
	for i, s := range samples {
		out[i] = Percentiles(s)
	}
	return out
}

// Throughput runs Samples(total) calls of op spread over callers
// goroutines and returns the calls per second.
func Throughput(callers, total int, op func()) float64 {
	total = Samples(total)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(total) {
				op()
			}
		})
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}
