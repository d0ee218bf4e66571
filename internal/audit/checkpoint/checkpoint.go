// Package checkpoint makes the audit stream tamper-evident: the bus's
// owner signs a chained digest of the stream every so often, and Verify
// recomputes every digest and checks every signature.
package checkpoint

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// Tamper evidence. The audit stream refuses deletes and purges (bus.Config
// AuditAllowDelete); what is left to catch is a stream changed behind
// JetStream's back, or one whose deny-delete was never set. The bus's
// owner publishes, every so often, a checkpoint: a digest over the
// messages since the last one, chained to it and signed with its ed25519
// key. Verify reads the stream, recomputes each digest and checks each
// signature with the public key it trusts, and reports every gap in the
// sequence and every checkpoint that no longer matches.
//
// A range's digest is the SHA-256 of, for each message in sequence order,
// its sequence (8 bytes, big-endian) and its leaf: the SHA-256 of its
// subject's length (4 bytes), its subject and its data.
//
// The stream's own limits (--audit-max-age, --audit-max-bytes) evict its
// oldest messages, checkpoints with them: whoever can publish enough
// bytes can push out every earlier event and checkpoint, after which
// nothing left in the stream contradicts anything. So the chain is
// numbered (AuditCheckpoint.Index) and its ends are kept outside the
// stream, in events.AuditChainBucket, which only the bus writes: the
// first checkpoint of the chain (written once) and the latest (its
// head). The Checkpointer continues the chain from the head when the
// stream no longer holds any of it, and Verify tells from both ends how
// much of the chain the stream lost.

// Key files in the bus's data directory.
const (
	PrivateKeyFile = "audit-signing.key"
	PublicKeyFile  = "audit-signing.pub"
)

// LoadOrCreateKey reads the signing key in dir, making one (and its
// public half, for verifiers) when there is none.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, PrivateKeyFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		block := pem.EncodeToMemory(&pem.Block{Type: "TOOLBUS AUDIT SIGNING KEY", Bytes: priv.Seed()})
		if err := os.WriteFile(path, block, 0o600); err != nil {
			return nil, fmt.Errorf("audit signing key: %w", err)
		}
		pubBlock := pem.EncodeToMemory(&pem.Block{Type: "TOOLBUS AUDIT PUBLIC KEY", Bytes: pub})
		if err := os.WriteFile(filepath.Join(dir, PublicKeyFile), pubBlock, 0o644); err != nil {
			return nil, fmt.Errorf("audit public key: %w", err)
		}
		return priv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "TOOLBUS AUDIT SIGNING KEY" || len(block.Bytes) != ed25519.SeedSize {
		return nil, fmt.Errorf("audit signing key %s: not a toolbus audit signing key", path)
	}
	return ed25519.NewKeyFromSeed(block.Bytes), nil
}

// ReadPublicKey reads a public key file LoadOrCreateKey wrote.
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit public key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "TOOLBUS AUDIT PUBLIC KEY" || len(block.Bytes) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("audit public key %s: not a toolbus audit public key", path)
	}
	return ed25519.PublicKey(block.Bytes), nil
}

// KeyID names a public key in checkpoints.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// ChainBucketConfig is the config of the bucket that keeps the chain's
// ends. One version per key: the stream keeps the history.
func ChainBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: events.AuditChainBucket, History: 1,
		Description: "toolbus audit checkpoints: the first and the latest of each signing key's chain, written by the bus"}
}

// EnsureChainBucket makes the bucket of the chain's ends, or finds it: the
// bus's owner, at its start.
func EnsureChainBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := bus.EnsureKeyValue(ctx, js, ChainBucketConfig())
	if err != nil {
		return nil, fmt.Errorf("audit chain bucket %s: %w", events.AuditChainBucket, err)
	}
	return kv, nil
}

// FirstKey and HeadKey are the bucket's keys of the first and the latest
// checkpoint of the chain signed with key keyID. Each key has its own
// chain: every node of a cluster signs with a key of its own.
func FirstKey(keyID string) string { return "first." + keyID }
func HeadKey(keyID string) string  { return "head." + keyID }

