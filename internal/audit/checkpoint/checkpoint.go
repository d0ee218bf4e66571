// Package checkpoint makes the audit stream tamper-evident: the bus's
// owner signs a chained digest of the stream every so often, and Verify
// recomputes every digest and checks every signature.
package checkpoint

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

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

// leaf is a message's hash in a range's digest.
func leaf(subject string, data []byte) [32]byte {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(subject))))
	h.Write([]byte(subject))
	h.Write(data)
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
	id    events.Identity
	every time.Duration
	log   *slog.Logger

	mu   sync.Mutex // one checkpoint at a time
	stop chan struct{}
	done chan struct{}
}

// StartCheckpointer publishes a checkpoint every every (when the stream
// grew), signed with key, as id.
func Start(nc *nats.Conn, js jetstream.JetStream, key ed25519.PrivateKey, id events.Identity, every time.Duration, log *slog.Logger) *Checkpointer {
	c := &Checkpointer{nc: nc, js: js, key: key, id: id, every: every, log: log, stop: make(chan struct{}), done: make(chan struct{})}
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
// last one, and returns it; nil when nothing came since.
func (c *Checkpointer) Checkpoint(ctx context.Context) (*events.AuditCheckpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stream, err := c.js.Stream(ctx, events.AuditStream)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	from, previous, lastCheckpoint := info.State.FirstSeq, "", uint64(0)
	if m, err := stream.GetLastMsgForSubject(ctx, events.SubjectAuditCheckpoint); err == nil {
		if last, err := events.Decode[events.AuditCheckpoint](m.Data); err == nil && last.Key == KeyID(c.key.Public().(ed25519.PublicKey)) {
			from, previous, lastCheckpoint = max(from, last.To+1), last.Digest, m.Sequence
		}
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, err
	}
	to := info.State.LastSeq
	// Nothing since, or only the last checkpoint itself: a quiet bus gets
	// no checkpoint of checkpoints.
	if info.State.Msgs == 0 || to < from || to == lastCheckpoint {
		return nil, nil
	}
	d := newRangeDigest()
	if err := scan(ctx, stream, from, to, func(seq uint64, subject string, data []byte) { d.add(seq, leaf(subject, data)) }); err != nil {
		return nil, err
	}
	cp := &events.AuditCheckpoint{Header: events.Header{Sender: c.id}, From: from, To: to, Count: d.count, Digest: d.hex(),
		Previous: previous, Key: KeyID(c.key.Public().(ed25519.PublicKey))}
	events.Stamp(cp)
	cp.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(c.key, cp.SignedText()))
	data, err := events.Encode(cp)
	if err != nil {
		return nil, err
	}
	if err := bus.RecordOnce(ctx, c.nc, events.SubjectAuditCheckpoint, "checkpoint."+nuid.Next(), data); err != nil {
		return nil, err
	}
	return cp, nil
}

// scan reads the stream's messages from..to (every subject), in order.
func scan(ctx context.Context, stream jetstream.Stream, from, to uint64, f func(seq uint64, subject string, data []byte)) error {
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, InactiveThreshold: bus.ReaderIdle})
	if err != nil {
		return err
	}
	var unknown bus.UnknownConsumer
	for {
		batch, err := cons.Fetch(bus.FetchBatch, jetstream.FetchMaxWait(bus.FetchWait))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if meta.Sequence.Stream > to {
				return nil
			}
			f(meta.Sequence.Stream, m.Subject(), m.Data())
			if meta.Sequence.Stream == to {
				return nil
			}
		}
		if err := batch.Error(); n == 0 && unknown.Again(ctx, err) {
			continue
		} else if err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if n == 0 {
			return nil // the rest up to to is gone
		}
	}
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
}

// OK reports whether nothing is missing and every checkpoint matches.
func (r *Report) OK() bool { return len(r.Gaps) == 0 && len(r.Problems) == 0 }

// Verify reads the stream (from since, or all of it) and checks it
// against its checkpoints, trusting checkpoints signed with pub only.
func Verify(ctx context.Context, js jetstream.JetStream, since time.Time, pub ed25519.PublicKey) (*Report, error) {
	stream, err := js.Stream(ctx, events.AuditStream)
	if err != nil {
		return nil, fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	if info.State.Msgs == 0 {
		return rep, nil
	}
	from := info.State.FirstSeq
	if !since.IsZero() {
		m, err := firstSince(ctx, stream, since)
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return rep, nil
		}
		from = m
	}
	to := info.State.LastSeq
	v := &verifier{pub: pub, keyID: KeyID(pub), rep: rep}
	if err := scan(ctx, stream, from, to, v.message); err != nil {
		return nil, fmt.Errorf("read the audit stream: %w", err)
	}
	if v.next <= to && rep.Messages > 0 {
		rep.Gaps = append(rep.Gaps, [2]uint64{v.next, to})
	}
	rep.Unchecked = uint64(len(v.leaves))
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
}

// leafAt is a message's leaf and its sequence.
type leafAt struct {
	seq  uint64
	leaf [32]byte
}

// message takes in the next message read: it notes a gap before it, checks
// it when it is a checkpoint, and keeps its leaf for the next checkpoint.
func (v *verifier) message(seq uint64, subject string, data []byte) {
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
	v.leaves = append(v.leaves, leafAt{seq: seq, leaf: leaf(subject, data)})
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
	if v.haveCheckpoint && cp.Previous != v.lastDigest {
		problem("checkpoint %d..%d does not follow the one before (a checkpoint is missing or forged)", cp.From, cp.To)
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

func verifySignature(pub ed25519.PublicKey, cp *events.AuditCheckpoint) bool {
	sig, err := base64.StdEncoding.DecodeString(cp.Signature)
	return err == nil && ed25519.Verify(pub, cp.SignedText(), sig)
}

// firstSince is the first sequence stored at or after t; 0 when none is.
func firstSince(ctx context.Context, stream jetstream.Stream, t time.Time) (uint64, error) {
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t, InactiveThreshold: bus.ReaderIdle})
	if err != nil {
		return 0, err
	}
	m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
	if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	meta, err := m.Metadata()
	if err != nil {
		return 0, err
	}
	return meta.Sequence.Stream, nil
}
