package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// UnknownConsumer counts the fetches a cluster answered with "no
// responders": a consumer just made on another node is not yet known to
// the node this connection is on (its interest crosses the routes on its
// own time), or it moved with the stream's leader. The fetch is made
// again, a few times, a little later each time.
type UnknownConsumer struct{ tries int }

// Again reports whether a fetch that failed with err is worth making
// again, after waiting a little longer each time.
func (u *UnknownConsumer) Again(ctx context.Context, err error) bool {
	if !errors.Is(err, nats.ErrNoResponders) || u.tries >= 20 {
		return false
	}
	u.tries++
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(u.tries) * 50 * time.Millisecond):
		return true
	}
}

// ReaderIdle is how long the server keeps a reader's consumer once it
// stops fetching. A read never says it is done, and nats-server keeps at
// most 1,000 consumers a stream by default: with its default of five
// minutes, a few audit reads a second would reach that limit.
const ReaderIdle = 30 * time.Second

// A reader of the audit stream fetches up to FetchBatch messages at a
// time, waiting at most FetchWait for them.
const (
	FetchBatch = 2000
	FetchWait  = 5 * time.Second
)
