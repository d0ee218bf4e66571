package executor

import (
	"sync"
	"testing"
	"time"
)

// TestWorkersNeverQueueBehindABlockedJob: a job that blocks (a tool that
// runs for minutes) never holds back another; idle workers are reused and
// exit on stop.
func TestWorkersNeverQueueBehindABlockedJob(t *testing.T) {
	t.Parallel()
	w := newWorkers(time.Minute)
	release := make(chan struct{})
	w.run(func() { <-release })
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		w.run(wg.Done)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("jobs waited behind a blocked one")
	}
	close(release)
	stopped := make(chan struct{})
	go func() { w.stop(true); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end the idle workers")
	}
}

// TestIdleWorkersExit: a worker with nothing to do goes away by itself.
func TestIdleWorkersExit(t *testing.T) {
	t.Parallel()
	w := newWorkers(10 * time.Millisecond)
	ran := make(chan struct{})
	w.run(func() { close(ran) })
	<-ran
	exited := make(chan struct{})
	go func() { w.live.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle worker never exited")
	}
	w.stop(true)
}
