package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// Revoking a remembered approval is a request to the executors
// (events.RevokeSubject), not a write into the allowlist bucket: the
// people who answer confirmations revoke what they approved, and they
// live in accounts of their own, out of reach of every bucket. Who may
// send one is settled by the bus: an approver imports only the subject
// of its own name, and in the services account only admins may publish
// to it. The executor that takes it deletes the entries, records the
// request (so the trail says who revoked what) and answers what it did.

// revokeWait bounds the deletes of one request.
const revokeWait = 10 * time.Second

func (e *Executor) handleRevoke(m *nats.Msg) {
	reply := &events.RevokeReply{Header: events.Header{Sender: e.id}}
	defer func() {
		if m.Reply == "" {
			return
		}
		data, err := events.Encode(reply)
		if err != nil {
			e.log.Error("revoke reply not encoded", "err", err)
			return
		}
		_ = m.Respond(data)
	}()
	req, err := events.Decode[events.RevokeRequest](m.Data)
	if err != nil {
		reply.Error = err.Error()
		return
	}
	reply.RequestID = req.ID
	// The sender names itself as the principal the subject carries.
	p := e.principalOf(m, false)
	if _, err := events.Caller(req.Sender, p, p != events.Unproven); err != nil {
		reply.Error = err.Error()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), revokeWait)
	defer cancel()
	reply.Revoked, reply.Unknown, err = e.allowlist.revoke(ctx, req.Keys)
	if len(reply.Revoked) > 0 {
		e.recordRequest(m, "")
		e.log.Info("allowlist entries revoked", "by", req.Sender.ID, "keys", reply.Revoked)
	}
	if err != nil {
		reply.Error = err.Error()
	}
}

// revoke deletes the entries of keys that the bucket holds, and says
// which it deleted and which it did not hold.
func (a *allowlist) revoke(ctx context.Context, keys []string) (revoked, unknown []string, _ error) {
	for _, key := range keys {
		if _, err := a.kv.Get(ctx, key); err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
				unknown = append(unknown, key)
				continue
			}
			return revoked, unknown, fmt.Errorf("allowlist entry %q: %w", key, err)
		}
		if err := a.kv.Delete(ctx, key); err != nil {
			return revoked, unknown, fmt.Errorf("revoke %q: %w", key, err)
		}
		revoked = append(revoked, key)
	}
	return revoked, unknown, nil
}