// trusted decodes a checkpoint and checks that it is signed with pub.
func trusted(data []byte, pub ed25519.PublicKey) (*events.AuditCheckpoint, error) {
	cp, err := events.Decode[events.AuditCheckpoint](data)
	switch {
	case err != nil:
		return nil, err
	case cp.Key != KeyID(pub):
		return nil, fmt.Errorf("signed with key %s, not the trusted %s", cp.Key, KeyID(pub))
	case !verifySignature(pub, cp):
		return nil, errors.New("its signature does not match")
	}
	return cp, nil
}

// leaf is a message's hash in a range's digest: its subject, its data
// and, on an invocation's record, the call id the executor minted
// (events.CallHeader), which the trail joins the call's events by. A
// record without one hashes as before ids were minted; the call comes
// after a NUL, which the JSON of data never holds.
func leaf(subject, call string, data []byte) [32]byte {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(subject))))
	h.Write([]byte(subject))
	h.Write(data)
	if call != "" {
		h.Write([]byte{0})
		h.Write([]byte(call))
	}
	return [32]byte(h.Sum(nil))
}

// rangeDigest is the digest of leaves, each with its sequence.
type rangeDigest struct {
	h     hash.Hash
	count uint64
}

func newRangeDigest() *rangeDigest { return &rangeDigest{h: sha256.New()} }

func (d *rangeDigest) add(seq uint64, l [32]byte) {
	d.h.Write(binary.BigEndian.AppendUint64(nil, seq))
	d.h.Write(l[:])
	d.count++
}

func (d *rangeDigest) hex() string { return hex.EncodeToString(d.h.Sum(nil)) }

// Checkpointer publishes checkpoints of the audit stream. The bus's owner
// runs one; Stop ends it.
type Checkpointer struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	key   ed25519.PrivateKey
	pub   ed25519.PublicKey
	keyID string
	id    events.Identity
	every time.Duration
	log   *slog.Logger

	mu    sync.Mutex         // one checkpoint at a time
	chain jetstream.KeyValue // the chain's ends; opened by the first checkpoint
	stop  chan struct{}
	done  chan struct{}
}

// StartCheckpointer publishes a checkpoint every every (when the stream
// grew), signed with key, as id.
func Start(nc *nats.Conn, js jetstream.JetStream, key ed25519.PrivateKey, id events.Identity, every time.Duration, log *slog.Logger) *Checkpointer {
	pub := key.Public().(ed25519.PublicKey)
	c := &Checkpointer{nc: nc, js: js, key: key, pub: pub, keyID: KeyID(pub), id: id, every: every, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *Checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.every)
		if _, err := c.Checkpoint(ctx); err != nil {
			c.log.Warn("audit checkpoint not published", "err", err)
		}
		cancel()
	}
}

