package approve

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/events"
)

// ErrNoExecutor means no executor took a request: none is running.
var ErrNoExecutor = errors.New("no executor is running to take the request")

// Revoke asks the executors to revoke the allowlist entries of keys, as
// this approver (events.RevokeSubject): approvers live out of reach of
// the allowlist bucket, and the executor records who revoked what.
func (a *Approver) Revoke(ctx context.Context, keys ...string) (*events.RevokeReply, error) {
	return Revoke(ctx, a.nc, a.cfg.Identity, a.cfg.Principal, keys)
}

// Revoke asks the executors on nc to revoke the allowlist entries of
// keys, as sender, whose connection the bus admitted as principal ("" for
// a bus without identities). The reply says which keys were revoked and
// which the allowlist did not hold; an error, that nothing more was done.
func Revoke(ctx context.Context, nc *nats.Conn, sender events.Identity, principal string, keys []string) (*events.RevokeReply, error) {
	if principal != "" && sender.ID != principal && !strings.HasPrefix(sender.ID, principal+"/") {
		sender.ID = principal + "/" + sender.ID // the bus proves the principal, not the rest
	}
	req := &events.RevokeRequest{Header: events.Header{Sender: sender}, Keys: keys}
	data, err := events.Encode(req)
	if err != nil {
		return nil, fmt.Errorf("revoke: %w", err)
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, answerTimeout)
		defer cancel()
	}
	m, err := nc.RequestWithContext(ctx, events.RevokeSubject(principal), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("revoke: %w", ErrNoExecutor)
	}
	if err != nil {
		return nil, fmt.Errorf("revoke: %w", err)
	}
	reply, err := events.Decode[events.RevokeReply](m.Data)
	if err != nil {
		return nil, fmt.Errorf("revoke: the executor's reply: %w", err)
	}
	if reply.Error != "" {
		err = fmt.Errorf("revoke: %s", strings.TrimPrefix(reply.Error, "revoke: "))
	}
	return reply, err
}
