package events

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nuid"
)

// Version is the envelope version this build writes and accepts. A reader
// refuses any other version with ErrVersion rather than guessing.
const Version = 1

// Sentinel errors a caller can branch on with errors.Is.
var (
	// ErrMalformed: the bytes are not a JSON object of the expected shape.
	ErrMalformed = errors.New("malformed envelope")
	// ErrVersion: the envelope has a version this build does not speak.
	ErrVersion = errors.New("unsupported envelope version")
	// ErrType: the envelope is well formed but of another type than expected.
	ErrType = errors.New("unexpected envelope type")
	// ErrInvalid: the envelope decoded but a field breaks the contract.
	ErrInvalid = errors.New("invalid envelope")
)

// Identity names who sent an envelope. Every envelope carries one, so the
// audit trail says who did what, and so a policy can judge the caller.
type Identity struct {
	// ID is the principal: a stable name of the process or person, for
	// example "registry@build-7" or "agent:gemini-cli".
	ID string `json:"id"`
	// Role is what the sender is acting as: agent, cli, registry, executor,
	// provider, approver.
	Role string `json:"role,omitempty"`
	// Agent, Session and User narrow down a caller inside a fleet.
	Agent   string `json:"agent,omitempty"`
	Session string `json:"session,omitempty"`
	User    string `json:"user,omitempty"`
	// Host is the machine the sender runs on.
	Host string `json:"host,omitempty"`
	// Client is the program the caller speaks through, as it names
	// itself: an MCP client's name/version from its initialize request
	// ("gemini-cli-mcp-client/0.61.0").
	Client string `json:"client,omitempty"`
	// Proven is set by the executor, never by the sender: the bus
	// vouched that the message came from the identity ID names (see
	// Caller). Whatever a sender puts here is overwritten.
	Proven bool `json:"proven,omitempty"`
	// Principal is set with Proven, by the executor: the principal the
	// bus proved, or, for a client of the MCP facade, "facade/<client>",
	// which the bus proves to be the facade's word (ClientPrincipal).
	// Limits, bounds and budgets are keyed on it. Empty when not proven.
	Principal string `json:"principal,omitempty"`
}

// Header is the part every envelope shares.
type Header struct {
	V      int       `json:"v"`
	Type   string    `json:"type"`
	ID     string    `json:"id"`
	Time   time.Time `json:"time"`
	Sender Identity  `json:"sender"`
	// Principal is set by an executor on the events it records about a
	// call (decisions, steps, hook runs, confirmations and their ends,
	// results): the principal token of the call's caller, read from the
	// subject the invocation came on. Invocation ids are unique per
	// principal only, so a reader (the audit join, an approver) tells
	// two principals' calls of one id apart by it. Only executors may
	// publish those subjects; on any other envelope it is a claim and
	// nothing reads it.
	Principal string `json:"principal,omitempty"`
	// Call is set by an executor beside Principal: the id the executor
	// that accepted the call minted for it (NewCapability), which names
	// that one call and no other, whatever id its caller chose. The
	// audit trail joins a call's events by it; ID and InvocationID stay
	// the caller's own key, scoped to its principal, which it cancels
	// and watches the call by.
	Call string `json:"call,omitempty"`
	// Trace is set by an executor beside Call when it traces the call:
	// the W3C traceparent of the call's execute_tool span
	// (docs/tracing.md), which takes an auditor from the event to the
	// call's trace.
	Trace string `json:"trace,omitempty"`
}

func (h *Header) header() *Header { return h }

// Envelope is implemented by every message type in this package.
type Envelope interface {
	// EnvelopeType is the value of the "type" field for this envelope.
	EnvelopeType() string
	// Validate reports a contract violation as an error wrapping ErrInvalid.
	Validate() error
	header() *Header
}

// Stamp fills in the header of e: version, type, a fresh id and the time,
// keeping an id or time the caller already set. The sender is left to the
// caller, since only it knows who it is.
func Stamp(e Envelope) {
	h := e.header()
	h.V = Version
	h.Type = e.EnvelopeType()
	if h.ID == "" {
		// A correlation id: envelopes are found by it, never authorized
		// by it (see NewCapability).
		h.ID = nuid.Next()
	}
	if h.Time.IsZero() {
		h.Time = time.Now().UTC()
	}
}

// Encode stamps e, checks it against the contract and returns its JSON form.
// It writes what encoding/json writes (the golden files hold it to that),
// through the faster JSON v2 implementation.
func Encode(e Envelope) ([]byte, error) {
	Stamp(e)
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return jsonv2.Marshal(e, encodeOptions)
}

var encodeOptions = jsonv2.JoinOptions(jsonv1.OmitEmptyWithLegacySemantics(true), jsontext.AllowInvalidUTF8(true), jsontext.EscapeForHTML(true))

// Decode parses data as an envelope of type *T. It never panics on any
// input; every failure wraps one of ErrMalformed, ErrVersion, ErrType or
// ErrInvalid and says what was wrong.
//
// It uses the JSON v2 decoder, which is faster and stricter than
// encoding/json: field names match exactly, and a duplicate field or
// invalid UTF-8 is an error rather than something to guess about.
func Decode[T any, PT interface {
	*T
	Envelope
}](data []byte) (PT, error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	// One parse on the way that matters: a well-formed envelope of the
	// right type. Only when that fails is the header read on its own, to
	// say whether the version or the type is what is wrong.
	var want PT = new(T)
	decodeErr := jsonv2.Unmarshal(data, want)
	if decodeErr != nil {
		var probe struct {
			V    *int    `json:"v"`
			Type *string `json:"type"`
		}
		if err := jsonv2.Unmarshal(data, &probe); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		h := want.header()
		h.V, h.Type = 0, ""
		if probe.V != nil {
			h.V = *probe.V
		}
		if probe.Type != nil {
			h.Type = *probe.Type
		}
	}
	h := want.header()
	switch {
	case h.V == 0:
		return nil, fmt.Errorf("%w: no \"v\" field (or v is 0)", ErrMalformed)
	case h.V != Version:
		return nil, fmt.Errorf("%w: got v=%d, this build speaks v=%d", ErrVersion, h.V, Version)
	case h.Type == "":
		return nil, fmt.Errorf("%w: no \"type\" field", ErrMalformed)
	case h.Type != want.EnvelopeType():
		return nil, fmt.Errorf("%w: got %q, want %q", ErrType, h.Type, want.EnvelopeType())
	case decodeErr != nil:
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, want.EnvelopeType(), decodeErr)
	}
	if err := want.Validate(); err != nil {
		return nil, err
	}
	return want, nil
}

func (h *Header) validate() error {
	if h.ID == "" {
		return invalid(h.Type, "id is empty")
	}
	if h.Sender.ID == "" {
		return invalid(h.Type, "sender.id is empty")
	}
	return nil
}

// validateAbout validates the header of an event about one call, of type
// typ, and that it names the call.
func (h *Header) validateAbout(typ, invocationID string) error {
	if err := h.validate(); err != nil {
		return err
	}
	if invocationID == "" {
		return invalid(typ, "invocationId is empty")
	}
	return nil
}

func invalid(typ, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, typ, fmt.Sprintf(format, args...))
}
