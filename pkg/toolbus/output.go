package toolbus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
)

// ReadOutput returns the whole stored output of a truncated call, named
// by its invocation id, its Result's OutputRef, or a Part's Ref. The
// reader streams from the object store; close it. A name with no stored
// output is ErrNoOutput.
func (c *Client) ReadOutput(ctx context.Context, name string) (io.ReadCloser, error) {
	name = strings.TrimPrefix(name, events.OutputBucket+"/")
	if name == "" {
		return nil, errors.New("toolbus: read output: empty name")
	}
	obs, err := c.js.ObjectStore(ctx, events.OutputBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %s (the bus has no output store)", ErrNoOutput, name)
	}
	if err != nil {
		return nil, fmt.Errorf("toolbus: read output %s: %w", name, err)
	}
	r, err := obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoOutput, name)
	}
	if err != nil {
		return nil, fmt.Errorf("toolbus: read output %s: %w", name, err)
	}
	return r, nil
}
