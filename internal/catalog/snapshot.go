package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// A snapshot is the whole catalogue in one object: a header line, then one
// catalogue entry per line, exactly as the bucket holds them, as of one
// revision of the bucket. It is a cache: the bucket stays the truth, and a
// reader catches up from the snapshot's revision. Reading 10,000 entries
// through a watcher costs one message each; the snapshot arrives in a few
// dozen large ones.

const snapshotObject = "catalog"

type snapshotHeader struct {
	V        int    `json:"v"`
	Revision uint64 `json:"revision"`
	Count    int    `json:"count"`
}

func snapshotStore(ctx context.Context, js jetstream.JetStream) (jetstream.ObjectStore, error) {
	return js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      events.CatalogSnapshotBucket,
		Description: "toolbus catalogue snapshot: a cache of TOOLBUS_CATALOG at one revision",
		Storage:     jetstream.FileStorage,
	})
}

// WriteSnapshot stores tools as the catalogue at bucket revision revision.
// The caller (the registry, the bucket's only writer) guarantees that the
// bucket held exactly tools at that revision.
func WriteSnapshot(ctx context.Context, js jetstream.JetStream, tools []*events.Tool, revision uint64) error {
	var buf bytes.Buffer
	header, _ := json.Marshal(snapshotHeader{V: events.Version, Revision: revision, Count: len(tools)})
	buf.Write(header)
	buf.WriteByte('\n')
	for _, t := range tools {
		// Entries are compact JSON: strings escape their newlines.
		data, err := events.EncodeTool(t)
		if err != nil {
			return fmt.Errorf("snapshot: %q: %w", t.Name, err)
		}
		buf.Write(data)
		buf.WriteByte('\n')
	}
	obs, err := snapshotStore(ctx, js)
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	if _, err := obs.PutBytes(ctx, snapshotObject, buf.Bytes()); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// readSnapshot returns the entries of the latest snapshot, keyed by
// catalogue key, and its revision. It refuses a snapshot newer than the
// bucket, which can only come from an earlier bucket of the same name.
func readSnapshot(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, log *slog.Logger) (map[string]*Entry, uint64, error) {
	obs, err := js.ObjectStore(ctx, events.CatalogSnapshotBucket)
	if err != nil {
		return nil, 0, err
	}
	data, err := obs.GetBytes(ctx, snapshotObject)
	if err != nil {
		return nil, 0, err
	}
	line, rest, _ := bytes.Cut(data, []byte{'\n'})
	var h snapshotHeader
	if err := json.Unmarshal(line, &h); err != nil || h.V != events.Version {
		return nil, 0, fmt.Errorf("snapshot header %.80q is not v%d", line, events.Version)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		return nil, 0, err
	}
	if last := status.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq; h.Revision > last {
		return nil, 0, fmt.Errorf("snapshot revision %d is past the bucket's last revision %d", h.Revision, last)
	}
	lines := bytes.Split(bytes.TrimSuffix(rest, []byte{'\n'}), []byte{'\n'})
	if len(rest) == 0 {
		lines = nil
	}
	if len(lines) != h.Count {
		return nil, 0, fmt.Errorf("snapshot holds %d entries, its header says %d", len(lines), h.Count)
	}
	decoded := decodeAll(lines, func(i int) string { return fmt.Sprintf("snapshot line %d", i+2) }, log)
	entries := make(map[string]*Entry, len(decoded))
	for i, e := range decoded {
		if e == nil {
			// The bucket may hold this entry intact; skipping it here
			// would hide it, since the catch-up starts after it.
			return nil, 0, fmt.Errorf("snapshot line %d does not decode", i+2)
		}
		entries[events.CatalogKey(e.tool.Name)] = e
	}
	return entries, h.Revision, nil
}
