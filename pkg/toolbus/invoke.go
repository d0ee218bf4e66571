package toolbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// flushTimeout bounds a flush when the caller's context has no deadline.
const flushTimeout = 10 * time.Second

// CallOption configures one Invoke.
type CallOption func(*callConfig)

type callConfig struct {
	id        string
	progress  func(string)
	timeout   time.Duration
	workspace string
}

// WithInvocationID makes the call under id instead of a fresh unique one,
// so that it can be cancelled (Cancel) or its output read (ReadOutput)
// from elsewhere. An id is the caller's once: an executor refuses a
// second call under an id this principal used before (INVOCATION_ID_REUSED).
func WithInvocationID(id string) CallOption { return func(c *callConfig) { c.id = id } }

// WithProgress hands fn the tool's output as it is produced, in order,
// before Invoke returns. fn runs on the calling goroutine's behalf and
// must not block for long: the call waits for it.
func WithProgress(fn func(chunk string)) CallOption { return func(c *callConfig) { c.progress = fn } }

// WithWorkspace names the workspace a file or shell tool acts on, as its
// executors name it (executor --workspace-name). Without it the call goes
// to the one workspace there is, and is refused when there are several.
func WithWorkspace(name string) CallOption { return func(c *callConfig) { c.workspace = name } }

// WithTimeout asks the executor to stop the call after d (within the
// fleet's maximum) and report ErrTimeout. The context's deadline bounds
// the wait too; this one lets the executor say why.
func WithTimeout(d time.Duration) CallOption { return func(c *callConfig) { c.timeout = d } }

// Invoke calls the tool name (a catalogue name, alias or export name)
// with args, a JSON object: a json.RawMessage or []byte is sent as it is,
// nil sends none, anything else is encoded with encoding/json.
//
// Whenever the call was made, Invoke returns its Result. When the call
// failed — denied by the policy, refused by a person, timed out, or the
// tool itself failed — the Result has Error set and Invoke returns that
// same *ToolError as its error, so that errors.Is(err, ErrPolicyDenied)
// works and the failure text a model should see is still in
// res.LLMContent. A nil Result means the call could not be made, and
// nothing ran: arguments that are not a JSON object (the error then
// matches ErrInvalidParams too, though it is no *ToolError), or no
// connection.
//
// When ctx ends first the call is cancelled on the executor and the
// result is ErrCancelled, or ErrTimeout for a deadline. When ctx carries
// an OpenTelemetry span, the call is its child: the executor's spans join
// the caller's trace (docs/tracing.md).
func (c *Client) Invoke(ctx context.Context, name string, args any, opts ...CallOption) (*Result, error) {
	var cfg callConfig
	for _, o := range opts {
		o(&cfg)
	}
	raw, err := encodeArgs(args)
	if err != nil {
		return nil, err
	}
	if cfg.timeout < 0 {
		return nil, fmt.Errorf("toolbus: negative timeout %s", cfg.timeout)
	}
	inv := &events.Invocation{Header: events.Header{ID: cfg.id}, Tool: c.toolName(ctx, name), Args: raw, Workspace: cfg.workspace}
	if cfg.timeout > 0 {
		inv.TimeoutMillis = max(cfg.timeout.Milliseconds(), 1)
	}
	res, err := c.inv.Invoke(ctx, inv, cfg.progress)
	if err != nil {
		return nil, fmt.Errorf("toolbus: invoke %s: %w", name, err)
	}
	out := resultFrom(res)
	return out, out.Err()
}

// catalogWait bounds how long a call waits for the catalogue replica to
// map its tool's name; it then goes on with the name as given (a fleet
// test caught calls waiting two minutes, their deadline, for a replica
// started on a node killed meanwhile).
const catalogWait = 5 * time.Second

