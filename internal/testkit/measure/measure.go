// Package measure times operations for the benchmarks, which print
// ratios against a baseline measured in the same run: operations are
// timed in turn, so that whatever else the machine does at the moment
// weighs on each alike.
//
// Only benchmarks import this package.
package measure

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Latency is an operation's median and 99th percentile.
type Latency struct{ P50, P99 time.Duration }

// Percentiles returns the p50 and p99 of samples, which it sorts.
func Percentiles(samples []time.Duration) Latency {
	slices.Sort(samples)
	return Latency{samples[len(samples)/2], samples[len(samples)*99/100]}
}

// Interleaved times ops in turn, n rounds of one call each after n/10
// rounds of warm-up, and returns each one's latency, in the order given.
func Interleaved(n int, ops ...func()) []Latency {
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

// Throughput runs total calls of op spread over callers goroutines and
// returns the calls per second.
func Throughput(callers, total int, op func()) float64 {
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
