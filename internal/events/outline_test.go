package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// store is a blob store in memory, as BlobStream keeps them.
type store map[string][]byte

func (s store) put(blobs []Blob) {
	for _, b := range blobs {
		s[b.Ref.SHA256] = b.Data
	}
}

func (s store) fetch(ref BlobRef) ([]byte, error) {
	if d, ok := s[ref.SHA256]; ok {
		return d, nil
	}
	return nil, errors.New("no such blob")
}

func sameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%v: %.200s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("got %.300s\nwant %.300s", got, want)
	}
}

// TestALargeCallIsRecordedSmall: a call with 200 KiB of arguments is
// recorded in well under MaxInlineRecord, its arguments in a blob named
// by their digest, and read back whole.
func TestALargeCallIsRecordedSmall(t *testing.T) {
	content := strings.Repeat("x", 200<<10)
	inv, _ := json.Marshal(map[string]any{"type": "tool.invoke", "id": "inv-1", "tool": "write_file",
		"args": map[string]any{"file_path": "big.txt", "content": content}})
	rec, blobs := Outline(inv, MaxInlineRecord)
	if len(rec) > 1024 || len(blobs) != 1 {
		t.Fatalf("recorded %d bytes with %d blobs: %.300s", len(rec), len(blobs), rec)
	}
	if !bytes.HasPrefix(rec, OutlinedPrefix) || !bytes.Contains(rec, []byte(`"id":"inv-1"`)) {
		t.Fatalf("the record does not keep the call's small fields: %s", rec)
	}
	s := store{}
	s.put(blobs)
	back, err := Inline(rec, s.fetch)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, back, inv)
	got, err := Decode[Invocation](back)
	if err == nil && !bytes.Contains(got.Args, []byte(content)) {
		t.Fatal("the arguments read back are not the call's")
	}
}

// TestSmallRecordsStayAsTheyAre: a record within the bound is kept byte
// for byte, and is read back so.
func TestSmallRecordsStayAsTheyAre(t *testing.T) {
	inv := []byte(`{"type":"tool.invoke","id":"a","tool":"read_file","args":{"file_path":"README.md"}}`)
	rec, blobs := Outline(inv, MaxInlineRecord)
	if !bytes.Equal(rec, inv) || blobs != nil {
		t.Fatalf("a small record was changed: %s", rec)
	}
	back, err := Inline(rec, store{}.fetch)
	if err != nil || !bytes.Equal(back, inv) {
		t.Fatalf("%v: %s", err, back)
	}
}

// TestACallerCannotForgeOutlinedFields: a caller's message that starts
// as an outlined record does, naming another call's blob as its
// arguments, is outlined whole: read back, it is the caller's own bytes,
// never the other call's arguments. A key spelled with escapes is not
// the recorder's prefix and is read as what it is.
func TestACallerCannotForgeOutlinedFields(t *testing.T) {
	s := store{}
	victim, _ := json.Marshal(map[string]any{"id": "v", "args": map[string]string{"content": strings.Repeat("secret ", 4000)}})
	vrec, vblobs := Outline(victim, MaxInlineRecord)
	s.put(vblobs)
	var ref BlobRef
	for _, b := range vblobs {
		ref = b.Ref
	}
	if len(vblobs) != 1 || len(vrec) > MaxInlineRecord {
		t.Fatalf("victim: %d blobs, %d bytes", len(vblobs), len(vrec))
	}
	for _, forged := range []string{
		fmt.Sprintf(`{"outlined":{"args":{"sha256":%q,"size":%d}},"id":"x","tool":"read_file"}`, ref.SHA256, ref.Size),
		fmt.Sprintf(`{"outlined":{"":{"sha256":%q,"size":%d}}}`, ref.SHA256, ref.Size),
	} {
		rec, blobs := Outline([]byte(forged), MaxInlineRecord)
		if len(blobs) != 1 || !bytes.Equal(blobs[0].Data, []byte(forged)) {
			t.Fatalf("a forged outlined record was not taken out whole: %s", rec)
		}
		s.put(blobs)
		back, err := Inline(rec, s.fetch)
		if err != nil || !bytes.Equal(back, []byte(forged)) {
			t.Fatalf("read back %v: %.200s, want the caller's own bytes", err, back)
		}
	}
	escaped := fmt.Sprintf(`{"outlin\u0065d":{"args":{"sha256":%q,"size":%d}},"id":"x"}`, ref.SHA256, ref.Size)
	rec, blobs := Outline([]byte(escaped), MaxInlineRecord)
	if blobs != nil || !bytes.Equal(rec, []byte(escaped)) {
		t.Fatalf("%s", rec)
	}
	if back, err := Inline(rec, s.fetch); err != nil || !bytes.Equal(back, []byte(escaped)) {
		t.Fatalf("an escaped key was read as outlined: %v %.200s", err, back)
	}
}

