package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// Defaults of the audit stream's retention and size cap. Thirty days is
// long enough to look into what an agent did last month; a gibibyte holds
// them for a small fleet (docs/audit.md, "How big the trail is", has the
// arithmetic). The executors derive each principal's record budget from
// both (executor.Config.RecordShare).
const (
	DefaultAuditMaxAge         = 30 * 24 * time.Hour
	DefaultAuditMaxBytes int64 = 1 << 30
)

// EnsureAudit makes the audit stream, and the stream of its confirmation
// subjects, to cfg's retention and copies, or updates them to it: what
// the bus node does at its start, for a NATS deployment with no toolbus
// bus node (`toolbus audit init`). It needs an admin's permissions.
func EnsureAudit(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	return retryEnsure(ctx, func(ctx context.Context) error { return ensureAudit(ctx, js, cfg, true) })
}

// AwaitAudit waits, as long as ctx lets it, for the audit stream to be
// there, saying every 5 s on log what is missing: a part whose events
// would go nowhere does not start. A toolbus bus node makes the stream
// at its start; on a NATS deployment with none, an admin does, once.
func AwaitAudit(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	warned := time.Now()
	for {
		_, err := js.Stream(ctx, events.AuditStream)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, jetstream.ErrStreamNotFound) && !transient(err):
			return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
		case time.Since(warned) > 5*time.Second:
			log.Warn("no audit stream on this bus yet: a toolbus bus node makes it, or an admin with `toolbus audit init` on a NATS deployment with none",
				"stream", events.AuditStream, "err", err)
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit stream %s: %w (last: %v)", events.AuditStream, ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ensureAudit creates the stream that keeps every event, or, for the bus's
// owner (the process that runs the server), updates it to cfg's retention.
// A part that only connects leaves an existing stream as it is: its own
// defaults must not undo the owner's --audit-max-age; it only turns on
// the acknowledgements of a stream made before records were acknowledged
// (Recorder), which would otherwise never get one, and DiscardNew on a
// stream made when the trail let its oldest records go. No request is
// sent on a captured subject (events.Request), so acknowledgements go
// only to recorders.
//
// The stream keeps its records for their whole retention (MaxAge) and
// never evicts one to make room: a full stream refuses new records
// (DiscardNew), and the executors refuse calls before it is full
// (docs/audit.md, "When the trail fills"). Evicting the oldest would let
// a caller push an attack's own records out with a flood of its own.
func ensureAudit(ctx context.Context, js jetstream.JetStream, cfg Config, owner bool) error {
	copies := replicas(cfg)
	if !owner {
		// A part that makes the stream for a deployment with no bus
		// owner (or before the owner got to it) keeps as many copies as
		// the owner would: 3 when the connection knows of 3 servers.
		if cfg.Replicas == 0 && len(js.Conn().Servers()) >= 3 {
			copies = 3
		}
		if s, err := js.Stream(ctx, events.AuditStream); err == nil {
			cfg := s.CachedInfo().Config
			if cfg.NoAck || !cfg.AllowDirect || cfg.Discard != jetstream.DiscardNew {
				cfg.NoAck, cfg.AllowDirect, cfg.Discard = false, true, jetstream.DiscardNew
				if _, err := js.UpdateStream(ctx, cfg); err != nil {
					return fmt.Errorf("audit stream %s does not acknowledge records, answer direct gets or refuse records when full (DiscardNew), and could not be changed to (an admin: toolbus audit init): %w", events.AuditStream, err)
				}
			}
			if err := ensureBlobs(ctx, js, cfg, false); err != nil {
				return err
			}
			return ensureConfirmations(ctx, js, cfg.Replicas, cfg.MaxBytes, false)
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
		}
	}
	maxBytes := cfg.AuditMaxBytes
	if maxBytes == 0 {
		maxBytes = DefaultAuditMaxBytes
	}
	deny := !cfg.AuditAllowDelete
	if s, err := js.Stream(ctx, events.AuditStream); err == nil && s.CachedInfo().Config.DenyDelete {
		deny = true // once refused, for good: JetStream cannot take it back
	}
	streamCfg := jetstream.StreamConfig{
		Name:        events.AuditStream,
		Description: "toolbus audit trail: every event under tool.>",
		Subjects:    []string{events.SubjectAll},
		Storage:     jetstream.FileStorage,
		MaxAge:      cfg.AuditMaxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardNew,
		DenyDelete:  deny,
		DenyPurge:   deny,
		Replicas:    copies,
		// Readers that may not make consumers (an auditor: internal/auth)
		// read it by direct get (Read).
		AllowDirect: true,
	}
	var err error
	if owner {
		_, err = createOrUpdateStream(ctx, js, streamCfg)
	} else {
		// Only made, never updated: the owner may have made it since
		// it was looked up, with retention of its own.
		_, err = js.CreateStream(ctx, streamCfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return ensureAudit(ctx, js, cfg, false)
		}
	}
	if err != nil {
		return fmt.Errorf("audit stream %s: %w", events.AuditStream, err)
	}
	if err := ensureBlobs(ctx, js, streamCfg, owner); err != nil {
		return err
	}
	return ensureConfirmations(ctx, js, copies, maxBytes, owner)
}

// ensureBlobs makes the stream of the records' large fields
// (events.BlobStream, events.Outline) beside the audit stream, with its
// retention, cap, copies and refusals: it is part of the trail, and
// keeps what it holds as long, evicting nothing to make room, refusing
// deletes and purges as the audit stream does. One message per content
// (the latest, which restarts its age): a blob sent again is not kept
// twice. The owner updates an existing one to the audit stream's limits;
// a part that only connects makes it when it is missing.
func ensureBlobs(ctx context.Context, js jetstream.JetStream, audit jetstream.StreamConfig, owner bool) error {
	s, err := js.Stream(ctx, events.BlobStream)
	switch {
	case err == nil && !owner:
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("blob stream %s: %w", events.BlobStream, err)
	}
	deny := audit.DenyDelete
	if err == nil && s.CachedInfo().Config.DenyDelete {
		deny = true // once refused, for good
	}
	cfg := jetstream.StreamConfig{
		Name:              events.BlobStream,
		Description:       "toolbus audit trail: the large fields of records in " + events.AuditStream + ", by SHA-256",
		Subjects:          []string{events.BlobSubjectPrefix + "*"},
		Storage:           jetstream.FileStorage,
		MaxAge:            audit.MaxAge,
		MaxBytes:          audit.MaxBytes,
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardNew,
		DenyDelete:        deny,
		DenyPurge:         deny,
		Replicas:          audit.Replicas,
		AllowDirect:       true, // auditors read it by direct get, as the audit stream
	}
	if owner {
		_, err = createOrUpdateStream(ctx, js, cfg)
	} else {
		_, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("blob stream %s: %w", events.BlobStream, err)
	}
	return nil
}

// How long and how much of the confirmation subjects ConfirmStream
// keeps: as long as a confirmation may wait for an answer (an approver
// reads back less: approve.DefaultWindow), and no more than a quarter
// of the audit stream's bytes.
//
// Unlike the audit stream it lets its oldest go (DiscardOld): it is a
// copy, for approvers, of what the audit stream holds for its whole
// retention, so nothing of the trail is lost with it; and a copy that
// refused new messages when full would stop sourcing, and leave every
// new confirmation unseen by approvers until the old ones aged out. A
// confirmation pushed out of it before its answer is one no approver
// sees: its call ends CONFIRMATION_TIMEOUT, refused.
const (
	ConfirmMaxAge   = 24 * time.Hour
	confirmMaxBytes = 256 << 20
)

// ensureConfirmations makes the stream of the audit stream's
// confirmation subjects (events.ConfirmStream), sourced from it, which
// approvers read instead of the audit stream. A stream made beside an
// audit stream that has history starts with what it would hold: the
// confirmations of the last ConfirmMaxAge (stored anew, with the time
// they were copied). The owner updates an existing one to its copies and
// limits; a part that only connects leaves it as it is.
func ensureConfirmations(ctx context.Context, js jetstream.JetStream, copies int, auditBytes int64, owner bool) error {
	s, err := js.Stream(ctx, events.ConfirmStream)
	switch {
	case err == nil && !owner:
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("confirmation stream %s: %w", events.ConfirmStream, err)
	}
	maxBytes := int64(confirmMaxBytes)
	if auditBytes > 0 {
		maxBytes = min(maxBytes, max(auditBytes/4, 1<<20))
	}
	start := time.Now().Add(-ConfirmMaxAge)
	source := &jetstream.StreamSource{Name: events.AuditStream, FilterSubject: events.SubjectConfirmAll, OptStartTime: &start}
	if err == nil && len(s.CachedInfo().Config.Sources) == 1 {
		// Where an existing stream's source started is its own.
		source = s.CachedInfo().Config.Sources[0]
	}
	confirmCfg := jetstream.StreamConfig{
		Name:        events.ConfirmStream,
		Description: "toolbus confirmation requests and their ends, copied from " + events.AuditStream + " for approvers",
		Sources:     []*jetstream.StreamSource{source},
		Storage:     jetstream.FileStorage,
		MaxAge:      ConfirmMaxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardOld,
		Replicas:    copies,
		AllowDirect: true,
	}
	if owner {
		_, err = createOrUpdateStream(ctx, js, confirmCfg)
	} else {
		_, err = js.CreateStream(ctx, confirmCfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // made meanwhile, as its maker wanted it
		}
	}
	if err != nil {
		return fmt.Errorf("confirmation stream %s: %w", events.ConfirmStream, err)
	}
	return nil
}

// createOrUpdateStream is js.CreateOrUpdateStream for a stream two
// owners may make at once (a bus node and a daemon that connected as it
// started): the one whose update found no stream, and whose create then
// found the other's, updates it instead of failing.
func createOrUpdateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.UpdateStream(ctx, cfg)
	}
	return s, err
}

