package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// A record of the audit stream stays small whatever a caller sends: the
// large fields of a record (a call's arguments, a result's output) are
// kept in BlobStream, one message per content, named by the SHA-256 of
// their bytes, and the record names them by digest instead. The stream's
// checkpoints cover the record, and so the digests: a blob altered or
// lost is found by anyone who reads it back (Inline).
//
// An outlined record starts with the bytes OutlinedPrefix, which the
// recorder alone writes: a message whose own bytes start so is outlined
// whole (its body a blob of its own), so that a caller cannot make a
// reader take its fields for the recorder's.
const (
	// BlobStream is the stream of the records' large fields.
	BlobStream = "TOOLBUS_BLOBS"
	// BlobSubjectPrefix + the hex SHA-256 of a blob is its subject: one
	// message per content, the latest kept.
	BlobSubjectPrefix = "toolbus.blob."
	// MaxInlineRecord is the size from which a record's large fields are
	// outlined: a record of at most this many bytes is kept as it is.
	MaxInlineRecord = 16 << 10
	// minOutlinedField is the smallest value worth a blob of its own:
	// smaller ones stay in the record, a blob's subject and ack costing
	// more than their bytes.
	minOutlinedField = 1 << 10
)

// OutlinedPrefix starts every outlined record: a JSON object whose first
// key, "outlined", maps each field taken out to its BlobRef. The key ""
// means the whole record is the blob.
var OutlinedPrefix = []byte(`{"outlined":{`)

// BlobRef names a blob by the SHA-256 of its bytes (hex) and its size.
// For a field, Kind is its JSON value's kind (object, array or string):
// a field whose blob is missing is read back as a value of that kind
// that says so, so that the record still decodes.
type BlobRef struct {
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
	Kind   string `json:"kind,omitempty"`
}

// kindOf is the kind of a JSON value worth outlining, "" for one that is
// not (a number, a literal).
func kindOf(v []byte) string {
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	}
	return ""
}

// missingValue is what a field of kind whose blob ref names is missing
// reads back as.
func missingValue(ref BlobRef) []byte {
	note := fmt.Sprintf("[not in the trail: the %d bytes of sha256 %s are missing or altered]", ref.Size, ref.SHA256)
	var v any = note
	switch ref.Kind {
	case "object":
		v = map[string]string{"toolbus.missing": note}
	case "array":
		v = []string{note}
	}
	data, _ := json.Marshal(v) // strings, maps and slices of them encode
	return data
}

// Subject is where BlobStream keeps the blob.
func (b BlobRef) Subject() string { return BlobSubjectPrefix + b.SHA256 }

// Blob is a field taken out of a record, to be stored before the record.
type Blob struct {
	Ref  BlobRef
	Data []byte
}

func blobOf(data []byte) Blob {
	sum := sha256.Sum256(data)
	return Blob{Ref: BlobRef{SHA256: hex.EncodeToString(sum[:]), Size: len(data)}, Data: data}
}

// Outline returns record as it is to be recorded, and the blobs to store
// with it: record itself when it is at most max bytes and does not start
// as an outlined record does. Else the top-level fields of at least 1 KiB
// are taken out, the largest first, until the rest fits in max; a record
// that is no JSON object, has a key twice, or does not fit even so, or
// that starts as an outlined record does, is taken out whole.
func Outline(record []byte, max int) ([]byte, []Blob) {
	return outline(record, max, false)
}

// OutlineEncoded is Outline of a record this process encoded itself
// (Encode, WithDecision): valid JSON by construction, which Outline
// checks first, at twice the cost of the rest, for bytes from elsewhere.
func OutlineEncoded(record []byte, max int) ([]byte, []Blob) {
	return outline(record, max, true)
}

