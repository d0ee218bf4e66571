package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
)

// acceptBatch coordinates a BatchInvocation. Each call goes over the bus
// as an invocation of its own, so routing, validation, policy and
// confirmation apply to it exactly as to a single call, with the batch's
// sender as the caller.
func (e *Executor) acceptBatch(m *nats.Msg) {
	e.recordRequest(m, "")
	b, err := events.Decode[events.BatchInvocation](m.Data)
	if err != nil {
		bad := e.result(&events.Invocation{Header: events.Header{ID: "unknown"}}, "", events.ErrInvalidParams, "malformed batch: "+err.Error())
		e.respondBatch(m.Reply, events.Unproven, &events.BatchResult{Header: events.Header{Sender: e.id}, BatchID: "unknown", Results: []events.Result{*bad}})
		return
	}
	principal, err := e.bindCaller(m, &b.Sender, false)
	if err != nil {
		bad := e.result(&events.Invocation{Header: events.Header{ID: b.ID + ".0"}}, "", events.ErrInvalidParams, err.Error())
		e.respondBatch(m.Reply, principal, &events.BatchResult{Header: events.Header{Sender: e.id}, BatchID: b.ID, Results: []events.Result{*bad}})
		return
	}
	e.mu.Lock()
	select {
	case <-e.stopping:
		e.mu.Unlock()
		return
	default:
	}
	// A batch whose caller gives up stops: the calls still running are
	// given up in turn, by this executor's client, which records a
	// terminal result for each of them, and those not started are not
	// sent; its caller publishes no result of its own (GaveUpSent).
	ctx, cancel := context.WithCancelCause(context.Background())
	if _, dup := e.batches[b.ID]; !dup {
		e.batches[b.ID] = batchRun{stop: cancel, principal: principal}
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		stop := e.beatUntilDone(m.Reply)
		res := e.runBatch(ctx, b, principal)
		stop()
		e.mu.Lock()
		delete(e.batches, b.ID)
		e.finished.add(b.ID) // its calls' results are recorded
		e.mu.Unlock()
		cancel(nil)
		e.respondBatch(m.Reply, principal, res)
	}()
}

// beatUntilDone sends heartbeats to reply until the returned func is called.
func (e *Executor) beatUntilDone(reply string) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(invoke.HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				m := nats.NewMsg(reply)
				m.Header.Set(events.KindHeader, events.KindHeartbeat)
				m.Header.Set(events.ExecutorHeader, e.id.ID)
				_ = e.nc.PublishMsg(m)
			}
		}
	}()
	return func() { close(done) }
}

// batchRun is a batch this executor coordinates: how to stop it, and
// whose it is.
type batchRun struct {
	stop      context.CancelCauseFunc
	principal string
}

// runBatch runs b's calls, each sent as an invocation of the batch's
// principal: the executor that takes one binds its caller again.
func (e *Executor) runBatch(ctx context.Context, b *events.BatchInvocation, principal string) *events.BatchResult {
	n := len(b.Calls)
	results := make([]events.Result, n)
	invoker := e.batchClient()
	run := func(i int, args json.RawMessage) {
		inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("%s.%d", b.ID, i), Sender: b.Sender},
			Tool: b.Calls[i].Tool, Args: args, TimeoutMillis: b.Calls[i].TimeoutMillis}
		if ctx.Err() != nil {
			results[i] = *e.result(inv, inv.Tool, events.ErrCancelled, "Not run: the batch's caller gave up.")
			return
		}
		res, err := invoker.InvokeFor(ctx, inv, principal, nil)
		if err != nil {
			res = e.result(inv, inv.Tool, events.ErrExecutionFailed, err.Error())
		}
		results[i] = *res
	}
	failed := func(from, to int) bool {
		for k := from; k < to; k++ {
			if results[k].Error != nil {
				return true
			}
		}
		return false
	}
	for i := 0; i < n; {
		// Concurrency-safe calls that refer to no earlier result run
		// together; any other call runs alone, in order.
		j := i
		for j < n && e.parallelizable(b.Calls[j]) {
			j++
		}
		if j > i+1 {
			var wg sync.WaitGroup
			for k := i; k < j; k++ {
				wg.Go(func() { run(k, b.Calls[k].Args) })
			}
			wg.Wait()
		} else {
			j = i + 1
			args, err := substitute(b.Calls[i].Args, results, i)
			if err != nil {
				inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("%s.%d", b.ID, i)}}
				results[i] = *e.result(inv, b.Calls[i].Tool, events.ErrInvalidParams, err.Error())
			} else {
				run(i, args)
			}
		}
		if b.AbortOnError && failed(i, j) {
			for k := j; k < n; k++ {
				inv := &events.Invocation{Header: events.Header{ID: fmt.Sprintf("%s.%d", b.ID, k)}}
				results[k] = *e.result(inv, b.Calls[k].Tool, events.ErrCancelled, "Not run: an earlier call of the batch failed and abortOnError is set.")
			}
			break
		}
		i = j
	}
	return &events.BatchResult{Header: events.Header{Sender: e.id}, BatchID: b.ID, Results: results}
}

// parallelizable reports whether a call may run beside its neighbours.
func (e *Executor) parallelizable(c events.BatchCall) bool {
	if bytes.Contains(c.Args, []byte(`"$previous"`)) || bytes.Contains(c.Args, []byte(`"$step`)) {
		return false
	}
	t, ok := e.catalog.Catalog().GetTool(c.Tool)
	return ok && t.ConcurrencySafe
}

// substitute replaces argument values "$previous" and "$stepN" with the
// llmContent of those earlier calls.
func substitute(raw json.RawMessage, results []events.Result, i int) (json.RawMessage, error) {
	if !bytes.Contains(raw, []byte(`"$`)) {
		return raw, nil
	}
	args, err := policy.DecodeArgs(raw)
	if err != nil {
		return raw, nil // the pipeline reports bad arguments
	}
	for k, v := range args {
		s, ok := v.(string)
		if !ok {
			continue
		}
		switch {
		case s == "$previous":
			if i == 0 {
				return nil, fmt.Errorf("argument %q refers to $previous, but this is the first call", k)
			}
			args[k] = results[i-1].LLMContent
		case strings.HasPrefix(s, "$step"):
			n, err := strconv.Atoi(s[len("$step"):])
			if err != nil || n < 0 || n >= i {
				return nil, fmt.Errorf("argument %q refers to %s, which is not an earlier call of the batch", k, s)
			}
			args[k] = results[n].LLMContent
		}
	}
	return json.Marshal(args)
}

// respondBatch sends res to reply; an output cut to fit is kept for owner.
func (e *Executor) respondBatch(reply, owner string, res *events.BatchResult) {
	if reply == "" {
		return
	}
	results := make([]*events.Result, len(res.Results))
	for i := range res.Results {
		results[i] = &res.Results[i]
	}
	data, err := e.fit(owner, res, results)
	if err == nil {
		err = e.nc.Publish(reply, data)
	}
	if err != nil {
		e.log.Error("batch result not sent", "batch", res.BatchID, "err", err)
	}
	e.endAnswers(reply)
}

// errBatchAbandoned ends a batch whose caller gave up: its calls still
// running are given up in turn by the executor's client, which records
// their terminal results.
var errBatchAbandoned = errors.New("the batch's caller gave up")

// batchClient is the executor's own client for the calls of batches.
func (e *Executor) batchClient() *invoke.Client {
	e.invokerOnce.Do(func() { e.invoker = invoke.NewBatchClient(e.nc, e.id) })
	return e.invoker
}
