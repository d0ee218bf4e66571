package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// countRecords reads subject of the audit stream and counts each payload.
func countRecords(t *testing.T, js jetstream.JetStream, subject string, want int) map[string]int {
	t.Helper()
	// Right after the leader's loss the stream may not answer for a
	// while: each read starts afresh until want messages are read, for
	// up to a minute and a half; then what was read is judged.
	var seen map[string]int
	var err error
	if testkit.Poll(90*time.Second, func() bool {
		var n int
		seen, n, err = readRecords(js, subject)
		return err == nil && n >= want
	}) {
		return seen
	}
	if err != nil {
		t.Fatalf("reading %s: %v", subject, err)
	}
	return seen
}

// readRecords reads every message on subject in the audit stream once,
// from the stream's leader (a message get answered by it, one after the
// other), not from a consumer placed on whichever copy, nor by direct
// get, which any copy answers: after a node is lost, a consumer on a
// copy still recovering answered nothing for 90 s.
func readRecords(js jetstream.JetStream, subject string) (map[string]int, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[string]int{}
	n := 0
	for seq := uint64(1); ; n++ {
		m, err := bus.NextMsg(ctx, js, events.AuditStream, seq, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return seen, n, nil
		}
		if err != nil {
			return seen, n, fmt.Errorf("after %d records: %w", n, err)
		}
		seen[string(m.Data)]++
		seq = m.Sequence + 1
	}
}