func outline(record []byte, max int, valid bool) ([]byte, []Blob) {
	if len(record) <= max && !bytes.HasPrefix(record, OutlinedPrefix) {
		return record, nil
	}
	whole := func() ([]byte, []Blob) {
		b := blobOf(record)
		return appendOutlined(nil, []string{""}, []BlobRef{b.Ref}), []Blob{b}
	}
	if bytes.HasPrefix(record, OutlinedPrefix) {
		return whole()
	}
	fields, ok := topLevel(record, valid)
	if !ok {
		return whole()
	}
	// The largest first, until the rest fits.
	order := make([]int, len(fields))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(fields[b].value) - len(fields[a].value) })
	size := len(record)
	out := make([]bool, len(fields))
	for _, i := range order {
		if size <= max-200 || len(fields[i].value) < minOutlinedField { // 200: the room "outlined" takes
			break
		}
		if kindOf(fields[i].value) == "" {
			continue
		}
		out[i] = true
		size -= len(fields[i].value)
	}
	var (
		names []string
		refs  []BlobRef
		blobs []Blob
	)
	for i, f := range fields {
		if out[i] {
			b := blobOf(f.value)
			b.Ref.Kind = kindOf(f.value)
			names, refs, blobs = append(names, f.name), append(refs, b.Ref), append(blobs, b)
		}
	}
	buf := appendOutlined(make([]byte, 0, size+100*len(refs)+32), names, refs)
	buf = buf[:len(buf)-1] // the closing brace: the fields kept follow
	for i, f := range fields {
		if !out[i] {
			buf = append(buf, ',')
			buf = appendJSONString(buf, f.name)
			buf = append(buf, ':')
			buf = append(buf, f.value...)
		}
	}
	if buf = append(buf, '}'); len(buf) > max {
		return whole()
	}
	return buf, blobs
}

// appendOutlined appends {"outlined":{name:ref,...}}.
func appendOutlined(buf []byte, names []string, refs []BlobRef) []byte {
	buf = append(buf, OutlinedPrefix...)
	for i, n := range names {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, n)
		buf = append(buf, `:{"sha256":"`...)
		buf = append(buf, refs[i].SHA256...)
		buf = append(buf, `","size":`...)
		buf = strconv.AppendInt(buf, int64(refs[i].Size), 10)
		if k := refs[i].Kind; k != "" {
			buf = append(buf, `,"kind":"`...)
			buf = append(buf, k...)
			buf = append(buf, '"')
		}
		buf = append(buf, '}')
	}
	return append(buf, "}}"...)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(buf []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(buf, q...)
}

// field is a top-level member of a JSON object: its name, and its
// value's bytes as written.
type field struct {
	name  string
	value json.RawMessage
}

