package executor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/audit/checkpoint"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// lastRecord is the last record of subject in the audit stream, as stored.
func lastRecord(t *testing.T, js jetstream.JetStream, subject string) []byte {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	return m.Data
}

// TestLargeCallsAreRecordedByDigest: a call with 256 KiB of arguments,
// and one whose output fills a result, are each recorded in at most
// events.MaxInlineRecord bytes, their large fields beside the stream by
// digest; an audit reads both back whole, and replays the first.
func TestLargeCallsAreRecordedByDigest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	nc := bustest.Connect(t, e.bus).Conn()
	pattern := "big-" + strings.Repeat("q", 256<<10)
	// glob runs it, and refuses so long a pattern: the call was judged,
	// ran and ended, which is what is recorded.
	res := globAs(t, nc, "alice", "large-args", pattern)
	if errType(res) != events.ErrInvalidParams {
		t.Fatalf("the call with large arguments: %s %s", errType(res), res.LLMContent)
	}
	js := e.bus.JetStream()
	inv := lastRecord(t, js, events.SubjectInvoke+".alice")
	if len(inv) > events.MaxInlineRecord || !bytes.HasPrefix(inv, events.OutlinedPrefix) {
		t.Fatalf("the invocation is recorded in %d bytes: %.200s", len(inv), inv)
	}
	ctx := context.Background()
	rec, err := audit.Show(ctx, js, "large-args", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var args map[string]string
	if err := json.Unmarshal(rec.Args, &args); err != nil || args["pattern"] != pattern || rec.Incomplete != nil {
		t.Fatalf("the audit reads back %d bytes of arguments (%v), incomplete %v", len(rec.Args), err, rec.Incomplete)
	}
	w, err := audit.RunWhatIf(ctx, js, audit.Query{ID: "large-args"}, defaultPol(t))
	if err != nil || w.Replayed != 1 || len(w.Failed) != 0 {
		t.Fatalf("what-if of the large call: %+v %v", w, err)
	}
	if problems := blobProblems(t, js); len(problems) != 0 {
		t.Fatalf("audit verify of a whole trail: %q", problems)
	}

	// An output that fills a result: 40,000 characters of it, twice
	// (what the model and the person are shown).
	big := strings.Repeat("line of the file\n", 20000)
	if err := os.WriteFile(filepath.Join(e.ws.Root(), "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	data, _ := events.Encode(&events.Invocation{Header: events.Header{ID: "large-out", Sender: events.Identity{ID: "alice"}}, Tool: "read_file",
		Args: json.RawMessage(`{"file_path":"big.txt"}`)})
	m, err := nc.Request(events.InvokeSubject("alice"), data, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out, err := events.Decode[events.Result](m.Data)
	if err != nil || out.Error != nil || len(out.LLMContent) < 30000 {
		t.Fatalf("the read of a large file: %v %+v", err, out)
	}
	var stored []byte
	if !testkit.Poll(10*time.Second, func() bool {
		stored = lastRecord(t, js, events.SubjectResult)
		return bytes.Contains(stored, []byte(`"large-out"`))
	}) {
		t.Fatal("no result recorded for the large read")
	}
	if len(stored) > events.MaxInlineRecord {
		t.Fatalf("the result is recorded in %d bytes", len(stored))
	}
	rec, err = audit.Show(ctx, js, "large-out", time.Time{})
	if err != nil || rec.Outcome != "OK" || rec.Incomplete != nil {
		t.Fatalf("the audit of the large read: %+v %v", rec, err)
	}
	var whole bool
	for _, ev := range rec.Events {
		if r, err := events.Decode[events.Result](ev.Data); err == nil && ev.Subject == events.SubjectResult && r.LLMContent == out.LLMContent {
			whole = true
		}
	}
	if !whole {
		t.Error("the audit's timeline does not show the result's output whole")
	}
}

// TestAForgedOutlinedCallIsReadAsSent: mallory sends a call whose bytes
// start as an outlined record does, naming alice's large arguments as
// its own. The call runs with mallory's arguments, and the audit reads
// mallory's record as mallory sent it: never with alice's arguments.
func TestAForgedOutlinedCallIsReadAsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	nc := bustest.Connect(t, e.bus).Conn()
	secret := "alice-" + strings.Repeat("s", 64<<10)
	if res := globAs(t, nc, "alice", "alice-1", secret); errType(res) != events.ErrInvalidParams {
		t.Fatalf("alice's call: %s", res.LLMContent)
	}
	var ref events.BlobRef
	for _, r := range refsOf(t, lastRecord(t, e.bus.JetStream(), events.SubjectInvoke+".alice")) {
		ref = r
	}
	if ref.SHA256 == "" {
		t.Fatal("alice's call was not outlined")
	}
	// With arguments of its own beside the forged ones, and with none
	// (a call the executor runs without arguments).
	for i, own := range []string{`,"args":{"pattern":"*.md"}`, ``} {
		id := fmt.Sprintf("m-%d", i)
		forged := fmt.Sprintf(`{"outlined":{"args":{"sha256":%q,"size":%d,"kind":"object"}},"v":1,"type":"tool.invocation","id":%q,"sender":{"id":"mallory"},"time":%q,"tool":"glob"%s}`,
			ref.SHA256, ref.Size, id, time.Now().UTC().Format(time.RFC3339Nano), own)
		m, err := nc.Request(events.InvokeSubject("mallory"), []byte(forged), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		res, err := events.Decode[events.Result](m.Data)
		if err != nil || strings.Contains(res.LLMContent, "alice-") || (own != "") != strings.Contains(res.LLMContent, "README.md") {
			t.Fatalf("mallory's call ran with other arguments than its own: %v %.200s", err, res.LLMContent)
		}
		rec, err := audit.Show(context.Background(), e.bus.JetStream(), id, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(rec.Args), "alice-") || (own != "") != strings.Contains(string(rec.Args), "*.md") || rec.Principal != "mallory" {
			t.Fatalf("mallory's call reads back with the arguments %.100s", rec.Args)
		}
	}
}

// TestAnAlteredLargeFieldIsSaidAndNeverReplayed: the blob of a call's
// arguments is overwritten with other bytes (someone with the bus's
// rights). The audit shows the call incomplete, with a note in place of
// its arguments, and what-if refuses to judge it rather than judge the
// note.
func TestAnAlteredLargeFieldIsSaidAndNeverReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true })
	nc := bustest.Connect(t, e.bus).Conn()
	if res := globAs(t, nc, "alice", "a-1", "a-"+strings.Repeat("x", 64<<10)); errType(res) != events.ErrInvalidParams {
		t.Fatalf("alice's call: %s", res.LLMContent)
	}
	js := e.bus.JetStream()
	ctx := context.Background()
	for _, ref := range refsOf(t, lastRecord(t, js, events.SubjectInvoke+".alice")) {
		if _, err := js.Publish(ctx, ref.Subject(), []byte(`{"pattern":"*"}`)); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := audit.Show(ctx, js, "a-1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Incomplete) == 0 || !strings.Contains(string(rec.Args), "toolbus.missing") {
		t.Fatalf("an altered call reads back as %.200s, incomplete %v", rec.Args, rec.Incomplete)
	}
	w, err := audit.RunWhatIf(ctx, js, audit.Query{ID: "a-1"}, defaultPol(t))
	if err != nil {
		t.Fatal(err)
	}
	if w.Replayed != 0 || len(w.Failed) != 1 || !strings.Contains(w.Failed[0].Reason, "whole") {
		t.Fatalf("what-if of an altered call: %+v", w)
	}
	if problems := blobProblems(t, js); len(problems) != 1 || !strings.Contains(problems[0], "args") {
		t.Fatalf("audit verify of an altered call: %q", problems)
	}
}

// blobProblems are what audit verify says of the records' large fields.
func blobProblems(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := checkpoint.Verify(context.Background(), js, time.Time{}, pub)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range rep.Problems {
		if strings.Contains(p, events.BlobStream) {
			out = append(out, p)
		}
	}
	return out
}

// refsOf are the blobs an outlined record names.
func refsOf(t *testing.T, record []byte) map[string]events.BlobRef {
	t.Helper()
	var r struct {
		Outlined map[string]events.BlobRef `json:"outlined"`
	}
	if err := json.Unmarshal(record, &r); err != nil {
		t.Fatal(err)
	}
	return r.Outlined
}
