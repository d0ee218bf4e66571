package counters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy"
)

// Exact counts on the bus, for the rates a policy asks to hold exactly
// across the fleet: one counter of the stream events.LimitsStream per
// key (JetStream's counters: a message with incrHeader and no payload
// adds to its subject's counter, and the acknowledgement carries the new
// value). Every increment is a round trip, and every executor sees the
// same count. It is safe for concurrent use and holds nothing to close.
type Exact struct {
	nc  *nats.Conn
	log *slog.Logger
	// missing says why the bus keeps no counters (a server before 2.12):
	// every Add fails with it, and the rate's call is refused.
	missing error
}

// incrHeader is JetStream's header of a counter's increment.
const incrHeader = "Nats-Incr"

// exactWait bounds one increment's round trip.
const exactWait = 10 * time.Second

// OpenExact makes the counter stream, or brings an existing one to its
// config.
func OpenExact(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (*Exact, error) {
	if log == nil {
		log = slog.Default()
	}
	if !bus.ServerAtLeast(nc, 2, 12) {
		// A server before 2.12 would take the stream without counters,
		// and store each increment as a message.
		return &Exact{nc: nc, log: log, missing: fmt.Errorf("a rate held exactly needs JetStream's counters, which came with nats-server 2.12; this bus runs %s", nc.ConnectedServerVersion())}, nil
	}
	if _, err := bus.EnsureStream(ctx, js, jetstream.StreamConfig{
		Name:        events.LimitsStream,
		Description: "toolbus: counters of the rates the policy limits exactly, one subject per limit key and window",
		Subjects:    []string{events.LimitCountPrefix + ">"},
		// A window lasts at most MaxLimitPer; its counter is kept a
		// little longer, then goes.
		MaxAge:            policy.MaxLimitPer + time.Hour,
		MaxMsgsPerSubject: 1,
		AllowMsgCounter:   true,
		Storage:           jetstream.FileStorage,
	}); err != nil {
		return nil, fmt.Errorf("limit counters: %w", err)
	}
	return &Exact{nc: nc, log: log}, nil
}

// Add adds n to the count of key (a subject token, or tokens) and
// returns the new count, the fleet's.
func (x *Exact) Add(ctx context.Context, key string, n int64) (int64, error) {
	if x.missing != nil {
		return 0, x.missing
	}
	ctx, cancel := context.WithTimeout(ctx, exactWait)
	defer cancel()
	m := nats.NewMsg(events.LimitCountPrefix + key)
	m.Header.Set(incrHeader, fmt.Sprintf("%+d", n)) // the server wants the sign
	resp, err := x.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return 0, err
	}
	v, err := counterValue(resp, events.LimitsStream)
	if err != nil {
		return 0, fmt.Errorf("counter %s: %w", key, err)
	}
	return v, nil
}

// TakeBack adds -n to the count of key without waiting for the
// acknowledgement: what a refused call takes back.
func (x *Exact) TakeBack(key string, n int64) {
	if x.missing != nil {
		return
	}
	m := nats.NewMsg(events.LimitCountPrefix + key)
	m.Header.Set(incrHeader, fmt.Sprintf("%+d", -n))
	if err := x.nc.PublishMsg(m); err != nil {
		x.log.Warn("a refused call's count was not taken back", "key", key, "err", err)
	}
}

// counterValue reads the value a counter stream's acknowledgement
// carries: {"stream":…,"seq":…,"val":"N"}, or why it took no increment.
// nats.go's PubAck has no field for the value, so the acknowledgement is
// read here.
func counterValue(m *nats.Msg, stream string) (int64, error) {
	if m.Header.Get("Status") == "503" {
		return 0, fmt.Errorf("no stream %s takes the counts", stream)
	}
	var ack struct {
		Value string `json:"val"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &ack); err != nil {
		return 0, fmt.Errorf("unreadable acknowledgement %q: %w", m.Data, err)
	}
	if ack.Error != nil {
		return 0, errors.New(ack.Error.Description)
	}
	v, err := strconv.ParseInt(ack.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("acknowledgement without a count: %q", m.Data)
	}
	return v, nil
}
