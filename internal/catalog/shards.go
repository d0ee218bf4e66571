package catalog

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/toolbus/toolbus/internal/events"
)

// The catalogue bucket holds the catalogue in shards. A tool belongs to
// the shard ShardOf(tool): one of NameShards shards of its set, the tools
// of one source (and MCP server) that the provider that registered it
// first (its first host) hosts. A shard's value is its tools' catalogue
// entries (events.EncodeTool), one per line, sorted by name; a shard with
// no tools has no key.
//
// Why shards, and why by set: a project's discovery command can declare
// 10,000 tools at once, and the registry must make them visible to every
// reader fast. Kept one key per tool, that is 10,000 JetStream writes and
// 10,000 messages to every reader (about a second here); in shards it is
// a few dozen messages of some KiB. By set, a set that changes whole (a
// re-discovery, an MCP server's new tools/list) rewrites its own shards
// and no other's, however many other sets its provider hosts; a change to
// one tool rewrites 1/NameShards of its set. The bucket is still a plain
// KV bucket that any NATS client can watch.
const NameShards = 64

// shardPrefix starts every shard key; keys without it are not the
// catalogue (an older toolbus kept one key per tool) and readers ignore
// them.
const shardPrefix = "shard."

// ShardOf is the key of the shard that holds t.
func ShardOf(t *events.Tool) string {
	first := ""
	if len(t.Hosts) > 0 {
		first = t.Hosts[0]
	}
	return ShardKey(first, t.Source, t.Server, t.Name)
}

// ShardKey is the key of the shard that holds the tool named name of
// source and server whose first host is host.
func ShardKey(host string, source events.Source, server, name string) string {
	set := fnv32a(fnv32a(fnv32a(fnv32a(fnv32a(offset32, host), "\x00"), string(source)), "\x00"), server)
	shard := fnv32a(offset32, name) % NameShards
	b := make([]byte, 0, len(shardPrefix)+11)
	b = append(b, shardPrefix...)
	for i := 28; i >= 0; i -= 4 {
		b = append(b, hex[set>>i&0xF])
	}
	return string(append(b, '.', hex[shard>>4], hex[shard&0xF]))
}

// offset32 and fnv32a are hash/fnv's 32-bit FNV-1a, without its
// allocations: a reader computes a shard key for every entry it decodes.
const offset32 = 2166136261

func fnv32a(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// IsShardKey reports whether key is the bucket key of a shard.
func IsShardKey(key string) bool {
	rest, ok := strings.CutPrefix(key, shardPrefix)
	if !ok || len(rest) != 11 || rest[8] != '.' {
		return false
	}
	p, err1 := strconv.ParseUint(rest[:8], 16, 32)
	n, err2 := strconv.ParseUint(rest[9:], 16, 8)
	return err1 == nil && err2 == nil && n < NameShards && fmt.Sprintf("%s%08x.%02x", shardPrefix, p, n) == key
}

// AppendShard appends the shard value of the encoded entries lines (each
// from events.EncodeTool, in the order given) to dst.
func AppendShard(dst []byte, lines [][]byte) []byte {
	for _, l := range lines {
		dst = append(dst, l...)
		dst = append(dst, '\n')
	}
	return dst
}

// shardLines splits a shard value into its entries.
func shardLines(data []byte) [][]byte {
	data = bytes.TrimSuffix(data, []byte{'\n'})
	if len(data) == 0 {
		return nil
	}
	return bytes.Split(data, []byte{'\n'})
}

// rawShard is one shard's value as read from the bucket.
type rawShard struct {
	key  string
	data []byte
}

// shard is one shard as a reader keeps it: its tools' names, and its
// entries by the line they were decoded from, so that a line that comes
// again unchanged is not decoded again.
type shard struct {
	names []string
	lines map[string]*Entry
}

// shardSet is the catalogue by shard, as a reader keeps it.
type shardSet struct {
	entries map[string]*Entry // by name
	owner   map[string]string // name -> the key of the shard it came in
	shards  map[string]*shard // by key
}

func newShardSet() *shardSet { return newShardSetFor(0, 0) }

// newShardSetFor is a set sized for tools entries in shards shards.
func newShardSetFor(tools, shards int) *shardSet {
	return &shardSet{entries: make(map[string]*Entry, tools), owner: make(map[string]string, tools), shards: make(map[string]*shard, shards)}
}

// decode decodes shards on every core. A line the set already holds, in
// the shard of the same key, keeps its entry. An entry that does not
// decode, or that belongs to another shard (which only a writer other
// than the registry could put there), is reported to log and skipped: it
// never stops the read, and never lets a tool appear twice. decode only
// reads s: the caller may run it outside the lock that guards s's
// readers, as long as it is s's only writer.
func (s *shardSet) decode(shards []rawShard, log *slog.Logger) []*shard {
	type line struct {
		shard int
		data  []byte
	}
	out := make([]*shard, len(shards))
	var todo []line
	for i, r := range shards {
		prev := s.shards[r.key]
		lines := shardLines(r.data)
		sh := &shard{lines: make(map[string]*Entry, len(lines))}
		for _, l := range lines {
			if prev != nil {
				if e, ok := prev.lines[string(l)]; ok {
					sh.lines[string(l)] = e
					continue
				}
			}
			todo = append(todo, line{shard: i, data: l})
		}
		out[i] = sh
	}
	decoded := make([]*Entry, len(todo))
	workers := min(runtime.GOMAXPROCS(0), len(todo)/256+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(todo); i += workers {
				key := shards[todo[i].shard].key
				t, err := events.DecodeTool(todo[i].data)
				if err != nil {
					log.Warn("skipping a catalogue entry that does not decode", "shard", key, "err", err)
					continue
				}
				if want := ShardOf(t); want != key {
					log.Warn("skipping a catalogue entry kept in the wrong shard", "shard", key, "tool", t.Name, "want", want)
					continue
				}
				decoded[i] = NewEntry(t)
			}
		})
	}
	wg.Wait()
	for i, l := range todo {
		if decoded[i] != nil {
			out[l.shard].lines[string(l.data)] = decoded[i]
		}
	}
	for _, sh := range out {
		seen := make(map[string]bool, len(sh.lines))
		sh.names = make([]string, 0, len(sh.lines))
		for _, e := range sh.lines {
			if name := e.tool.Name; !seen[name] {
				seen[name] = true
				sh.names = append(sh.names, name)
			}
		}
	}
	return out
}

// put makes sh the shard of key; nil removes the shard. A tool moving
// from one shard to another is written to both, in either order: the
// shard that last brought a name holds it, and a shard that no longer has
// it removes it only if it still holds it.
func (s *shardSet) put(key string, sh *shard) {
	if old := s.shards[key]; old != nil {
		for _, name := range old.names {
			if s.owner[name] == key {
				delete(s.entries, name)
				delete(s.owner, name)
			}
		}
	}
	if sh == nil {
		delete(s.shards, key)
		return
	}
	s.shards[key] = sh
	for _, e := range sh.lines {
		s.entries[e.tool.Name] = e
		s.owner[e.tool.Name] = key
	}
}
