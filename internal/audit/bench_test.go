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
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/bus/bustest"
	"github.com/toolbus/toolbus/internal/events"
)

// record publishes n invocations as an executor records them: the
// invocation, for a third of them an ASK_USER decision, a confirmation
// request and an answer, and a result; about 3.3 events each.
func record(b *testing.B, bb *bus.Bus, n int) int {
	b.Helper()
	nc := bb.Conn()
	caller := events.Identity{ID: "agent:bench", Role: "agent", Session: "s1"}
	exec := events.Identity{ID: "executor@bench", Role: "executor"}
	approver := events.Identity{ID: "approver:ada", Role: "approver"}
	published := 0
	// As the parts of a fleet do: plain publishes, which the stream
	// (NoAck) takes in without acknowledging them.
	publish := func(subject string, e events.Envelope) {
		data, err := events.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		if err := nc.Publish(subject, data); err != nil {
			b.Fatal(err)
		}
		published++
		if published%5000 == 0 {
			nc.Flush()
		}
	}
	for i := range n {
		id := fmt.Sprintf("inv-%06d", i)
		publish(events.SubjectInvoke, &events.Invocation{Header: events.Header{ID: id, Sender: caller}, Tool: "read_file",
			Args: json.RawMessage(fmt.Sprintf(`{"file_path":"src/file_%d.go"}`, i))})
		verdict := events.Allow
		if i%3 == 0 {
			verdict = events.AskUser
			publish(events.SubjectDecision, &events.Decision{Header: events.Header{Sender: exec}, InvocationID: id, Tool: "write_file",
				Verdict: verdict, Reason: "edit tools ask the user", PolicyRevision: "sha256:bench"})
			publish(events.SubjectConfirmAnswered, &events.ConfirmAnswer{Header: events.Header{Sender: approver}, InvocationID: id, Outcome: events.ProceedOnce})
		}
		publish(events.SubjectResult, &events.Result{Header: events.Header{Sender: exec}, InvocationID: id, Tool: "read_file",
			LLMContent: "package main\n", ReturnDisplay: "Read 1 line.", Policy: &events.PolicyVerdict{Verdict: verdict, Reason: "read tools are allowed", Revision: "sha256:bench"}})
	}
	nc.Flush()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		stream, err := bb.JetStream().Stream(context.Background(), events.AuditStream)
		if err != nil {
			b.Fatal(err)
		}
		info, err := stream.Info(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if int(info.State.Msgs) >= published {
			return published
		}
		if time.Now().After(deadline) {
			b.Fatalf("the stream holds %d of %d events", info.State.Msgs, published)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func BenchmarkList(b *testing.B) {
	const n = 100_000
	bb := bustest.Start(b, "")
	js := bustest.Connect(b, bb).JetStream()
	msgs := record(b, bb, n)
	ctx := context.Background()
	raw := func() time.Duration {
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
