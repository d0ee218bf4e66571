package toolbus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
)

// ReadOutput returns the whole stored output of a truncated call, named
// by its invocation id, its Result's OutputRef, or a Part's Ref. An
// executor reads it from the object store for this client, and only an
// output of a call this client's identity made (in a fleet; without
// identities, any). The reader streams; close it. A name with no stored
// output of this identity's is ErrNoOutput.
func (c *Client) ReadOutput(ctx context.Context, name string) (io.ReadCloser, error) {
	name = strings.TrimPrefix(name, events.OutputBucket+"/")
	if name == "" {
		return nil, errors.New("toolbus: read output: empty name")
	}
	r, err := c.inv.ReadOutput(ctx, name)
	switch {
	case errors.Is(err, invoke.ErrNoOutput):
		return nil, fmt.Errorf("%w: %s", ErrNoOutput, name)
	case errors.Is(err, invoke.ErrNoExecutor):
		return nil, fmt.Errorf("%w: no executor to read output %s", ErrNoExecutor, name)
	case err != nil:
		return nil, fmt.Errorf("toolbus: %w", err)
	}
	return r, nil
}
