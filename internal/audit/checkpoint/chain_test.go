package checkpoint_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/audit/checkpoint"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// smallBus starts a bus node whose audit stream keeps 64 KiB (a couple
// of hundred step events), with the node's checkpoint key made but no
// checkpoint due for an hour: the test takes them. It returns the bus,
// a checkpointer with the node's key and the key's public half.
func smallBus(t *testing.T, checkpointEvery time.Duration) (*bus.Bus, *checkpoint.Checkpointer, ed25519.PrivateKey) {
	t.Helper()
	dir := t.TempDir()
	node, err := busnode.Start(context.Background(), busnode.Config{Listen: "127.0.0.1:0", DataDir: dir, Name: t.Name(),
		AuditMaxBytes: 64 << 10, CheckpointEvery: checkpointEvery, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bustest.Stop(t, node) })
	// The trail lets nothing go but by age; here, where the tests push
	// the oldest out with a flood (flood) instead of waiting for them to
	// age, it lets the oldest go when full, which verify reports the
	// same way.
	s, err := node.JetStream().Stream(context.Background(), events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Discard = jetstream.DiscardOld
	if _, err := node.JetStream().UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	key, err := checkpoint.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	cpr := checkpoint.Start(node.Conn(), node.JetStream(), key, events.Identity{ID: "bus@test", Role: "bus"}, time.Hour, bustest.Quiet())
	t.Cleanup(cpr.Stop)
	return node.Bus, cpr, key
}

func streamOf(t *testing.T, b *bus.Bus) jetstream.Stream {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func state(t *testing.T, b *bus.Bus) jetstream.StreamState {
	t.Helper()
	info, err := streamOf(t, b).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// checkpointAt takes a checkpoint and returns it with its sequence.
func checkpointAt(t *testing.T, b *bus.Bus, c *checkpoint.Checkpointer) (*events.AuditCheckpoint, uint64) {
	t.Helper()
	cp := takeCheckpoint(t, c)
	m, err := streamOf(t, b).GetLastMsgForSubject(context.Background(), events.SubjectAuditCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	return cp, m.Sequence
}

// flood publishes step events, a few at a time, until the stream's limit
// has pushed out every message up to past, as its age limit would in
// time. It fails the test if that also pushed out keep.
func flood(t *testing.T, b *bus.Bus, past, keep uint64) {
	t.Helper()
	for state(t, b).FirstSeq <= past {
		want := state(t, b).LastSeq + 5
		for range 5 {
			data, err := events.Encode(&events.Step{Header: events.Header{Sender: events.Identity{ID: "executor@test"}}, InvocationID: "flood", Tool: "read_file", Step: "validated"})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Conn().Publish(events.SubjectStep, data); err != nil {
				t.Fatal(err)
			}
		}
		if !testkit.Poll(30*time.Second, func() bool { return state(t, b).LastSeq >= want }) {
			t.Fatal("the stream did not take the flood")
		}
	}
	if keep > 0 && state(t, b).FirstSeq > keep {
		t.Fatalf("the flood pushed out #%d too", keep)
	}
}

// A flood that pushes the chain's first checkpoints out of the stream:
// what remains verifies, yet verify is not OK and names what is gone;
// with --since, which chooses the start, it is.
func TestVerifyReportsALostStart(t *testing.T) {
	t.Parallel()
	b, cpr, key := smallBus(t, time.Hour)
	pub := key.Public().(ed25519.PublicKey)

	// The node made the bucket of the chain's ends at its start.
	steps(t, b, 5)
	if rep := verify(t, b, pub); !rep.OK() || !strings.Contains(rep.ChainUnknown, "no checkpoint") {
		t.Fatalf("before any checkpoint: %+v", rep)
	}
	steps(t, b, 20)
	cp1, _ := checkpointAt(t, b, cpr)
	steps(t, b, 20)
	cp2, seq2 := checkpointAt(t, b, cpr)
	steps(t, b, 20)
	cp3, seq3 := checkpointAt(t, b, cpr)
	if cp1.Index != 1 || cp1.Previous != "" || cp2.Index != 2 || cp3.Index != 3 || cp3.Previous != cp2.Digest {
		t.Fatalf("not numbered: %+v %+v %+v", cp1, cp2, cp3)
	}
	rep := verify(t, b, pub)
	if !rep.OK() || rep.Checkpoints != 3 || rep.First == nil || rep.First.Digest != cp1.Digest || rep.Head == nil || rep.Head.Digest != cp3.Digest || rep.Lost() != "" {
		t.Fatalf("an intact trail: %+v", rep)
	}

	flood(t, b, seq2, seq3)
	cp4, _ := checkpointAt(t, b, cpr)
	if cp4.Index != 4 || cp4.Previous != cp3.Digest {
		t.Errorf("the chain did not go on: %+v", cp4)
	}
	first := state(t, b).FirstSeq
	rep = verify(t, b, pub)
	want := fmt.Sprintf("events #1..#%d and 2 checkpoints are no longer in the stream", first-1)
	if rep.OK() || !rep.Intact() || rep.LostEvents != [2]uint64{1, first - 1} || rep.LostCheckpoints != 2 || rep.HeadMissing || rep.Lost() != want {
		t.Errorf("a lost start: %+v\n%s\nwant %s", rep, rep.Lost(), want)
	}
	// cp3's range lost its start: only cp4 can be recomputed.
	if rep.Checkpoints != 1 {
		t.Errorf("%d checkpoints match, want 1", rep.Checkpoints)
	}

	rep, err := checkpoint.Verify(context.Background(), b.JetStream(), time.Now().Add(-time.Hour), pub)
	if err != nil || !rep.OK() || rep.Lost() != "" {
		t.Errorf("with --since: %+v %v", rep, err)
	}
}

// A flood that pushes every checkpoint out: verify counts them from the
// head the bus keeps, and the next checkpoint goes on from that head,
// not a new chain.
func TestTheChainGoesOnFromItsHead(t *testing.T) {
	t.Parallel()
	b, cpr, key := smallBus(t, 0)
	pub := key.Public().(ed25519.PublicKey)
	steps(t, b, 20)
	takeCheckpoint(t, cpr)
	steps(t, b, 20)
	cp2, seq2 := checkpointAt(t, b, cpr)

	flood(t, b, seq2, 0)
	first := state(t, b).FirstSeq
	rep := verify(t, b, pub)
	want := fmt.Sprintf("events #1..#%d and 2 checkpoints are no longer in the stream", first-1)
	if rep.OK() || !rep.Intact() || rep.LostCheckpoints != 2 || rep.Lost() != want {
		t.Errorf("no checkpoint left: %+v\n%s\nwant %s", rep, rep.Lost(), want)
	}

	// A checkpointer started anew, as after a restart, goes on too.
	cpr.Stop()
	again := checkpoint.Start(b.Conn(), b.JetStream(), key, events.Identity{ID: "bus@test", Role: "bus"}, time.Hour, bustest.Quiet())
	defer again.Stop()
	cp3 := takeCheckpoint(t, again)
	if cp3.Index != 3 || cp3.Previous != cp2.Digest || cp3.From != first {
		t.Errorf("the chain did not go on from its head %+v: %+v", cp2, cp3)
	}
	first = state(t, b).FirstSeq
	rep = verify(t, b, pub)
	want = fmt.Sprintf("events #1..#%d and 2 checkpoints are no longer in the stream", first-1)
	// (cp3 covers the stream from its first message on: publishing it
	// pushed that one out, so its digest cannot be recomputed.)
	if rep.OK() || !rep.Intact() || rep.LostCheckpoints != 2 || rep.Head == nil || rep.Head.Digest != cp3.Digest || rep.Lost() != want {
		t.Errorf("after the next checkpoint: %+v\n%s\nwant %s", rep, rep.Lost(), want)
	}
}

// The bucket's entries are trusted only when signed with the trusted key:
// a forged head is reported and not used, and the checkpointer will not
// go on from it. A head signed with the key but missing from the stream
// (a stream restored from an older copy) is reported too.
func TestAForgedHeadIsNotTrusted(t *testing.T) {
	t.Parallel()
	b, cpr, key := smallBus(t, 0)
	pub := key.Public().(ed25519.PublicKey)
	ctx := context.Background()
	steps(t, b, 10)
	takeCheckpoint(t, cpr)
	steps(t, b, 10)
	cp2 := takeCheckpoint(t, cpr)
	chain, err := b.JetStream().KeyValue(ctx, events.AuditChainBucket)
	if err != nil {
		t.Fatal(err)
	}
	headKey := checkpoint.HeadKey(checkpoint.KeyID(pub))

	// A head the bus's key signed, two checkpoints ahead of the stream.
	ahead := *cp2
	ahead.Index, ahead.Previous, ahead.Time = cp2.Index+2, cp2.Digest, time.Now()
	sign(t, &ahead, key)
	put(t, chain, headKey, &ahead)
	rep := verify(t, b, pub)
	if rep.OK() || !rep.Intact() || !rep.HeadMissing || rep.MissingAtEnd != 2 || !strings.Contains(rep.Lost(), "the last 2 checkpoints of the chain are gone") {
		t.Errorf("a head not in the stream: %+v %s", rep, rep.Lost())
	}

	// The same head signed with another key, under the trusted key's id.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	sign(t, &ahead, other)
	put(t, chain, headKey, &ahead)
	rep = verify(t, b, pub)
	if rep.OK() || rep.Head != nil || rep.HeadMissing || !strings.Contains(strings.Join(rep.Problems, "\n"), headKey+" is not trusted") {
		t.Errorf("a forged head: %+v", rep)
	}
	steps(t, b, 1)
	if cp, err := cpr.Checkpoint(ctx); err == nil || !strings.Contains(err.Error(), "not this bus's") {
		t.Errorf("a checkpoint after a forged head: %+v %v", cp, err)
	}
}

// A bus from before checkpoints were numbered: no bucket, checkpoints
// without an index. Its trail verifies, the head being unknown; once
// upgraded, it numbers its checkpoints on from the old chain.
func TestAnUpgradedBusNumbersOnFromTheOldChain(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pub := key.Public().(ed25519.PublicKey)
	ctx := context.Background()
	steps(t, b, 10)
	last := state(t, b).LastSeq
	old := &events.AuditCheckpoint{Header: events.Header{Sender: events.Identity{ID: "bus@old", Role: "bus"}}, From: 1, To: last, Count: last,
		Digest: digest(t, b, 1, last), Key: checkpoint.KeyID(pub)}
	events.Stamp(old)
	sign(t, old, key)
	data, err := events.Encode(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.RecordOnce(ctx, b.Conn(), events.SubjectAuditCheckpoint, "old-checkpoint", data); err != nil {
		t.Fatal(err)
	}
	steps(t, b, 5)
	rep := verify(t, b, pub)
	if !rep.OK() || rep.Checkpoints != 1 || !strings.Contains(rep.ChainUnknown, "no "+events.AuditChainBucket+" bucket") {
		t.Fatalf("an old bus's trail: %+v", rep)
	}

	cpr := checkpoint.Start(b.Conn(), b.JetStream(), key, events.Identity{ID: "bus@test", Role: "bus"}, time.Hour, bustest.Quiet())
	defer cpr.Stop()
	cp := takeCheckpoint(t, cpr)
	if cp.Index != 1 || cp.Previous != old.Digest || cp.From != last+1 {
		t.Errorf("the first numbered checkpoint: %+v after %+v", cp, old)
	}
	rep = verify(t, b, pub)
	if !rep.OK() || rep.Checkpoints != 2 || rep.Head == nil || rep.Head.Digest != cp.Digest || rep.First == nil || rep.First.Digest != cp.Digest {
		t.Errorf("after the upgrade: %+v", rep)
	}
}

// Events that come while a checkpoint is made land before it in the
// stream but are not in its range: the next checkpoint takes them, even
// when that checkpoint is the stream's last message.
func TestEventsDuringACheckpointAreInTheNext(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pub := key.Public().(ed25519.PublicKey)
	steps(t, b, 10)
	// A checkpoint of #1..#10 made while #11..#15 came.
	cp := &events.AuditCheckpoint{Header: events.Header{Sender: events.Identity{ID: "bus@test", Role: "bus"}}, Index: 1, From: 1, To: 10, Count: 10,
		Digest: digest(t, b, 1, 10), Key: checkpoint.KeyID(pub)}
	steps(t, b, 5)
	events.Stamp(cp)
	sign(t, cp, key)
	data, err := events.Encode(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.RecordOnce(context.Background(), b.Conn(), events.SubjectAuditCheckpoint, "slow-checkpoint", data); err != nil {
		t.Fatal(err)
	}
	cpr := checkpoint.Start(b.Conn(), b.JetStream(), key, events.Identity{ID: "bus@test", Role: "bus"}, time.Hour, bustest.Quiet())
	defer cpr.Stop()
	next := takeCheckpoint(t, cpr)
	if next.From != 11 || next.To != 16 || next.Index != 2 || next.Previous != cp.Digest {
		t.Errorf("the next checkpoint: %+v", next)
	}
	if rep := verify(t, b, pub); !rep.OK() || rep.Checkpoints != 2 || rep.Unchecked != 1 {
		t.Errorf("%+v", rep)
	}
}

func sign(t *testing.T, cp *events.AuditCheckpoint, key ed25519.PrivateKey) {
	t.Helper()
	cp.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, cp.SignedText()))
}

func put(t *testing.T, kv jetstream.KeyValue, key string, cp *events.AuditCheckpoint) {
	t.Helper()
	data, err := events.Encode(cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, data); err != nil {
		t.Fatal(err)
	}
}

// digest is the range digest of the stream's messages from..to, as the
// package's comment describes it: what an old bus signed, and a check
// that the form did not change.
func digest(t *testing.T, b *bus.Bus, from, to uint64) string {
	t.Helper()
	stream := streamOf(t, b)
	h := sha256.New()
	for seq := from; seq <= to; seq++ {
		m, err := stream.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		l := sha256.New()
		l.Write(binary.BigEndian.AppendUint32(nil, uint32(len(m.Subject))))
		l.Write([]byte(m.Subject))
		l.Write(m.Data)
		h.Write(binary.BigEndian.AppendUint64(nil, seq))
		h.Write(l.Sum(nil))
	}
	return hex.EncodeToString(h.Sum(nil))
}
