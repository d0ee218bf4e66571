package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// The limits (limits.go) and the loop guards (sessions.go) count on
// JetStream counter streams: a message with incrHeader and no payload
// adds to its subject's counter, and the acknowledgement carries the new
// value.

// incrHeader is JetStream's header of a counter's increment.
const incrHeader = "Nats-Incr"

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
