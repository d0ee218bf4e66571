package checkpoint_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/audit/checkpoint"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// steps publishes n step events, as an executor would, and waits until
// the stream holds them.
func steps(t *testing.T, b *bus.Bus, n int) {
	t.Helper()
	ctx := context.Background()
	stream, err := b.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := stream.Info(ctx)
	want := info.State.Msgs + uint64(n)
	for range n {
		data, err := events.Encode(&events.Step{Header: events.Header{Sender: events.Identity{ID: "executor@test"}}, InvocationID: "inv", Tool: "read_file", Step: "validated"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Conn().Publish(events.SubjectStep, data); err != nil {
			t.Fatal(err)
		}
	}
	b.Conn().Flush()
	if !testkit.Poll(30*time.Second, func() bool {
		info, err = stream.Info(ctx)
		return err == nil && info.State.Msgs >= want
	}) {
		t.Fatalf("the stream holds %d of %d", info.State.Msgs, want)
	}
}

func takeCheckpoint(t *testing.T, c *checkpoint.Checkpointer) *events.AuditCheckpoint {
	t.Helper()
	cp, err := c.Checkpoint(context.Background())
	if err != nil || cp == nil {
		t.Fatalf("checkpoint: %v %v", cp, err)
	}
	return cp
}

func verify(t *testing.T, b *bus.Bus, pub ed25519.PublicKey) *checkpoint.Report {
	t.Helper()
	rep, err := checkpoint.Verify(context.Background(), b.JetStream(), time.Time{}, pub)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The audit stream refuses deletes and purges, and that cannot be taken
// back by a part started with deletes allowed.
func TestTheAuditStreamRefusesDeletes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := bustest.Start(t, dir)
	steps(t, b, 3)
	ctx := context.Background()
	stream, err := b.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, 2); err == nil {
		t.Error("a message was deleted")
	}
	if err := stream.Purge(ctx); err == nil {
		t.Error("the stream was purged")
	}
	// Another part asking for deletes does not get them, and still starts.
	other, err := bus.Connect(ctx, bus.Config{URL: b.URL(), Name: "other", AuditAllowDelete: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer bustest.Stop(t, other)
	if err := stream.DeleteMsg(ctx, 2); err == nil {
		t.Error("a message was deleted after another part opened the bus")
	}
}

// Verify passes a stream that matches its checkpoints, and reports a
// message removed by hand (deny-delete off), a checkpoint of a key it
// does not trust, and a broken chain.
func TestVerifyFindsWhatWasRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Name: t.Name(), AuditAllowDelete: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer bustest.Stop(t, node)
	b := node.Bus
	keyDir := t.TempDir()
	key, err := checkpoint.LoadOrCreateKey(keyDir)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := checkpoint.LoadOrCreateKey(keyDir); err != nil || !again.Equal(key) {
		t.Fatalf("the key was not kept: %v", err)
	}
	pub, err := checkpoint.ReadPublicKey(filepath.Join(keyDir, checkpoint.PublicKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cpr := checkpoint.Start(b.Conn(), b.JetStream(), key, events.Identity{ID: "bus@test", Role: "bus"}, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer cpr.Stop()

	steps(t, b, 20)
	first := takeCheckpoint(t, cpr)
	steps(t, b, 20)
	second := takeCheckpoint(t, cpr)
	if second.From != first.To+1 || second.Previous != first.Digest || first.Index != 1 || second.Index != 2 {
		t.Errorf("not chained: %+v then %+v", first, second)
	}
	if cp, err := cpr.Checkpoint(ctx); err != nil || cp != nil {
		t.Errorf("a checkpoint of the last checkpoint alone: %+v %v", cp, err)
	}
	steps(t, b, 5)
	rep := verify(t, b, pub)
	if !rep.OK() || rep.Checkpoints != 2 || rep.Unchecked != 6 || rep.Head == nil || rep.Head.Digest != second.Digest {
		t.Fatalf("a clean stream: %+v", rep)
	}

	// Another key's checkpoint is not trusted.
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	forger := checkpoint.Start(b.Conn(), b.JetStream(), otherKey, events.Identity{ID: "bus@test", Role: "bus"}, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	takeCheckpoint(t, forger)
	forger.Stop()
	steps(t, b, 1)
	if rep := verify(t, b, pub); rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), "not the trusted") {
		t.Errorf("a forged checkpoint: %+v", rep)
	}

	// A message removed by hand from the first checkpoint's range.
	stream, err := b.JetStream().Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, first.From+3); err != nil {
		t.Fatal(err)
	}
	rep = verify(t, b, pub)
	problems := strings.Join(rep.Problems, "\n")
	if rep.OK() || len(rep.Gaps) != 1 || rep.Gaps[0] != [2]uint64{first.From + 3, first.From + 3} || !strings.Contains(problems, "counted 20") {
		t.Errorf("a removed message: %+v", rep)
	}
	// The second checkpoint still matches.
	if rep.Checkpoints != 1 {
		t.Errorf("%d checkpoints match, want the second", rep.Checkpoints)
	}
}
