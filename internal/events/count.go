package events

import (
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
)

// CountSubject carries Counted: what one executor counted, told to every
// other (internal/counters). Executors alone may publish and hear it:
// a count anyone else could send would push a caller over its budgets,
// or one it could hear would show who calls what, and when.
const CountSubject = "toolbus.count"

// Counted is what an executor counted for one call, published at once
// and waited for by nobody: each executor adds what the others count to
// its own view of the fleet's counts. It is not an envelope (no id, no
// time): a call sends one, so it is kept small.
type Counted struct {
	// V is CountVersion.
	V int `json:"v"`
	// From names the counting executor's counters, one name per start:
	// an executor skips its own, which the bus echoes back to it.
	From string `json:"from"`
	// Adds are the increments, at most MaxCountAdds.
	Adds []CountAdd `json:"adds"`
}

// CountAdd adds N to the count of Key.
type CountAdd struct {
	// Key names the count: what it counts and its window, in letters,
	// digits, '.', '_' and '-' (hashes, never a caller's names).
	Key string `json:"k"`
	// N is the increment; negative where a refused call is taken back.
	N int64 `json:"n"`
	// Until is when the count may be forgotten, in Unix milliseconds:
	// the end of its window, or of a session left idle.
	Until int64 `json:"until"`
}

// Bounds of a Counted.
const (
	CountVersion = 1
	MaxCountAdds = 16
	MaxCountKey  = 128
	MaxCountFrom = 256
	// MaxCountN bounds an increment: far above any count (a call's bytes
	// of arguments are bounded by the bus's message size).
	MaxCountN = 1 << 40
)

// EncodeCounted encodes c; it does not check it.
func EncodeCounted(c *Counted) ([]byte, error) { return jsonv2.Marshal(c) }

// DecodeCounted reads a Counted and checks it against the bounds above:
// anything else is an error (ErrMalformed, ErrVersion or ErrInvalid),
// never a count.
func DecodeCounted(data []byte) (*Counted, error) {
	var c Counted
	if err := jsonv2.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if c.V != CountVersion {
		return nil, fmt.Errorf("%w: count version %d", ErrVersion, c.V)
	}
	if c.From == "" || len(c.From) > MaxCountFrom {
		return nil, fmt.Errorf("%w: a count's sender has 1 to %d bytes", ErrInvalid, MaxCountFrom)
	}
	if len(c.Adds) == 0 || len(c.Adds) > MaxCountAdds {
		return nil, fmt.Errorf("%w: a count holds 1 to %d increments", ErrInvalid, MaxCountAdds)
	}
	for _, a := range c.Adds {
		if !ValidCountKey(a.Key) {
			return nil, fmt.Errorf("%w: count key %q", ErrInvalid, a.Key)
		}
		if a.N == 0 || a.N > MaxCountN || a.N < -MaxCountN {
			return nil, fmt.Errorf("%w: increment %d", ErrInvalid, a.N)
		}
		if a.Until <= 0 {
			return nil, fmt.Errorf("%w: a count's end %d", ErrInvalid, a.Until)
		}
	}
	return &c, nil
}

// ValidCountKey reports whether k may name a count.
func ValidCountKey(k string) bool {
	if k == "" || len(k) > MaxCountKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
