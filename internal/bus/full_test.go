package bus_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// shrinkAudit caps b's audit stream at maxBytes.
func shrinkAudit(t *testing.T, js jetstream.JetStream, maxBytes int64) jetstream.StreamInfo {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxBytes = maxBytes
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return *info
}

// TestAFullTrailKeepsItsOldestRecords: a flood of records into a small
// audit stream. The first record stays where it was, whatever comes
// after; the stream refuses what does not fit, and the recorder says so
// on the record's Receipt (ErrTrailFull) and to WhenFull, and sends none
// of them again: a stream that is full stays full.
func TestAFullTrailKeepsItsOldestRecords(t *testing.T) {
	b := bustest.Start(t, "")
	js := b.JetStream()
	ctx := context.Background()
	info := shrinkAudit(t, js, 256<<10)
	if info.Config.Discard != jetstream.DiscardNew {
		t.Fatalf("the audit stream discards %v, want DiscardNew", info.Config.Discard)
	}
	if info.Config.MaxAge != 0 {
		// bus.Config's own default: kept for good (the flags default
		// to bus.DefaultAuditMaxAge).
		t.Fatalf("MaxAge %s", info.Config.MaxAge)
	}
	var full atomic.Int64
	rec, err := bus.NewRecorder(b.Conn(), bustest.Quiet(), bus.WhenFull(func() { full.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close(ctx)

	first := []byte("the attack's own write_file")
	rc, err := rec.RecordReceipt("tool.test.evidence", first)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Wait(ctx); err != nil {
		t.Fatalf("the first record: %v", err)
	}
	evidence, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := evidence.GetLastMsgForSubject(ctx, "tool.test.evidence")
	if err != nil {
		t.Fatal(err)
	}

	flood := bytes.Repeat([]byte("x"), 16<<10)
	var refused error
	for i := 0; i < 64 && refused == nil; i++ {
		rc, err := rec.RecordReceipt("tool.test.flood", flood)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		refused = rc.Wait(wctx)
		cancel()
	}
	if !errors.Is(refused, bus.ErrTrailFull) {
		t.Fatalf("64 records of 16 KiB into a stream of 256 KiB: the last one's receipt says %v, want ErrTrailFull", refused)
	}
	if full.Load() == 0 {
		t.Error("WhenFull was not told")
	}
	got, err := evidence.GetMsg(ctx, kept.Sequence)
	if err != nil {
		t.Fatalf("the first record, #%d, after the flood: %v", kept.Sequence, err)
	}
	if !bytes.Equal(got.Data, first) {
		t.Fatalf("the first record, #%d, after the flood: %q", kept.Sequence, got.Data)
	}
	// Refused is given up on at once, not sent again every 250 ms.
	if !testkit.Poll(5*time.Second, func() bool { return rec.Pending() == 0 }) {
		t.Errorf("%d records still pending after the stream refused them", rec.Pending())
	}
	if rec.Lost() == 0 {
		t.Error("a refused record is not counted lost")
	}
	// RecordOnce, for parts that record seldom, hears the same and
	// does not try again until its context ends.
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := bus.RecordOnce(octx, b.Conn(), "tool.test.once", "once-1", flood); !errors.Is(err, bus.ErrTrailFull) || octx.Err() != nil {
		t.Errorf("RecordOnce into a full stream: %v (context: %v), want ErrTrailFull at once", err, octx.Err())
	}
}

// TestTheOwnerTurnsAnOldTrailToDiscardNew: a stream made when the trail
// let its oldest go (DiscardOld, no age) is updated by the bus's owner
// (and audit init) to retention by age and DiscardNew; a part that only
// connects turns DiscardNew on too, and keeps the owner's retention.
func TestTheOwnerTurnsAnOldTrailToDiscardNew(t *testing.T) {
	b := bustest.Start(t, "")
	js := b.JetStream()
	ctx := context.Background()
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	old := s.CachedInfo().Config
	old.Discard, old.MaxAge = jetstream.DiscardOld, 0
	if _, err := js.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureAudit(ctx, js, bus.Config{AuditMaxAge: bus.DefaultAuditMaxAge}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Discard != jetstream.DiscardNew || info.Config.MaxAge != bus.DefaultAuditMaxAge || info.Config.MaxBytes != bus.DefaultAuditMaxBytes {
		t.Fatalf("after EnsureAudit: discard %v, max age %s, max bytes %d", info.Config.Discard, info.Config.MaxAge, info.Config.MaxBytes)
	}

	old = info.Config
	old.Discard = jetstream.DiscardOld
	if _, err := js.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	bustest.Connect(t, b) // a part: it updates nothing but what a trail must be
	if info, err = s.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if info.Config.Discard != jetstream.DiscardNew || info.Config.MaxAge != bus.DefaultAuditMaxAge {
		t.Fatalf("after a part connected: discard %v, max age %s", info.Config.Discard, info.Config.MaxAge)
	}
}
