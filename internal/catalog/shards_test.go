package catalog

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func entryLine(t testing.TB, name, host string) []byte {
	data, err := events.EncodeTool(&events.Tool{V: events.Version, Name: name, Kind: events.KindRead, Source: events.SourceBuiltin,
		ExportName: name, Parameters: json.RawMessage(`{}`), Hosts: []string{host}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzShard: whatever a shard's value holds (a writer other than the
// registry may have put anything there), decoding it never panics, and
// every tool it yields belongs in that shard, once.
func FuzzShard(f *testing.F) {
	key := ShardKey("h", events.SourceBuiltin, "", "a")
	f.Add([]byte(nil))
	f.Add(AppendShard(nil, [][]byte{entryLine(f, "a", "h")}))
	f.Add(AppendShard(nil, [][]byte{entryLine(f, "a", "h"), entryLine(f, "a", "h"), []byte("{"), entryLine(f, "b", "other")}))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		set := newShardSet()
		sh := set.decode([]rawShard{{key: key, data: data}}, quiet())[0]
		set.put(key, sh)
		seen := make(map[string]bool)
		for _, name := range sh.names {
			if seen[name] {
				t.Fatalf("%q twice", name)
			}
			seen[name] = true
			e := set.entries[name]
			if e == nil || ShardOf(e.Tool()) != key {
				t.Fatalf("%q: %v in the wrong shard", name, e)
			}
		}
		// The same value again reuses every entry and changes nothing.
		again := set.decode([]rawShard{{key: key, data: data}}, quiet())[0]
		if len(again.names) != len(sh.names) {
			t.Fatalf("%d names, then %d", len(sh.names), len(again.names))
		}
		set.put(key, nil)
		if len(set.entries) != 0 || len(set.owner) != 0 {
			t.Fatalf("removing the shard left %d entries", len(set.entries))
		}
	})
}

// A tool that moves from one shard to another (its first host changed)
// is written to both, and readers may get them in either order: it stays
// in the catalogue either way, and goes when its last shard drops it.
func TestAToolMovingBetweenShardsStays(t *testing.T) {
	t.Parallel()
	from, to := ShardKey("old-host", events.SourceBuiltin, "", "x"), ShardKey("new-host", events.SourceBuiltin, "", "x")
	old := AppendShard(nil, [][]byte{entryLine(t, "x", "old-host")})
	moved := AppendShard(nil, [][]byte{entryLine(t, "x", "new-host")})
	for _, newFirst := range []bool{true, false} {
		set := newShardSet()
		set.put(from, set.decode([]rawShard{{key: from, data: old}}, quiet())[0])
		if newFirst {
			set.put(to, set.decode([]rawShard{{key: to, data: moved}}, quiet())[0])
			set.put(from, nil)
		} else {
			set.put(from, nil)
			set.put(to, set.decode([]rawShard{{key: to, data: moved}}, quiet())[0])
		}
		if e := set.entries["x"]; e == nil || e.Tool().Hosts[0] != "new-host" {
			t.Errorf("new shard first=%v: %v", newFirst, e)
		}
		set.put(to, nil)
		if len(set.entries) != 0 {
			t.Errorf("new shard first=%v: %d entries left", newFirst, len(set.entries))
		}
	}
}

// TestShardKeyIsStillFNV: shard keys name the catalogue bucket's keys on
// disk, so the hand-written FNV-1a gives what hash/fnv and fmt gave when
// the buckets of older builds were written.
func TestShardKeyIsStillFNV(t *testing.T) {
	old := func(host string, source events.Source, server, name string) string {
		h := fnv.New32a()
		h.Write([]byte(host + "\x00" + string(source) + "\x00" + server))
		set := h.Sum32()
		h.Reset()
		h.Write([]byte(name))
		return fmt.Sprintf("%s%08x.%02x", shardPrefix, set, h.Sum32()%NameShards)
	}
	for _, c := range [][4]string{{"", "", "", ""}, {"executor@a", "builtin", "", "read_file"}, {"h", "mcp", "github", "create_issue"}, {"ü", "discovered", "\x00", "名前"}} {
		if got, want := ShardKey(c[0], events.Source(c[1]), c[2], c[3]), old(c[0], events.Source(c[1]), c[2], c[3]); got != want {
			t.Errorf("ShardKey%q = %s, hash/fnv gives %s", c, got, want)
		}
	}
}
