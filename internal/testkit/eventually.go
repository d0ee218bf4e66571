package testkit

import (
	"testing"
	"time"
)

// Tests never sleep to synchronise with what runs on other goroutines or
// in other processes: a sleep long enough for a loaded machine makes every
// run slow, and is still too short on some run. They poll the state they
// wait for, with a deadline that a test which would pass never reaches.

// DefaultWait is how long Eventually waits: long enough for a shared,
// loaded machine, short enough for a test that cannot pass to fail with
// a message instead of hanging until go test's own timeout.
const DefaultWait = 30 * time.Second

// pollEvery is the pause between two tries of a cheap condition.
const pollEvery = 10 * time.Millisecond

// Eventually polls cond until it holds, failing the test with
// "never: what" if it does not within DefaultWait. Like tb.Fatalf, it
// must be called from the test's goroutine.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, DefaultWait, what, cond)
}

// EventuallyWithin is Eventually with a deadline of wait.
func EventuallyWithin(tb testing.TB, wait time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Poll(wait, cond) {
		tb.Fatalf("never: %s", what)
	}
}

// Poll tries cond until it holds, for up to wait, and reports whether it
// held. It is for the waits Eventually does not fit: one whose failure is
// told from what the last try saw, or by the checks that follow, or that
// must not end the test. It gives up only on a try that failed after the
// deadline passed. Between tries Poll pauses 10 ms, or as long as the try took
// when that is longer, so a costly try (running a command, a call
// through a fleet) keeps at most half of a core busy.
func Poll(wait time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(wait)
	for {
		began := time.Now()
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(max(pollEvery, time.Since(began)))
	}
}