// topLevel splits a JSON object into its members, as written; false when
// data is no valid JSON object or names a key twice (whose meaning
// depends on the reader). It checks data whole once (json.Valid; not
// when valid says it is by construction), then
// walks the top level alone, skipping over values without decoding them:
// a result's 80 KB are split in a fraction of what decoding them costs.
func topLevel(data []byte, valid bool) ([]field, bool) {
	if !valid && !json.Valid(data) {
		return nil, false
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, false
	}
	i = skipSpace(data, i+1)
	var fields []field
	seen := map[string]bool{}
	for data[i] != '}' {
		if len(fields) > 0 {
			i = skipSpace(data, i+1) // past the comma
		}
		end := endOfString(data, i)
		key := data[i:end]
		name := string(key[1 : len(key)-1])
		if bytes.IndexByte(key, '\\') >= 0 {
			if err := json.Unmarshal(key, &name); err != nil {
				return nil, false
			}
		}
		if seen[name] {
			return nil, false
		}
		seen[name] = true
		i = skipSpace(data, skipSpace(data, end)+1) // past the colon
		end = endOfValue(data, i)
		fields = append(fields, field{name: name, value: data[i:end]})
		i = skipSpace(data, end)
	}
	return fields, true
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// endOfString is the index past the JSON string that starts at i.
func endOfString(data []byte, i int) int {
	j := i + 1
	for {
		q := bytes.IndexByte(data[j:], '"')
		j += q
		// A quote after an odd run of backslashes is escaped.
		n := 0
		for k := j - 1; data[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// endOfValue is the index past the valid JSON value that starts at i.
func endOfValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return endOfString(data, i)
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch data[j] {
			case '"':
				j = endOfString(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for j < len(data) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(data[j])) {
		j++
	}
	return j
}

// CheckBlob says whether data are the bytes ref names.
func CheckBlob(ref BlobRef, data []byte) error {
	sum := sha256.Sum256(data)
	if len(data) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return fmt.Errorf("blob %s holds %d bytes of another content", ref.SHA256, len(data))
	}
	return nil
}

// ErrBlobMissing is Inline's error for a blob that the store does not
// hold, or holds with other bytes than its digest names.
var ErrBlobMissing = errors.New("a large field of the record is not in the trail")

// Inline returns record with its outlined fields put back, each fetched
// by fetch and checked against its digest and size: the record as it was
// sent to the recorder (its fields in another order). A record that is
// not outlined is returned as it is. A field whose blob fetch cannot give,
// or gives altered, is put back as a value of its kind that says so
// (never as nothing, which a reader could take for a call without
// arguments), and the error, wrapping ErrBlobMissing, names every such
// field: a reader must not judge the record as if it were whole. A
// record outlined whole and missing is returned as nil with the error.
func Inline(record []byte, fetch func(BlobRef) ([]byte, error)) ([]byte, error) {
	if !bytes.HasPrefix(record, OutlinedPrefix) {
		return record, nil
	}
	fields, ok := topLevel(record, false)
	if !ok || len(fields) == 0 || fields[0].name != "outlined" {
		return nil, fmt.Errorf("%w: the record is malformed", ErrBlobMissing)
	}
	var refs map[string]BlobRef
	if err := json.Unmarshal(fields[0].value, &refs); err != nil {
		return nil, fmt.Errorf("%w: the record's outlined fields are malformed: %v", ErrBlobMissing, err)
	}
	get := func(ref BlobRef) ([]byte, error) {
		data, err := fetch(ref)
		if err != nil {
			return nil, err
		}
		return data, CheckBlob(ref, data)
	}
	if ref, ok := refs[""]; ok {
		if len(refs) != 1 || len(fields) != 1 {
			return nil, fmt.Errorf("%w: the record is malformed", ErrBlobMissing)
		}
		data, err := get(ref)
		if err != nil {
			return nil, fmt.Errorf("%w: the whole record (%d bytes, sha256 %s): %v", ErrBlobMissing, ref.Size, ref.SHA256, err)
		}
		return data, nil
	}
	names := make([]string, 0, len(refs))
	for n := range refs {
		names = append(names, n)
	}
	slices.Sort(names)
	size := len(record)
	for _, r := range refs {
		size += r.Size + 16
	}
	buf := make([]byte, 0, size)
	buf = append(buf, '{')
	var missing []string
	for _, f := range fields[1:] {
		if _, dup := refs[f.name]; dup {
			return nil, fmt.Errorf("%w: the record's field %q is both kept and outlined", ErrBlobMissing, f.name)
		}
		buf = appendJSONString(buf, f.name)
		buf = append(buf, ':')
		buf = append(buf, f.value...)
		buf = append(buf, ',')
	}
	for _, n := range names {
		ref := refs[n]
		data, err := get(ref)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (%d bytes, sha256 %s): %v", n, ref.Size, ref.SHA256, err))
			data = missingValue(ref)
		}
		buf = appendJSONString(buf, n)
		buf = append(buf, ':')
		buf = append(buf, data...)
		buf = append(buf, ',')
	}
	if buf[len(buf)-1] == ',' {
		buf = buf[:len(buf)-1]
	}
	buf = append(buf, '}')
	if missing != nil {
		return buf, fmt.Errorf("%w: %v", ErrBlobMissing, missing)
	}
	return buf, nil
}