// TestMalformedAndAmbiguousRecordsAreOutlinedWhole: a large message
// that is no object, or names a key twice, is kept whole, by digest.
func TestMalformedAndAmbiguousRecordsAreOutlinedWhole(t *testing.T) {
	big := strings.Repeat("a", 20<<10)
	for _, msg := range []string{
		`not json ` + big,
		`{"args":{"content":"` + big + `"},"args":{}}`,
		`["` + big + `"]`,
		`{"args":"` + big + `"} trailing`,
	} {
		rec, blobs := Outline([]byte(msg), MaxInlineRecord)
		if len(blobs) != 1 || len(rec) > 200 {
			t.Fatalf("%.40s: %d blobs, record %.200s", msg, len(blobs), rec)
		}
		s := store{}
		s.put(blobs)
		back, err := Inline(rec, s.fetch)
		if err != nil || !bytes.Equal(back, []byte(msg)) {
			t.Fatalf("%.40s: %v", msg, err)
		}
	}
}

// TestAMissingOrAlteredBlobIsSaid: a blob the store lost, or holds with
// other bytes, is read back as a string that says so, never as nothing,
// and the error names it.
func TestAMissingOrAlteredBlobIsSaid(t *testing.T) {
	args, _ := json.Marshal(map[string]string{"content": strings.Repeat("y", 32<<10)})
	inv, err := Encode(&Invocation{Header: Header{ID: "a", Sender: Identity{ID: "agent:a", Role: "agent"}}, Tool: "write_file", Args: args})
	if err != nil {
		t.Fatal(err)
	}
	rec, blobs := Outline(inv, MaxInlineRecord)
	for name, s := range map[string]store{"missing": {}, "altered": {blobs[0].Ref.SHA256: bytes.ToUpper(blobs[0].Data)}} {
		back, err := Inline(rec, s.fetch)
		if !errors.Is(err, ErrBlobMissing) || !strings.Contains(err.Error(), "args") {
			t.Fatalf("%s: %v", name, err)
		}
		got, derr := Decode[Invocation](back)
		if derr != nil {
			t.Fatalf("%s: %v", name, derr)
		}
		if !strings.Contains(string(got.Args), "not in the trail") {
			t.Fatalf("%s: the arguments read back are %.100s", name, got.Args)
		}
	}
}

// FuzzOutline: whatever a caller sends, the record is at most
// MaxInlineRecord bytes, and reading it back gives what was sent: byte
// for byte when it was outlined whole or not at all, the same JSON
// otherwise.
func FuzzOutline(f *testing.F) {
	f.Add([]byte(`{"id":"a","args":{"x":1}}`), 3000)
	f.Add([]byte(`{"outlined":{"args":{"sha256":"00","size":1}}}`), 10)
	f.Add([]byte(`{"a":"\u0000","b":[1,2,3]}`), 2000)
	f.Fuzz(func(t *testing.T, msg []byte, pad int) {
		if pad < 0 || pad > 64<<10 {
			return
		}
		// Pad the message's first string value, when it has one, to
		// cross the bound.
		if i := bytes.IndexByte(msg, '"'); i >= 0 && pad > 0 {
			msg = append(append(append([]byte{}, msg[:i+1]...), bytes.Repeat([]byte("p"), pad)...), msg[i+1:]...)
		}
		rec, blobs := Outline(msg, MaxInlineRecord)
		if len(rec) > MaxInlineRecord {
			t.Fatalf("a record of %d bytes", len(rec))
		}
		if json.Valid(msg) {
			// Differential: what the recorder's own valid records skip
			// changes nothing.
			if enc, _ := OutlineEncoded(msg, MaxInlineRecord); !bytes.Equal(enc, rec) {
				t.Fatalf("OutlineEncoded %q, Outline %q", enc, rec)
			}
		}
		s := store{}
		s.put(blobs)
		back, err := Inline(rec, s.fetch)
		if err != nil {
			t.Fatal(err)
		}
		if len(blobs) == 0 || (len(blobs) == 1 && bytes.Equal(blobs[0].Data, msg)) {
			if !bytes.Equal(back, msg) {
				t.Fatalf("read back %q, sent %q", back, msg)
			}
			return
		}
		var g, w any
		if json.Unmarshal(back, &g) != nil || json.Unmarshal(msg, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("read back %.300q, sent %.300q", back, msg)
		}
	})
}

// BenchmarkOutline: what the recorder pays for a result that fills its
// 40,000 characters twice, against encoding that result (the baseline,
// measured in the same run).
func BenchmarkOutline(b *testing.B) {
	text := strings.Repeat("line of the file\n", 2400)[:40000]
	res := &Result{Header: Header{ID: "r", Sender: Identity{ID: "executor@b", Role: "executor"}}, InvocationID: "inv", Tool: "read_file", LLMContent: text, ReturnDisplay: text}
	data, err := Encode(res)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := Encode(res); err != nil {
				b.Fatal(err)
			}
		}
	})
	for name, outline := range map[string]func([]byte, int) ([]byte, []Blob){"outline": Outline, "outline-encoded": OutlineEncoded} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if rec, blobs := outline(data, MaxInlineRecord); len(blobs) != 2 || len(rec) > MaxInlineRecord {
					b.Fatalf("%d blobs, %d bytes", len(blobs), len(rec))
				}
			}
		})
	}
}
