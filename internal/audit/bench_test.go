package audit_test

// BenchmarkList: `toolbus audit list` over 100,000 recorded invocations,
// against reading the same messages from the stream with an ordered
// consumer and decoding nothing, in the same run:
//
//	go test ./internal/audit -run '^$' -bench List -benchtime 1x

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/policy/shell"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/measure"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// record publishes n invocations as an executor records them: the
// invocation, the policy's decision with the input it was made on (made
// by pol, every input a different one; on its own for a call that asks,
// else folded into the result's record), for the calls that ask an
// approver's answer, and a result. A third are
// reads of files the policy allows, a third writes it asks about
// (answered), a third shell lines, most of which it asks about and some
// it denies.
func record(b *testing.B, bb *bus.Bus, n int, pol *policy.Policy) int {
	b.Helper()
	nc := bb.Conn()
	caller := events.Identity{ID: "agent:bench", Role: "agent", Session: "s1"}
	exec := events.Identity{ID: "executor@bench", Role: "executor"}
	approver := events.Identity{ID: "approver:ada", Role: "approver"}
	decisions := judgeAll(b, pol, n, caller)
	published := 0
	// Acknowledged, a bounded number at a time, as the parts' recorders
	// do: a flood of plain publishes overflows the stream's ingest queue,
	// which then drops them.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	publish := func(subject string, e events.Envelope) {
		data, err := events.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		// A loaded machine's stream may take a while to catch up.
		if _, err := js.PublishAsync(subject, data, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
		published++
	}
	for i := range n {
		id := fmt.Sprintf("inv-%06d", i)
		c := benchCall(i)
		publish(events.SubjectInvoke+"._", &events.Invocation{Header: events.Header{ID: id, Sender: caller}, Tool: c.tool, Args: c.args})
		d := decisions[i]
		dec := &events.Decision{Header: events.Header{Sender: exec}, InvocationID: id, Tool: c.tool,
			Verdict: d.Verdict, Reason: d.Reason, PolicyRevision: d.Revision,
			Input: d.rec.Input, ShellLine: d.rec.ShellLine, BashChecked: d.rec.BashChecked}
		res := &events.Result{Header: events.Header{Sender: exec}, InvocationID: id, Tool: c.tool,
			Policy: &events.PolicyVerdict{Verdict: d.Verdict, Reason: d.Reason, Revision: d.Revision}}
		// As an executor records them: the decision of a call that
		// waits for a person on its own, before it waits; any other's
		// folded into the record of its result.
		if d.Verdict == events.AskUser {
			publish(events.SubjectDecision, dec)
		} else {
			events.Stamp(dec)
			res.Decision = dec
		}
		switch d.Verdict {
		case events.AskUser:
			if i%3 == 0 {
				publish(events.SubjectConfirmAnswered, &events.ConfirmAnswer{Header: events.Header{Sender: approver}, InvocationID: id, Outcome: events.ProceedOnce})
				res.LLMContent, res.ReturnDisplay = "Wrote 1 line.", "Wrote 1 line."
			} else {
				res.Error = &events.ToolError{Type: events.ErrConfirmationTimeout, Message: "no answer"}
			}
		case events.Deny:
			res.Error = &events.ToolError{Type: events.ErrPolicyDenied, Message: d.Reason}
		default:
			res.LLMContent, res.ReturnDisplay = "package main\n", "Read 1 line."
		}
		publish(events.SubjectResult, res)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		b.Fatalf("the stream did not acknowledge %d events in two minutes", js.PublishAsyncPending())
	}
	var held uint64
	if !testkit.Poll(2*time.Minute, func() bool {
		stream, err := bb.JetStream().Stream(context.Background(), events.AuditStream)
		if err != nil {
			b.Fatal(err)
		}
		info, err := stream.Info(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		held = info.State.Msgs
		return int(held) >= published
	}) {
		b.Fatalf("the stream holds %d of %d events", held, published)
	}
	return published
}

type call struct {
	tool string
	args json.RawMessage
}

// benchCall is the i-th call of the recorded traffic.
func benchCall(i int) call {
	switch i % 3 {
	case 0:
		return call{"write_file", json.RawMessage(fmt.Sprintf(`{"file_path":"src/gen_%d.go","content":"package gen\n"}`, i))}
	case 1:
		return call{"read_file", json.RawMessage(fmt.Sprintf(`{"file_path":"src/file_%d.go"}`, i))}
	}
	lines := []string{"go test ./pkg%d/...", "git log -n %d", "grep -rn unused src/mod%d", "rm -rf /tmp/build%d && rm -rf /", "cat .env.%d"}
	line := fmt.Sprintf(lines[(i/3)%len(lines)], i)
	data, _ := json.Marshal(map[string]string{"command": line})
	return call{"run_shell_command", data}
}

// benchInput is the policy input an executor makes of call i.
func benchInput(pol *policy.Policy, i int, caller events.Identity) *policy.Input {
	c := benchCall(i)
	args, _ := policy.DecodeArgs(c.args)
	in := &policy.Input{Args: args, Caller: caller, Home: "/home/ada", Workspace: "/w"}
	switch c.tool {
	case "write_file":
		in.Tool = policy.ToolInput{Name: c.tool, Kind: events.KindEdit, Source: events.SourceBuiltin}
		in.Paths = []string{"/w/" + args["file_path"].(string)}
	case "read_file":
		in.Tool = policy.ToolInput{Name: c.tool, Kind: events.KindRead, Source: events.SourceBuiltin, ReadOnly: true}
		in.Paths = []string{"/w/" + args["file_path"].(string)}
	default:
		in.Tool = policy.ToolInput{Name: c.tool, Kind: events.KindExecute, Source: events.SourceBuiltin}
		sh := shell.Analyze(args["command"].(string))
		in.Shell = &sh
		in.Paths = sh.Locate("/w", "/home/ada", pol.Samples())
	}
	return in
}

type benchDecision struct {
	policy.Decision
	rec policy.Recorded
}

// judgeAll decides the n calls under pol on every core.
func judgeAll(b *testing.B, pol *policy.Policy, n int, caller events.Identity) []benchDecision {
	out := make([]benchDecision, n)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				out[i].Decision, out[i].rec = pol.DecideRecorded(context.Background(), benchInput(pol, i, caller))
			}
		})
	}
	wg.Wait()
	return out
}