// replicas is how many copies the stores of cfg's fleet keep.
func replicas(cfg Config) int {
	switch {
	case cfg.Replicas > 0:
		return cfg.Replicas
	case cfg.Clustered:
		return 3
	}
	return 1
}

// untilJetStream runs f, and when wait is set runs it again until it
// works or ctx ends: a node's JetStream answers only once a quorum of the
// cluster is up and has chosen a leader.
func untilJetStream(ctx context.Context, log *slog.Logger, wait bool, f func(context.Context) error) error {
	if !wait {
		return f(ctx)
	}
	// Each try is bounded: a request no leader answers would wait for
	// ctx's whole deadline.
	try := func() error {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return f(tctx)
	}
	err := try()
	for last := time.Now(); err != nil; err = try() {
		if time.Since(last) > 5*time.Second {
			log.Warn("waiting for the cluster's JetStream (are the other nodes up?)", "err", err)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster's JetStream: %w (last: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// EnsureKeyValue creates or updates a bucket of the fleet: an existing
// one keeps its number of replicas, a new one gets the fleet's (those of
// the audit stream, which the bus's owner made). A part's own defaults
// must neither leave a cluster's bucket with one copy nor shrink one.
//
// A cluster that has just started, or lost a node, may take longer than
// one request's timeout to place a new bucket's copies: such a failure is
// tried again, for up to a minute while ctx lasts.
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := retryEnsure(ctx, func(ctx context.Context) (err error) {
		if cfg.Replicas, err = fleetReplicas(ctx, js, "KV_"+cfg.Bucket); err != nil {
			return err
		}
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	})
	return kv, err
}

// OpenKeyValue opens the bucket cfg names, and makes it (EnsureKeyValue)
// only when it is missing: a part that reads a bucket of the fleet must
// not need the permission to change it (an agent, an approver, in a fleet
// with identities).
//
// A cluster that is still electing its leaders answers the lookup late:
// it is tried again too, as EnsureKeyValue's creation is: one such
// timeout must not stop a part from starting.
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := retryTransient(ctx, func() (err error) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return EnsureKeyValue(ctx, js, cfg)
	}
	return kv, err
}

// EnsureStream is EnsureKeyValue for a stream of the fleet's shared
// state (the counters of limits, say): made, or updated to cfg, keeping
// the fleet's replicas.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := retryEnsure(ctx, func(ctx context.Context) (err error) {
		if cfg.Replicas, err = fleetReplicas(ctx, js, cfg.Name); err != nil {
			return err
		}
		s, err = js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	return s, err
}

