package executor

import (
	"sync"
	"time"
)

// workers runs the executor's calls and tool runs on goroutines that
// outlive one job. A goroutine made for each call starts with a small
// stack and grows it in the first JSON decoding of every call (the
// profile showed about 7 µs a call in runtime.copystack); a worker that
// waits for the next job keeps the stack it grew.
//
// The pool is elastic: a job goes to an idle worker if one is waiting and
// to a new one otherwise, so a tool that blocks for minutes never holds
// back another call. A worker idle for idleFor exits, and so does every
// idle worker once stop is called.
type workers struct {
	jobs    chan func()
	quit    chan struct{}
	idleFor time.Duration
	live    sync.WaitGroup
	once    sync.Once
}

func newWorkers(idleFor time.Duration) *workers {
	return &workers{jobs: make(chan func()), quit: make(chan struct{}), idleFor: idleFor}
}

// run starts job on a worker. It never blocks.
func (w *workers) run(job func()) {
	select {
	case w.jobs <- job: // an idle worker took it
	default:
		w.live.Add(1)
		go w.work(job)
	}
}

func (w *workers) work(job func()) {
	defer w.live.Done()
	idle := time.NewTimer(w.idleFor)
	defer idle.Stop()
	for {
		job()
		job = nil // let it be collected while the worker waits
		idle.Reset(w.idleFor)
		select {
		case job = <-w.jobs:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}

// stop makes idle workers exit, and busy ones when their job ends. wait
// says whether to wait for them all.
func (w *workers) stop(wait bool) {
	w.once.Do(func() { close(w.quit) })
	if wait {
		w.live.Wait()
	}
}
