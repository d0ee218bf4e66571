package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/audit"
)

// exported is the line an export writes for an event at seq, newline
// included.
func exported(t testing.TB, seq uint64) string {
	t.Helper()
	var buf bytes.Buffer
	w := &audit.ExportWriter{W: &buf}
	l := audit.Line{Seq: seq, Time: time.Unix(1700000000, 0).UTC(), Subject: "tool.step", Kind: "tool.step", Invocation: "inv-" + strconv.FormatUint(seq, 10),
		Event: json.RawMessage(`{"v":1,"type":"tool.step","step":"validated"}`)}
	if err := w.Write(context.Background(), []audit.Line{l}); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestResumeAnExportFile: an export file tells where its export goes on,
// a torn last line (an export killed as it wrote it) dropped; a file an
// export did not write is refused and left as it is.
func TestResumeAnExportFile(t *testing.T) {
	t.Parallel()
	long := exported(t, 90)
	long = strings.Replace(long, `"validated"`, `"`+strings.Repeat("x", 200<<10)+`"`, 1) // longer than a block read backwards
	cases := []struct {
		name    string
		content string // "-": no file
		last    uint64
		kept    string // what the file holds after, when not refused
		refused bool
	}{
		{name: "no file", content: "-", last: 0, kept: ""},
		{name: "empty", content: "", last: 0, kept: ""},
		{name: "whole lines", content: exported(t, 3) + exported(t, 7), last: 7, kept: exported(t, 3) + exported(t, 7)},
		{name: "torn last line", content: exported(t, 3) + exported(t, 7) + exported(t, 9)[:25], last: 7, kept: exported(t, 3) + exported(t, 7)},
		{name: "torn as it began", content: exported(t, 3) + `{"se`, last: 3, kept: exported(t, 3)},
		{name: "whole but its newline", content: exported(t, 3) + strings.TrimSuffix(exported(t, 4), "\n"), last: 3, kept: exported(t, 3)},
		{name: "only a torn line", content: exported(t, 1)[:40], last: 0, kept: ""},
		{name: "zeros after a machine crash", content: exported(t, 5) + "\x00\x00\x00\x00", last: 5, kept: exported(t, 5)},
		{name: "a long last line", content: exported(t, 2) + long, last: 90, kept: exported(t, 2) + long},
		{name: "a torn long line", content: exported(t, 2) + long[:150<<10], last: 2, kept: exported(t, 2)},
		{name: "garbage line", content: exported(t, 3) + "hello\n", refused: true},
		{name: "garbage after the last line", content: exported(t, 3) + "hello", refused: true},
		{name: "a blank last line", content: exported(t, 3) + "\n", refused: true},
		{name: "a torn line after garbage", content: "hello\n" + exported(t, 4)[:20], refused: true},
		{name: "an invocation of audit export", content: `{"principal":"agent","id":"x","time":"2024-01-01T00:00:00Z","tool":"read_file","caller":{"id":"a"},"outcome":"OK"}` + "\n", refused: true},
		{name: "seq 0", content: strings.Replace(exported(t, 3), `"seq":3`, `"seq":0`, 1), refused: true},
		{name: "no event", content: strings.Replace(exported(t, 3), `"event":`, `"evt":`, 1), refused: true},
		{name: "a negative seq", content: strings.Replace(exported(t, 3), `"seq":3`, `"seq":-3`, 1), refused: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if c.content != "-" {
				if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f, last, err := audit.OpenExportFile(path)
			after, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if c.refused {
				if err == nil {
					f.Close()
					t.Fatalf("opened, going on after #%d; want it refused", last)
				}
				if !errors.Is(err, audit.ErrNotExport) || !strings.Contains(err.Error(), path) {
					t.Errorf("got %v, want an error naming the file and wrapping ErrNotExport", err)
				}
				if string(after) != c.content {
					t.Errorf("a refused file was changed: got %q, want %q", after, c.content)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if last != c.last {
				t.Errorf("goes on after #%d, want #%d", last, c.last)
			}
			if string(after) != c.kept {
				t.Errorf("the file holds %.80q..., want %.80q...", after, c.kept)
			}
			// What it writes next follows what it kept.
			if err := f.Write(context.Background(), []audit.Line{{Seq: c.last + 1, Subject: "tool.step", Kind: "tool.step", Event: json.RawMessage(`{}`)}}); err != nil {
				t.Fatal(err)
			}
			f.Close()
			g, next, err := audit.OpenExportFile(path)
			if err != nil || next != c.last+1 {
				t.Fatalf("after a write: goes on after #%d (%v), want #%d", next, err, c.last+1)
			}
			g.Close()
		})
	}
}

// TestExportFileIsWrittenByOneExport: a second export of the same file is
// refused while the first holds it.
func TestExportFileIsWrittenByOneExport(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	f, _, err := audit.OpenExportFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if g, _, err := audit.OpenExportFile(path); err == nil || !strings.Contains(err.Error(), "another export") {
		if g != nil {
			g.Close()
		}
		t.Errorf("a second export of one file: %v, want it refused", err)
	}
	f.Close()
	g, _, err := audit.OpenExportFile(path)
	if err != nil {
		t.Fatalf("after the first closed it: %v", err)
	}
	g.Close()
}

// TestExportCheckpoint: a checkpoint is one sequence, replaced whole; a
// file that holds anything else is refused and left as it is.
func TestExportCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "export.seq")
	if seq, err := audit.ReadExportCheckpoint(path); err != nil || seq != 0 {
		t.Fatalf("no checkpoint yet: %d, %v", seq, err)
	}
	for _, seq := range []uint64{1, 42, 1<<64 - 1} {
		if err := audit.WriteExportCheckpoint(path, seq); err != nil {
			t.Fatal(err)
		}
		if got, err := audit.ReadExportCheckpoint(path); err != nil || got != seq {
			t.Errorf("got %d (%v), want %d", got, err, seq)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d files, want the checkpoint alone (no temp file left)", len(entries))
	}
	// A checkpoint made empty ahead of the export's first start.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if seq, err := audit.ReadExportCheckpoint(path); err != nil || seq != 0 {
		t.Errorf("an empty checkpoint: %d, %v", seq, err)
	}
	for _, bad := range []string{"abc\n", "12", "12\n\n", " 12\n", "-1\n", "+1\n", "0\n", "007\n", "1.5\n", "18446744073709551616\n",
		"12\nthe rest\n", exported(t, 12), strings.Repeat("1", 100) + "\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		seq, err := audit.ReadExportCheckpoint(path)
		if err == nil || !errors.Is(err, audit.ErrNotExport) {
			t.Errorf("checkpoint %q: %d, %v; want it refused", bad, seq, err)
		}
		if data, _ := os.ReadFile(path); string(data) != bad {
			t.Errorf("checkpoint %q was changed to %q", bad, data)
		}
	}
}

// FuzzResumeAnExportFile: whatever a file holds, opening it for an export
// either refuses it and leaves it as it is, or keeps all of it but a last
// line without a newline and goes on after the sequence of the last line
// it kept.
func FuzzResumeAnExportFile(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte(exported(f, 3) + exported(f, 7)))
	f.Add([]byte(exported(f, 3) + exported(f, 7)[:30]))
	f.Add([]byte(exported(f, 3) + "garbage\n"))
	f.Add([]byte("{\"seq\":12}\n"))
	f.Add([]byte("\x00\x00"))
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(t.TempDir(), "audit.jsonl")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		file, last, err := audit.OpenExportFile(path)
		after, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if !bytes.Equal(after, content) {
				t.Fatalf("refused (%v) but changed: %q -> %q", err, content, after)
			}
			return
		}
		file.Close()
		if !bytes.HasPrefix(content, after) || bytes.Contains(content[len(after):], []byte("\n")) {
			t.Fatalf("kept %q of %q: more than a last line without its newline dropped", after, content)
		}
		if len(after) == 0 {
			if last != 0 {
				t.Fatalf("an empty file goes on after #%d", last)
			}
			return
		}
		lines := bytes.Split(bytes.TrimSuffix(after, []byte("\n")), []byte("\n"))
		if seq, err := audit.LineSeq(lines[len(lines)-1]); err != nil || seq != last || last == 0 {
			t.Fatalf("goes on after #%d; its last line says #%d (%v)", last, seq, err)
		}
	})
}