// The stream's leader is lost while records are being sent: every record
// is stored, each once. Plain publishes sent alongside may be lost (they
// are counted, not judged): the difference is what the recorder is for.
func TestRecordsSurviveTheLossOfTheStreamLeader(t *testing.T) {
	nodes := bustest.StartCluster(t, 3, 0)
	ctx := context.Background()
	stream, err := nodes[0].JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	leader := stream.CachedInfo().Cluster.Leader
	var gone *bus.Bus
	others := []*bus.Bus{}
	for _, n := range nodes {
		if n.Conn().ConnectedServerName() == leader {
			gone = n
		} else {
			others = append(others, n)
		}
	}
	if gone == nil {
		t.Fatalf("no node is the stream's leader %q", leader)
	}
	// The client is on the leader's node: what is in flight when it goes
	// is lost with the connection, and the stream is without a leader.
	client := bustest.ConnectURL(t, gone.URL()) // the others it learns from the node
	if client.Conn().ConnectedServerName() != leader {
		t.Fatalf("the client is on %s, not on the leader %s", client.Conn().ConnectedServerName(), leader)
	}
	rec, err := bus.NewRecorder(client.Conn(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}

	const n = 3000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if err := rec.Record("tool.test.recorded", []byte(strconv.Itoa(i))); err != nil {
				t.Errorf("record %d: %v", i, err)
			}
			_ = client.Conn().Publish("tool.test.plain", []byte(strconv.Itoa(i)))
			if i == n/3 {
				bustest.Stop(t, gone)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	wg.Wait()
	closeCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := rec.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if rec.Lost() != 0 {
		t.Errorf("the recorder gave up on %d records", rec.Lost())
	}
	seen := countRecords(t, client.JetStream(), "tool.test.recorded", n)
	missing, twice := 0, 0
	for i := 0; i < n; i++ {
		switch seen[strconv.Itoa(i)] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	if missing != 0 || twice != 0 {
		t.Errorf("of %d records, %d are missing and %d stored more than once", n, missing, twice)
	}
	plain := countRecords(t, client.JetStream(), "tool.test.plain", 0)
	t.Logf("with the stream's leader lost: %d of %d records stored once (%d sent again); %d of %d plain publishes stored", n-missing-twice, n, rec.Resent(), len(plain), n)
}

// A record sent again under its id is stored once.
func TestARecordSentAgainIsStoredOnce(t *testing.T) {
	b := bustest.Start(t, "")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := bus.RecordOnce(ctx, b.Conn(), "tool.test.once", "the-id", []byte(fmt.Sprint("copy ", i))); err != nil {
			t.Fatal(err)
		}
	}
	if seen := countRecords(t, b.JetStream(), "tool.test.once", 1); len(seen) != 1 || seen["copy 0"] != 1 {
		t.Errorf("stored %v, want the first copy once", seen)
	}
	// A record the stream refuses (too large for it) is said so, at once.
	huge := make([]byte, 2<<20)
	if err := bus.RecordOnce(ctx, b.Conn(), "tool.test.huge", "huge", huge); err == nil {
		t.Error("a record larger than the bus takes was accepted")
	}
}

// A stream made before records were acknowledged gets acknowledgements
// from the first part that connects: otherwise no record would ever be.
func TestAnUnacknowledgingStreamIsTurnedToAcknowledge(t *testing.T) {
	b := bustest.Start(t, "")
	ctx := context.Background()
	stream, err := b.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.NoAck = true
	if _, err := b.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	bustest.Connect(t, b)
	stream, err = b.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if stream.CachedInfo().Config.NoAck {
		t.Fatal("the stream still does not acknowledge")
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := bus.RecordOnce(rctx, b.Conn(), "tool.test.acked", "x", []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// No stream takes the records for a while (as when a cluster has no
// quorum): they wait, are sent again, and are stored, once each, when
// the stream is back.
func TestRecordsWaitForTheStreamToComeBack(t *testing.T) {
	b := bustest.Start(t, "")
	ctx := context.Background()
	stream, err := b.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	away := cfg
	away.Subjects = []string{"tool.elsewhere"}
	if _, err := b.JetStream().UpdateStream(ctx, away); err != nil {
		t.Fatal(err)
	}
	client := bustest.Connect(t, b)
	rec, err := bus.NewRecorder(client.Conn(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		if err := rec.Record("tool.test.waiting", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The library's own tries are spent; the recorder's go on.
	if !testkit.Poll(30*time.Second, func() bool { return rec.Resent() >= n }) {
		t.Fatalf("%d of %d records sent again", rec.Resent(), n)
	}
	if rec.Pending() != n {
		t.Errorf("%d records pending, want %d", rec.Pending(), n)
	}
	if _, err := b.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rec.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	seen := countRecords(t, b.JetStream(), "tool.test.waiting", n)
	for i := 0; i < n; i++ {
		if seen[strconv.Itoa(i)] != 1 {
			t.Fatalf("record %d stored %d times (%d distinct stored)", i, seen[strconv.Itoa(i)], len(seen))
		}
	}
}

// TestALargeRecordIsStoredByDigest: a record past events.MaxInlineRecord
// is stored small, its large field in events.BlobStream under its
// digest, and its receipt settles only once both are stored; a second
// record with the same field adds nothing to the blob stream.
func TestALargeRecordIsStoredByDigest(t *testing.T) {
	b := bustest.Start(t, "")
	rec, err := bus.NewRecorder(b.Conn(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close(context.Background())
	big := fmt.Sprintf(`{"id":"a","args":{"content":%q}}`, bytesOf('z', 100<<10))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		rc, err := rec.RecordReceipt(events.SubjectStep, []byte(big))
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Wait(ctx); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	js := b.JetStream()
	audit, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := audit.GetLastMsgForSubject(ctx, events.SubjectStep)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) > events.MaxInlineRecord {
		t.Fatalf("the record is %d bytes", len(m.Data))
	}
	back, err := events.Inline(m.Data, func(ref events.BlobRef) ([]byte, error) {
		blobs, err := js.Stream(ctx, events.BlobStream)
		if err != nil {
			return nil, err
		}
		bm, err := blobs.GetLastMsgForSubject(ctx, ref.Subject())
		if err != nil {
			return nil, err
		}
		return bm.Data, nil
	})
	if err != nil || len(back) < 100<<10 {
		t.Fatalf("read back %d bytes: %v", len(back), err)
	}
	blobs, err := js.Stream(ctx, events.BlobStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := blobs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("the blob stream holds %d messages for one field sent twice", info.State.Msgs)
	}
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

// TestAReceiptOfAClosedConnectionIsSettled: a record its stream cannot
// take yet, whose connection is then closed for good, is given up on and
// counted lost, and its waiter hears so, instead of waiting for an
// acknowledgement that can no longer come.
func TestAReceiptOfAClosedConnectionIsSettled(t *testing.T) {
	b := bustest.Start(t, "")
	client := bustest.Connect(t, b)
	rec, err := bus.NewRecorder(client.Conn(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec.Close(ctx)
	}()
	receipt, err := rec.RecordReceipt("tool.nowhere.stored", []byte("x")) // no stream takes it
	if err != nil {
		t.Fatal(err)
	}
	client.Conn().Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := receipt.Wait(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("the receipt gave %v (the wait: %v), want the record given up on", err, ctx.Err())
	}
	if rec.Lost() != 1 || rec.Pending() != 0 {
		t.Errorf("%d lost, %d pending; want the record lost", rec.Lost(), rec.Pending())
	}
}