// Stop ends the checkpointer and waits for it.
func (c *Checkpointer) Stop() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// Checkpoint publishes a checkpoint of what the stream holds after the
// last one, keeps it as the chain's head, and returns it; nil when
// nothing came since. A checkpoint published but not kept as the head is
// returned with the error.
func (c *Checkpointer) Checkpoint(ctx context.Context) (*events.AuditCheckpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chain == nil {
		kv, err := EnsureChainBucket(ctx, c.js)
		if err != nil {
			return nil, err
		}
		c.chain = kv
	}
	stream, err := c.js.Stream(ctx, events.AuditStream)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	// The chain's last checkpoint the stream holds, when it is ours.
	var inStream *events.AuditCheckpoint
	var inStreamSeq uint64
	var inStreamData []byte
	if m, err := stream.GetLastMsgForSubject(ctx, events.SubjectAuditCheckpoint); err == nil {
		if last, err := trusted(m.Data, c.pub); err == nil {
			inStream, inStreamSeq, inStreamData = last, m.Sequence, m.Data
		}
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, err
	}
	head, err := c.head(ctx)
	if err != nil {
		return nil, err
	}
	// What no checkpoint in the stream covers yet.
	from := info.State.FirstSeq
	if inStream != nil {
		from = max(from, inStream.To+1)
	} else if head != nil && head.Time.After(info.Created) {
		// The head's range came before what the stream holds (unless
		// the stream was made anew since: then its sequences start over).
		from = max(from, head.To+1)
	}
	// The chain goes on from the newer of the stream's last checkpoint and
	// the head: the head is newer when the stream lost the chain's latest
	// checkpoints (a flood pushed them all out), the stream's when the
	// head could not be written after it was published. Never a new chain
	// while the bus keeps a head: that would hide what was lost.
	prev, prevData := inStream, inStreamData
	if head != nil && (inStream == nil || inStream.Index > 0 && inStream.Index < head.Index) {
		prev, prevData = head, nil
	}
	index := uint64(1)
	switch {
	case prev != nil && prev.Index > 0:
		index = prev.Index + 1
	case head != nil:
		// prev is from a bus that did not number checkpoints, run after
		// this one had: the count goes on from the head.
		index = head.Index + 1
	}
	previous := ""
	if prev != nil {
		previous = prev.Digest
	}
	to := info.State.LastSeq
	// Nothing since, or only the last checkpoint itself: a quiet bus gets
	// no checkpoint of checkpoints. A checkpoint that is the stream's last
	// message may still leave events before it to do: those that came
	// while it was made.
	if info.State.Msgs == 0 || to < from || from == to && to == inStreamSeq {
		return nil, nil
	}
	d := newRangeDigest()
	if err := scan(ctx, c.js, from, to, func(seq uint64, subject, call string, data []byte) { d.add(seq, leaf(subject, call, data)) }); err != nil {
		return nil, err
	}
	cp := &events.AuditCheckpoint{Header: events.Header{Sender: c.id}, Index: index, From: from, To: to, Count: d.count, Digest: d.hex(),
		Previous: previous, Key: c.keyID}
	events.Stamp(cp)
	cp.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(c.key, cp.SignedText()))
	data, err := events.Encode(cp)
	if err != nil {
		return nil, err
	}
	if err := bus.RecordOnce(ctx, c.nc, events.SubjectAuditCheckpoint, "checkpoint."+events.NewCapability(), data); err != nil {
		return nil, err
	}
	// Published first, kept second: a head is then always in the stream
	// unless the stream lost it.
	if prev != nil && prev.Index == 1 && prevData != nil {
		// The chain's first, in case the bus stopped between publishing
		// it and keeping it.
		if err := c.keepFirst(ctx, prevData); err != nil {
			return cp, err
		}
	}
	if index == 1 {
		if err := c.keepFirst(ctx, data); err != nil {
			return cp, err
		}
	}
	if _, err := c.chain.Put(ctx, HeadKey(c.keyID), data); err != nil {
		return cp, fmt.Errorf("checkpoint %d published, but not kept as the chain's head: %w", index, err)
	}
	return cp, nil
}

// head is the chain's head the bus keeps, nil when it keeps none. One
// that is not signed with this bus's key is an error: the chain must not
// go on from it, nor start anew over it.
func (c *Checkpointer) head(ctx context.Context) (*events.AuditCheckpoint, error) {
	e, err := c.chain.Get(ctx, HeadKey(c.keyID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit chain head: %w", err)
	}
	head, err := trusted(e.Value(), c.pub)
	if err != nil {
		return nil, fmt.Errorf("the audit chain's head (%s %s) is not this bus's (%v): no checkpoint until it is removed", events.AuditChainBucket, HeadKey(c.keyID), err)
	}
	return head, nil
}

// keepFirst keeps the chain's first checkpoint, once: never replaced.
func (c *Checkpointer) keepFirst(ctx context.Context, data []byte) error {
	if _, err := c.chain.Create(ctx, FirstKey(c.keyID), data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("the chain's first checkpoint not kept: %w", err)
	}
	return nil
}

// scan calls f with each message of the audit stream from from to to, in
// order, read by direct get (bus.Read: an auditor in an account of its
// own makes no consumer). A copy that lags ends a read early: the
// stream's leader says whether the rest is there, to be read on, or gone.
func scan(ctx context.Context, js jetstream.JetStream, from, to uint64, f func(seq uint64, subject, call string, data []byte)) error {
	for tries := 0; from <= to; tries++ {
		last, err := bus.Read(ctx, js, events.AuditStream, bus.Range{From: from, To: to}, func(m *bus.StoredMsg) error {
			f(m.Sequence, m.Subject, m.Header.Get(events.CallHeader), m.Data)
			return nil
		})
		if err != nil {
			return err
		}
		if last >= to {
			return nil
		}
		if last >= from {
			from, tries = last+1, 0
		}
		next, err := bus.NextMsg(ctx, js, events.AuditStream, from, "")
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && next.Sequence > to:
			return nil // the rest up to to is gone
		case err != nil:
			return err
		case tries >= 3:
			return fmt.Errorf("the audit stream's copies stop at #%d while its leader holds #%d", from-1, next.Sequence)
		}
	}
	return nil
}