// FuzzParseExportCheckpoint: a checkpoint read is one WriteExportCheckpoint
// writes, byte for byte.
func FuzzParseExportCheckpoint(f *testing.F) {
	for _, s := range []string{"", "1\n", "42\n", "18446744073709551615\n", "007\n", "x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seq, err := audit.ParseExportCheckpoint(data)
		switch {
		case err != nil && !errors.Is(err, audit.ErrNotExport):
			t.Fatalf("%q: %v, not ErrNotExport", data, err)
		case err != nil:
		case len(data) == 0 && seq != 0:
			t.Fatalf("nothing read as #%d", seq)
		case len(data) > 0 && string(data) != strconv.FormatUint(seq, 10)+"\n":
			t.Fatalf("%q read as #%d", data, seq)
		}
	})
}

// TestExportCheckpointMovesAfterItsSinkTookTheBatch: the checkpoint of a
// sink moves past a batch once the sink has taken it, and not when it
// failed to.
func TestExportCheckpointMovesAfterItsSinkTookTheBatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "export.seq")
	var buf bytes.Buffer
	c := &audit.Checkpointed{Sink: &audit.ExportWriter{W: &buf}, Path: path}
	batch := []audit.Line{{Seq: 3, Subject: "tool.step", Kind: "tool.step", Event: json.RawMessage(`{}`)}, {Seq: 5, Subject: "tool.step", Kind: "tool.step", Event: json.RawMessage(`{}`)}}
	if err := c.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if seq, err := audit.ReadExportCheckpoint(path); seq != 5 || err != nil {
		t.Errorf("after a batch taken: the checkpoint is #%d (%v), want #5", seq, err)
	}
	c.Sink = &failing{}
	if err := c.Write(context.Background(), []audit.Line{{Seq: 8, Subject: "tool.step", Kind: "tool.step", Event: json.RawMessage(`{}`)}}); !errors.Is(err, errFull) {
		t.Errorf("got %v, want the sink's error", err)
	}
	if seq, err := audit.ReadExportCheckpoint(path); seq != 5 || err != nil {
		t.Errorf("after a batch the sink failed: the checkpoint is #%d (%v), want #5", seq, err)
	}
}