// defaultPolicy is the built-in policy set with extra files.
func defaultPolicy(b *testing.B, extra policy.Files) *policy.Policy {
	files := maps.Clone(policy.Files(defaultpolicy.Default()))
	maps.Copy(files, extra)
	p, err := policy.Compile(context.Background(), files)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func BenchmarkList(b *testing.B) {
	n := measure.Samples(100_000)
	bb := bustest.Start(b, "")
	js := bustest.Connect(b, bb).JetStream()
	msgs := record(b, bb, n, defaultPolicy(b, nil))
	ctx := context.Background()
	raw := func() time.Duration { return rawRead(b, js, msgs) }
	b.ResetTimer()
	raw() // the first read brings the stream's blocks into memory
	for range b.N {
		base := raw()
		recs, st, err := audit.Read(ctx, js, audit.Query{})
		if err != nil {
			b.Fatal(err)
		}
		if len(recs) != n || st.Messages != msgs {
			b.Fatalf("%d records of %d messages, want %d of %d", len(recs), st.Messages, n, msgs)
		}
		filtered, _, err := audit.Read(ctx, js, audit.Query{Verdict: "ASK_USER", Approver: "approver:ada"})
		if err != nil || len(filtered) != (n+2)/3 {
			b.Fatalf("%v, %d filtered", err, len(filtered))
		}
		rate := func(d time.Duration) string { return fmt.Sprintf("%.0f events/s", float64(msgs)/d.Seconds()) }
		fmt.Printf("\naudit list over %d invocations (%d events)\n", n, msgs)
		fmt.Printf("%-50s %12s %18s\n", "raw ordered-consumer read, no decoding (baseline)", base.Round(time.Millisecond), rate(base))
		fmt.Printf("%-50s %12s %18s %6.2f×   goal ≥ 100000 events/s\n", "audit.Read: decode, join, filter", st.Elapsed.Round(time.Millisecond), rate(st.Elapsed), float64(st.Elapsed)/float64(base))
		b.ReportMetric(float64(msgs)/st.Elapsed.Seconds(), "events/s")
	}
}

// rawRead reads the msgs messages of the audit subjects with an ordered
// consumer, decoding nothing: the baseline of every audit read.
func rawRead(b *testing.B, js jetstream.JetStream, msgs int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		b.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: audit.Subjects})
	if err != nil {
		b.Fatal(err)
	}
	for got := 0; got < msgs; {
		batch, err := cons.Fetch(2000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		k := 0
		for range batch.Messages() {
			if k++; got+k == msgs {
				break
			}
		}
		if k == 0 {
			b.Fatalf("raw read stopped at %d of %d", got, msgs)
		}
		got += k
	}
	return time.Since(start)
}