// Report is what Verify found.
type Report struct {
	FirstSeq, LastSeq uint64
	Messages          uint64
	// Gaps are the ranges of sequences missing between the first message
	// read and the last.
	Gaps [][2]uint64
	// Checkpoints counts the checkpoints that match; Problems says what
	// does not (a digest, a count, a signature, the chain).
	Checkpoints int
	Problems    []string
	// Unchecked counts the messages after the last checkpoint.
	Unchecked uint64

	// What the stream lost of the trail's start, when Verify reads it
	// whole (no since): LostEvents is the range of sequences before the
	// first message read, from #1 ([0, 0] when the stream still starts at
	// #1), and LostCheckpoints counts the chain's checkpoints that went
	// with them: the first one read's Index less one or, when none is
	// left, the head's Index. LostUncounted says that earlier checkpoints
	// went too, which carry no index (from before they were numbered).
	LostEvents      [2]uint64
	LostCheckpoints uint64
	LostUncounted   bool
	// HeadMissing says that the chain's head, as the bus keeps it outside
	// the stream, is not among the checkpoints read though it should be:
	// the stream holds older checkpoints of the chain but not the latest
	// (or, with since, the head was made after since). MissingAtEnd counts
	// the checkpoints after the last one read, when that one is numbered.
	HeadMissing  bool
	MissingAtEnd uint64
	// First and Head are the chain's first and latest checkpoints as the
	// bus keeps them in events.AuditChainBucket, signed with the trusted
	// key; nil when unknown. ChainUnknown says why the head is unknown
	// ("" when it is known): then the loss of the chain's latest
	// checkpoints cannot be seen.
	First, Head  *events.AuditCheckpoint
	ChainUnknown string
}

// Intact reports whether what the stream still holds is whole and
// matches its checkpoints.
func (r *Report) Intact() bool { return len(r.Gaps) == 0 && len(r.Problems) == 0 }

// OK reports whether nothing is missing, from the trail's start (or
// since) to the chain's head, and every checkpoint matches. A trail
// whose start was evicted is not OK, whatever evicted it: what remains
// may verify, but nothing shows what the lost part held.
func (r *Report) OK() bool {
	return r.Intact() && r.LostEvents[1] == 0 && r.LostCheckpoints == 0 && !r.LostUncounted && !r.HeadMissing
}