// toolName maps an export name to the catalogue name. A name the
// catalogue replica does not know, or a bus without a catalogue, leaves
// the name as given: the executor then answers, with TOOL_NOT_FOUND and
// the closest names when it knows none either.
func (c *Client) toolName(ctx context.Context, name string) string {
	// Bounded: a replica whose start hangs (its bus node went while it
	// was being opened) must not spend the call's whole deadline.
	ctx, cancel := context.WithTimeout(ctx, catalogWait)
	defer cancel()
	cat, err := c.catalog(ctx)
	if err != nil {
		return name
	}
	if n, ok := resolve(cat, name); ok {
		return n
	}
	return name
}

func encodeArgs(args any) (json.RawMessage, error) {
	var raw []byte
	switch a := args.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return nil, fmt.Errorf("toolbus: %w: encode arguments: %w", ErrInvalidParams, err)
		}
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return nil, fmt.Errorf("toolbus: %w: arguments are not a JSON object", ErrInvalidParams)
	}
	return json.RawMessage(raw), nil
}

// Call is one call of a batch.
type Call struct {
	// Tool is a catalogue name, alias or export name.
	Tool string
	// Args are the arguments, as Invoke takes them. A string argument
	// whose whole value is "$previous" or "$stepN" (N from 0) is replaced
	// by that earlier call's LLMContent before the call runs.
	Args any
	// Timeout, when set, is the call's own deadline on the executor.
	Timeout time.Duration
}

// BatchOption configures InvokeBatch.
type BatchOption func(*batchConfig)

type batchConfig struct{ abortOnError bool }

// AbortOnError stops the calls after the first one that fails; they end
// with ErrCancelled.
func AbortOnError() BatchOption { return func(b *batchConfig) { b.abortOnError = true } }

// InvokeBatch runs calls in one request: consecutive calls of tools that
// are safe to run together run in parallel, the rest in order. It returns
// one Result per call, in order; a failed call is a Result with Error
// set, never the error return, which means the batch could not be made.
func (c *Client) InvokeBatch(ctx context.Context, calls []Call, opts ...BatchOption) ([]*Result, error) {
	var cfg batchConfig
	for _, o := range opts {
		o(&cfg)
	}
	b := &events.BatchInvocation{AbortOnError: cfg.abortOnError}
	for i, call := range calls {
		raw, err := encodeArgs(call.Args)
		if err != nil {
			return nil, fmt.Errorf("call %d: %w", i, err)
		}
		if call.Timeout < 0 {
			return nil, fmt.Errorf("toolbus: call %d: negative timeout", i)
		}
		bc := events.BatchCall{Tool: c.toolName(ctx, call.Tool), Args: raw}
		if call.Timeout > 0 {
			bc.TimeoutMillis = max(call.Timeout.Milliseconds(), 1)
		}
		b.Calls = append(b.Calls, bc)
	}
	res, err := c.inv.InvokeBatch(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("toolbus: invoke batch: %w", err)
	}
	if len(res.Results) != len(calls) {
		return nil, fmt.Errorf("toolbus: the batch result has %d results for %d calls", len(res.Results), len(calls))
	}
	out := make([]*Result, len(res.Results))
	for i := range res.Results {
		out[i] = resultFrom(&res.Results[i])
	}
	return out, nil
}

// Cancel asks for the call under invocationID to be cancelled, from any
// client: the executor running it stops it, and its caller gets
// ErrCancelled with reason in the message. Cancelling a call that is not
// running does nothing.
func (c *Client) Cancel(ctx context.Context, invocationID, reason string) error {
	if invocationID == "" {
		return errors.New("toolbus: cancel: empty invocation id")
	}
	if err := c.inv.Cancel(ctx, invocationID, reason); err != nil {
		return fmt.Errorf("toolbus: cancel %s: %w", invocationID, err)
	}
	// Flushed, so that a cancel sent right before Close is not lost;
	// FlushWithContext wants a deadline, and the caller may have set none.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, flushTimeout)
		defer cancel()
	}
	return c.nc.FlushWithContext(ctx)
}
