package testkit

import (
	"fmt"
	"testing"
	"time"
)

func TestPollTriesUntilTheConditionHolds(t *testing.T) {
	tries := 0
	if !Poll(time.Minute, func() bool { tries++; return tries == 3 }) {
		t.Fatal("Poll gave up on a condition that held")
	}
	if tries != 3 {
		t.Errorf("cond tried %d times, want 3", tries)
	}
}

func TestPollGivesUpAfterTheDeadline(t *testing.T) {
	began := time.Now()
	var last time.Time
	if Poll(50*time.Millisecond, func() bool { last = time.Now(); return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if last.Sub(began) < 50*time.Millisecond {
		t.Errorf("the last try was %v after the start, want at least the 50ms given", last.Sub(began))
	}
}

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestEventuallyNamesWhatNeverHappened(t *testing.T) {
	tb := &fatalTB{TB: t}
	EventuallyWithin(tb, 20*time.Millisecond, "the tool is listed", func() bool { return false })
	if tb.failed != "never: the tool is listed" {
		t.Errorf("failed with %q, want %q", tb.failed, "never: the tool is listed")
	}
	tb.failed = ""
	Eventually(tb, "it holds", func() bool { return true })
	if tb.failed != "" {
		t.Errorf("failed with %q on a condition that held", tb.failed)
	}
}