// Lost says plainly what of the trail is no longer in the stream, ""
// when nothing is.
func (r *Report) Lost() string {
	var start []string
	if r.LostEvents[1] > 0 {
		start = append(start, fmt.Sprintf("events #%d..#%d", r.LostEvents[0], r.LostEvents[1]))
	}
	switch {
	case r.LostCheckpoints > 0 && r.LostUncounted:
		start = append(start, fmt.Sprintf("%d checkpoints and earlier ones without an index", r.LostCheckpoints))
	case r.LostCheckpoints == 1:
		start = append(start, "1 checkpoint")
	case r.LostCheckpoints > 1:
		start = append(start, fmt.Sprintf("%d checkpoints", r.LostCheckpoints))
	case r.LostUncounted:
		start = append(start, "earlier checkpoints (how many is unknown: they carry no index)")
	}
	var out []string
	if len(start) > 0 {
		out = append(out, strings.Join(start, " and ")+" are no longer in the stream")
	}
	if r.HeadMissing {
		s := fmt.Sprintf("the chain's latest checkpoint (number %d, of %s) is not in the stream", r.Head.Index, r.Head.Time.UTC().Format(time.RFC3339))
		if r.MissingAtEnd > 0 {
			s += fmt.Sprintf(": the last %d checkpoints of the chain are gone", r.MissingAtEnd)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// Verify reads the stream (from since, or all of it) and checks it
// against its checkpoints, trusting checkpoints signed with pub only, and
// against the chain's ends the bus keeps outside the stream: without
// since, a trail that lost its start is reported, and in any case one
// that lost the chain's head.
func Verify(ctx context.Context, js jetstream.JetStream, since time.Time, pub ed25519.PublicKey) (*Report, error) {
	return VerifyWith(ctx, js, since, pub, nil)
}

// A Check looks into each message Verify reads, and says what is wrong
// with it ("" for nothing): a problem of the trail like any other. The
// checkpoints say a message was not changed; a check says whether what
// it holds is sound (a recorded policy push's signature).
type Check func(seq uint64, subject string, data []byte) string

// VerifyWith is Verify, with check run on every message.
func VerifyWith(ctx context.Context, js jetstream.JetStream, since time.Time, pub ed25519.PublicKey, check Check) (*Report, error) {
	rep := &Report{}
	v := &verifier{pub: pub, keyID: KeyID(pub), rep: rep, ctx: ctx, blobs: bus.NewBlobs(js), checked: map[string]error{}, check: check}
	// The chain's ends before the stream: a checkpoint published while
	// the stream is read is then in what is read, or newer than the head.
	v.readChain(ctx, js)
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		return nil, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	from, to := info.State.FirstSeq, info.State.LastSeq
	if !since.IsZero() && info.State.Msgs > 0 {
		if from, err = firstSince(ctx, js, since); err != nil {
			return nil, err
		}
	}
	if info.State.Msgs > 0 && from > 0 {
		if err := scan(ctx, js, from, to, v.message); err != nil {
			return nil, fmt.Errorf("read the audit stream: %w", err)
		}
		if v.next <= to && rep.Messages > 0 {
			rep.Gaps = append(rep.Gaps, [2]uint64{v.next, to})
		}
	}
	rep.Unchecked = uint64(len(v.leaves))
	v.ends(ctx, since, to)
	return rep, nil
}

// verifier checks the messages of the stream, in sequence order, against
// the checkpoints among them, and reports in rep.
type verifier struct {
	pub   ed25519.PublicKey
	keyID string
	rep   *Report

	leaves         []leafAt // since the last checkpoint's range
	next           uint64   // the sequence expected next
	lastDigest     string
	haveCheckpoint bool

	chain      jetstream.KeyValue      // the chain's ends; nil when unread
	noBucket   bool                    // there is no bucket of the chain's ends
	headAbsent bool                    // the bucket holds no head of the key
	firstRead  *events.AuditCheckpoint // the first checkpoint read that is signed with pub
	lastIndex  uint64                  // the highest index read

	// The records' large fields, each checked once against its digest
	// (events.Inline): what was found of each, by digest.
	ctx     context.Context
	blobs   *bus.Blobs
	checked map[string]error

	check Check // nil for none
}

// outlined checks that the large fields the outlined record at seq names
// are in events.BlobStream as their digests say: the checkpoints cover
// the record, and so the digests, but not the blobs themselves. Each
// blob is read once.
func (v *verifier) outlined(seq uint64, data []byte) {
	var r struct {
		Outlined map[string]events.BlobRef `json:"outlined"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		v.rep.Problems = append(v.rep.Problems, fmt.Sprintf("#%d: an outlined record that does not decode: %v", seq, err))
		return
	}
	names := slices.Sorted(maps.Keys(r.Outlined))
	for _, name := range names {
		ref := r.Outlined[name]
		err, seen := v.checked[ref.SHA256]
		if !seen {
			err = v.checkBlob(ref)
			v.checked[ref.SHA256] = err
		}
		if err != nil {
			if name == "" {
				name = "the whole record"
			}
			v.rep.Problems = append(v.rep.Problems, fmt.Sprintf("#%d: %s (%d bytes, sha256 %s) is not in %s as recorded: %v", seq, name, ref.Size, ref.SHA256, events.BlobStream, err))
		}
	}
}

// checkBlob reads one blob by its digest's subject and checks it.
func (v *verifier) checkBlob(ref events.BlobRef) error {
	data, err := v.blobs.Fetch(v.ctx, ref)
	if err != nil {
		return err
	}
	return events.CheckBlob(ref, data)
}

// leafAt is a message's leaf and its sequence.
type leafAt struct {
	seq  uint64
	leaf [32]byte
}

// readChain reads the chain's first and latest checkpoints the bus keeps
// outside the stream into rep, trusting them only when signed with pub.
func (v *verifier) readChain(ctx context.Context, js jetstream.JetStream) {
	rep := v.rep
	kv, err := js.KeyValue(ctx, events.AuditChainBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		v.noBucket = true
		rep.ChainUnknown = "the bus keeps no " + events.AuditChainBucket + " bucket (a bus from before it)"
		return
	} else if err != nil {
		rep.ChainUnknown = fmt.Sprintf("bucket %s: %v", events.AuditChainBucket, err)
		return
	}
	v.chain = kv
	// get reads one end: nil, and whether it is absent, when not trusted.
	get := func(key string) (*events.AuditCheckpoint, bool) {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, true
		} else if err != nil {
			rep.ChainUnknown = fmt.Sprintf("bucket %s, key %s: %v", events.AuditChainBucket, key, err)
			return nil, false
		}
		cp, err := trusted(e.Value(), v.pub)
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s %s is not trusted: %v", events.AuditChainBucket, key, err))
			return nil, false
		}
		return cp, false
	}
	var firstAbsent bool
	rep.First, firstAbsent = get(FirstKey(v.keyID))
	rep.Head, v.headAbsent = get(HeadKey(v.keyID))
	switch {
	case rep.Head != nil && firstAbsent:
		// The first is kept before the head is.
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s keeps the chain's head but not its first checkpoint (removed?)", events.AuditChainBucket))
	case v.headAbsent && rep.ChainUnknown == "":
		rep.ChainUnknown = "the bus has kept no checkpoint of the chain of key " + v.keyID + " yet"
	}
}

// message takes in the next message read: it notes a gap before it, checks
// it when it is a checkpoint, and keeps its leaf for the next checkpoint.
func (v *verifier) message(seq uint64, subject, call string, data []byte) {
	rep := v.rep
	if rep.Messages == 0 {
		rep.FirstSeq = seq
	} else if seq != v.next {
		rep.Gaps = append(rep.Gaps, [2]uint64{v.next, seq - 1})
	}
	rep.Messages++
	rep.LastSeq, v.next = seq, seq+1
	if subject == events.SubjectAuditCheckpoint {
		v.checkpoint(seq, data)
	}
	if bytes.HasPrefix(data, events.OutlinedPrefix) {
		v.outlined(seq, data)
	}
	if v.check != nil {
		if p := v.check(seq, subject, data); p != "" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("#%d: %s", seq, p))
		}
	}
	v.leaves = append(v.leaves, leafAt{seq: seq, leaf: leaf(subject, call, data)})
}

// checkpoint checks the checkpoint at seq: its key, its signature, its
// place in the chain and its digest, then lets go of the leaves it covers.
func (v *verifier) checkpoint(seq uint64, data []byte) {
	problem := func(format string, args ...any) {
		v.rep.Problems = append(v.rep.Problems, fmt.Sprintf("#%d: ", seq)+fmt.Sprintf(format, args...))
	}
	cp, err := events.Decode[events.AuditCheckpoint](data)
	switch {
	case err != nil:
		problem("a checkpoint that does not decode: %v", err)
		return
	case cp.Key != v.keyID:
		problem("a checkpoint signed with key %s, not the trusted %s", cp.Key, v.keyID)
		return
	case !verifySignature(v.pub, cp):
		problem("checkpoint %d..%d: the signature does not match", cp.From, cp.To)
		return
	}
	if v.firstRead == nil {
		v.firstRead = cp
	}
	if v.haveCheckpoint && cp.Previous != v.lastDigest {
		problem("checkpoint %d..%d does not follow the one before (a checkpoint is missing or forged)", cp.From, cp.To)
	}
	if cp.Index > 0 {
		if v.lastIndex > 0 && cp.Index != v.lastIndex+1 {
			problem("checkpoint %d..%d is number %d of the chain, after number %d", cp.From, cp.To, cp.Index, v.lastIndex)
		}
		// The bus kept the chain's ends: the stream's must be the same.
		for _, end := range []struct {
			cp   *events.AuditCheckpoint
			what string
		}{{v.rep.First, "first"}, {v.rep.Head, "latest"}} {
			if end.cp != nil && end.cp.Index == cp.Index && end.cp.Digest != cp.Digest {
				problem("checkpoint %d..%d is number %d of the chain, but not the chain's %s checkpoint the bus kept (the chain was begun anew or forked)", cp.From, cp.To, cp.Index, end.what)
			}
		}
		v.lastIndex = max(v.lastIndex, cp.Index)
	}
	// A checkpoint partly before what is read (retention or --since):
	// its digest cannot be recomputed.
	if cp.From >= v.rep.FirstSeq {
		d := newRangeDigest()
		for _, l := range v.leaves {
			if l.seq >= cp.From && l.seq <= cp.To {
				d.add(l.seq, l.leaf)
			}
		}
		switch {
		case d.count != cp.Count:
			problem("checkpoint %d..%d counted %d messages, the stream holds %d of them", cp.From, cp.To, cp.Count, d.count)
		case d.hex() != cp.Digest:
			problem("checkpoint %d..%d: the messages no longer match its digest", cp.From, cp.To)
		default:
			v.rep.Checkpoints++
		}
	}
	v.haveCheckpoint, v.lastDigest = true, cp.Digest
	kept := v.leaves[:0]
	for _, l := range v.leaves {
		if l.seq > cp.To {
			kept = append(kept, l)
		}
	}
	v.leaves = kept
}

// ends reports, once the stream is read up to last, what it lost of the
// chain: its start (without since) and its head.
func (v *verifier) ends(ctx context.Context, since time.Time, last uint64) {
	rep := v.rep
	if since.IsZero() {
		// The first message read; an empty stream lost all it held.
		first := rep.FirstSeq
		if rep.Messages == 0 {
			first = last + 1
		}
		if first > 1 {
			rep.LostEvents = [2]uint64{1, first - 1}
		}
		// A chain whose first numbered checkpoint followed unnumbered
		// ones (the bus was upgraded) lost those too when it lost that one.
		upgraded := rep.First != nil && rep.First.Previous != ""
		switch {
		case v.firstRead != nil && v.firstRead.Index > 0:
			rep.LostCheckpoints = v.firstRead.Index - 1
			rep.LostUncounted = v.firstRead.Index == 1 && v.firstRead.Previous != "" || v.firstRead.Index > 1 && upgraded
		case v.firstRead != nil:
			rep.LostUncounted = v.firstRead.Previous != ""
		case rep.Head != nil:
			rep.LostCheckpoints, rep.LostUncounted = rep.Head.Index, upgraded
		}
	}
	if rep.Head != nil && v.lastIndex < rep.Head.Index {
		switch {
		case v.lastIndex > 0:
			rep.HeadMissing, rep.MissingAtEnd = true, rep.Head.Index-v.lastIndex
		case since.IsZero():
			// With no checkpoint left, LostCheckpoints counts them all;
			// with only unnumbered ones left, the numbered ones are gone
			// from the end.
			rep.HeadMissing = v.firstRead != nil
		default:
			// The head was made after since: it would have been read.
			rep.HeadMissing = !rep.Head.Time.Before(since)
		}
	}
	// A numbered checkpoint in the stream, yet no head kept: the bus
	// keeps one from the first numbered checkpoint on (and makes the
	// bucket for it), so it was removed, unless the head was written
	// since it was read.
	switch {
	case v.lastIndex > 0 && v.noBucket:
		rep.Problems = append(rep.Problems, fmt.Sprintf("the stream holds checkpoint number %d of the chain, but bucket %s, which keeps its ends, is gone", v.lastIndex, events.AuditChainBucket))
	case v.lastIndex > 0 && v.headAbsent:
		if _, err := v.chain.Get(ctx, HeadKey(v.keyID)); errors.Is(err, jetstream.ErrKeyNotFound) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("the stream holds checkpoint number %d of the chain, but %s keeps no head of it (removed?)", v.lastIndex, events.AuditChainBucket))
		}
	}
}

func verifySignature(pub ed25519.PublicKey, cp *events.AuditCheckpoint) bool {
	sig, err := base64.StdEncoding.DecodeString(cp.Signature)
	return err == nil && ed25519.Verify(pub, cp.SignedText(), sig)
}

// firstSince is the first sequence stored at or after t; 0 when none is.
func firstSince(ctx context.Context, js jetstream.JetStream, t time.Time) (uint64, error) {
	var first uint64
	_, err := bus.Read(ctx, js, events.AuditStream, bus.Range{Since: t}, func(m *bus.StoredMsg) error {
		first = m.Sequence
		return bus.ErrStop
	})
	return first, err
}