// BenchmarkWhatIf: `toolbus audit whatif` over 100,000 recorded
// invocations under a stricter policy, against, in the same run, the raw
// read of the same messages and the replay of the same decisions from
// memory on every core (the policy's evaluation alone):
//
//	go test ./internal/audit -run '^$' -bench WhatIf -benchtime 1x
func BenchmarkWhatIf(b *testing.B) {
	n := measure.Samples(100_000)
	bb := bustest.Start(b, "")
	js := bustest.Connect(b, bb).JetStream()
	caller := events.Identity{ID: "agent:bench", Role: "agent", Session: "s1"}
	recorded := defaultPolicy(b, nil)
	msgs := record(b, bb, n, recorded)
	stricter := defaultPolicy(b, policy.Files{"frozen.rego": `package toolbus

deny contains "generated code is frozen" if {
	input.tool.name == "write_file"
	startswith(input.args.file_path, "src/gen_1")
}
`})
	want := 0
	for i := range n {
		if c := benchCall(i); c.tool == "write_file" && strings.HasPrefix(string(c.args), `{"file_path":"src/gen_1`) {
			want++
		}
	}
	// The decisions and arguments as a replay from memory takes them.
	decisions := judgeAll(b, recorded, n, caller)
	args := make([]map[string]any, n)
	for i := range n {
		args[i], _ = policy.DecodeArgs(benchCall(i).args)
	}
	ctx := context.Background()
	fromMemory := func() time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		workers := runtime.GOMAXPROCS(0)
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					if _, err := stricter.Replay(ctx, decisions[i].rec, args[i]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	rawRead(b, js, msgs) // the first read brings the stream's blocks into memory
	for range b.N {
		base := rawRead(b, js, msgs)
		eval := fromMemory()
		w, err := audit.RunWhatIf(ctx, js, audit.Query{}, stricter)
		if err != nil {
			b.Fatal(err)
		}
		if w.Replayed != n || len(w.Changes) != want || len(w.Failed) != 0 {
			b.Fatalf("%d replayed, %d changes (want %d), %d failed", w.Replayed, len(w.Changes), want, len(w.Failed))
		}
		el := w.Stats.Elapsed
		rate := func(d time.Duration) string { return fmt.Sprintf("%.0f invocations/s", float64(n)/d.Seconds()) }
		fmt.Printf("\naudit whatif over %d invocations (%d events), %d decisions would change, %d cores\n", n, msgs, want, runtime.GOMAXPROCS(0))
		fmt.Printf("%-52s %10s %22s\n", "raw ordered-consumer read, no decoding (baseline)", base.Round(time.Millisecond), rate(base))
		fmt.Printf("%-52s %10s %22s\n", "the replays alone, from memory (baseline)", eval.Round(time.Millisecond), rate(eval))
		fmt.Printf("%-52s %10s %22s %5.2f× the replays   goal ≥ 30000 invocations/s\n", "audit.RunWhatIf: read, join, replay", el.Round(time.Millisecond), rate(el), float64(el)/float64(eval))
		b.ReportMetric(float64(n)/el.Seconds(), "invocations/s")
	}
}
