package busnode_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

func openWith(t *testing.T, dir, key string) (*bus.Bus, error) {
	t.Helper()
	n, err := busnode.Start(context.Background(), busnode.Config{Listen: "127.0.0.1:0", DataDir: dir, Name: t.Name(), StoreKey: key,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	return n.Bus, nil
}

func auditMsgs(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// With a store key, what the audit stream keeps is not in its files as
// written, history survives a restart with the same key, and a start
// with another key or none fails instead of starting on an empty store.
func TestTheStoreIsEncryptedAtRest(t *testing.T) {
	dir := t.TempDir()
	const secret = "a-recognisable-secret-0123456789"
	b, err := openWith(t, dir, "the first key")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Publish(events.SubjectStep, []byte(`{"note":"`+secret+`"}`)); err != nil {
		t.Fatal(err)
	}
	b.Conn().Flush()
	testkit.Poll(10*time.Second, func() bool { return auditMsgs(t, b) != 0 })
	bustest.Stop(t, b)
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, _ := os.ReadFile(path); bytes.Contains(data, []byte(secret)) {
				t.Errorf("%s holds the event in clear", path)
			}
		}
		return nil
	})
	again, err := openWith(t, dir, "the first key")
	if err != nil {
		t.Fatal(err)
	}
	if n := auditMsgs(t, again); n != 1 {
		t.Errorf("after a restart the stream holds %d events", n)
	}
	bustest.Stop(t, again)
	for _, key := range []string{"another key", ""} {
		b, err := openWith(t, dir, key)
		if err == nil {
			n := auditMsgs(t, b)
			bustest.Stop(t, b)
			t.Errorf("started with key %q on the encrypted store (%d events)", key, n)
		} else if !strings.Contains(err.Error(), "key") {
			t.Errorf("key %q: %v", key, err)
		}
	}
	// ... and changed nothing: the right key still reads the history.
	last, err := openWith(t, dir, "the first key")
	if err != nil {
		t.Fatal(err)
	}
	if n := auditMsgs(t, last); n != 1 {
		t.Errorf("after the failed starts the stream holds %d events", n)
	}
	bustest.Stop(t, last)
}