// EnsureObjectStore is EnsureKeyValue for an object store.
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	var obj jetstream.ObjectStore
	err := retryEnsure(ctx, func(ctx context.Context) (err error) {
		if cfg.Replicas, err = fleetReplicas(ctx, js, "OBJ_"+cfg.Bucket); err != nil {
			return err
		}
		obj, err = js.CreateOrUpdateObjectStore(ctx, cfg)
		return err
	})
	return obj, err
}

// retryTransient runs f until it succeeds, fails for good, ctx ends or a
// minute has passed.
func retryTransient(ctx context.Context, f func() error) error {
	return RetryWhile(ctx, transient, f)
}

// retryEnsure is retryTransient for a create-or-update of a store, which
// also tries again when another part made the store between f's update
// ("not found") and its create ("already in use"): the next try updates.
//
// Each try has ensureTry: a request the server never answers (seen with
// eight owners at once on a loaded host: a stream lookup that no reply
// came to) would otherwise wait for ctx's whole deadline.
func retryEnsure(ctx context.Context, f func(context.Context) error) error {
	return RetryWhile(ctx, func(err error) bool {
		return transient(err) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse)
	}, func() error {
		tctx, cancel := context.WithTimeout(ctx, ensureTry)
		defer cancel()
		return f(tctx)
	})
}

// ensureTry bounds one try of making or updating a store.
const ensureTry = 10 * time.Second

// RetryWhile runs f until it succeeds, fails with an error again does not
// report, ctx ends or a minute has passed, a quarter of a second apart:
// for what a cluster that is starting or settling fails at for a while.
func RetryWhile(ctx context.Context, again func(error) bool, f func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil || !again(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Transient reports an error a cluster gives while it settles: a request
// no leader answered in time or at all, or JetStream saying it is not
// available yet (API error 10008). Such a request is worth sending
// again; one that timed out may have been done, which the sender must
// allow for.
func Transient(err error) bool { return transient(err) }

func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == 10008 {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || // a publish no stream leader took
		strings.Contains(err.Error(), "temporarily unavailable")
}

// fleetReplicas is the number of replicas of stream when it exists, else
// the audit stream's, else as many as the owner gives the audit stream
// it has yet to make: 3 when the connection knows of 3 servers, as
// ensureAudit reckons. A lookup that fails otherwise than "not found" is
// an error, which the caller tries again when it is transient: a cluster
// that has just started, or is electing leaders, answers late or not at
// all, and a bucket made meanwhile with 1 copy would be lost with the
// one node that holds it.
func fleetReplicas(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	for _, name := range []string{stream, events.AuditStream} {
		s, err := js.Stream(ctx, name)
		if err == nil {
			return max(1, s.CachedInfo().Config.Replicas), nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, err
		}
	}
	if len(js.Conn().Servers()) >= 3 {
		return 3, nil
	}
	return 1, nil
}
