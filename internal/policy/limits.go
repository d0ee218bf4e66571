package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// LimitsQuery is the rule that names the limits a call is held to: a set
// of limit objects, evaluated with the decision on the same input (one
// evaluation), so a cached decision keeps its limits. A policy set
// without it holds no call to a limit. policy/README.md documents the
// shape.
const LimitsQuery = "data.toolbus.limits"

// Bounds of what a limit may ask for.
const (
	// MaxLimitPer is the longest interval a rate may be counted over:
	// the counters on the bus are kept a little longer than that.
	MaxLimitPer = 24 * time.Hour
	minLimitPer = time.Second
	// MaxQueueWait is the longest a call may wait in a queue.
	MaxQueueWait = 10 * time.Minute
	maxQueue     = 10000
	maxLimitName = 128
	maxLimitKey  = 1024
)

// Limit is one limit a call is held to, as LimitsQuery named it.
// Exactly one of Calls, Bytes and Concurrent is set.
type Limit struct {
	// Name is the policy's name for it, told to the caller.
	Name string
	// ID is the counter's name on the bus: a hash of what the limit
	// counts (its kind, name, interval and key), one subject token. Keys
	// are built from what callers choose, and may hold any bytes.
	ID string
	// Calls and Bytes (of arguments) are allowed per interval Per.
	Calls, Bytes int64
	Per          time.Duration
	// Exact asks that a rate hold exactly across the fleet: counted on
	// the bus, one round trip a call, instead of by each executor from
	// what the others tell it, which may let a few calls past the limit
	// (docs/fleet.md says how many).
	Exact bool
	// Concurrent is how many such calls may run at once.
	Concurrent int
	// Queue, when above 0, is how many calls may wait for a slot, each
	// at most QueueWait, instead of being refused at once.
	Queue     int
	QueueWait time.Duration
}

// limitsOf reads the value of LimitsQuery (a set or an array of limit
// objects). Anything else, or any field it does not know, is an error:
// a limit the policy meant must never be dropped silently.
func limitsOf(v ast.Value) ([]Limit, error) {
	var items []*ast.Term
	switch v := v.(type) {
	case ast.Set:
		sorted := v.Sorted()
		for i := range sorted.Len() {
			items = append(items, sorted.Elem(i))
		}
	case *ast.Array:
		for i := range v.Len() {
			items = append(items, v.Elem(i))
		}
	default:
		return nil, fmt.Errorf("%s is not a set of limits", LimitsQuery)
	}
	out := make([]Limit, 0, len(items))
	for _, it := range items {
		l, err := limitOf(it.Value)
		if err != nil {
			return nil, fmt.Errorf("%s holds %s: %v", LimitsQuery, it, err)
		}
		out = append(out, l)
	}
	return out, nil
}

func limitOf(v ast.Value) (Limit, error) {
	var l Limit
	o, ok := v.(ast.Object)
	if !ok {
		return l, fmt.Errorf("a limit is an object")
	}
	var key []string
	var per string
	var queue ast.Object
	exact := false
	kinds := 0
	for _, k := range o.Keys() {
		name, _ := k.Value.(ast.String)
		val := o.Get(k).Value
		var err error
		switch string(name) {
		case "name":
			s, ok := val.(ast.String)
			if !ok || s == "" || len(s) > maxLimitName {
				return l, fmt.Errorf("name must be a string of 1 to %d bytes", maxLimitName)
			}
			l.Name = string(s)
		case "key":
			if key, err = keyOf(val); err != nil {
				return l, err
			}
		case "calls":
			kinds++
			l.Calls, err = positive(val, "calls")
		case "bytes":
			kinds++
			l.Bytes, err = positive(val, "bytes")
		case "concurrent":
			kinds++
			var n int64
			n, err = positive(val, "concurrent")
			l.Concurrent = int(min(n, maxQueue))
		case "per":
			s, ok := val.(ast.String)
			if !ok {
				return l, fmt.Errorf("per must be a duration such as \"1m\"")
			}
			per = string(s)
		case "queue":
			if queue, ok = val.(ast.Object); !ok {
				return l, fmt.Errorf("queue must be an object {\"max\": N, \"wait\": \"30s\"}")
			}
		case "exact":
			b, ok := val.(ast.Boolean)
			if !ok {
				return l, fmt.Errorf("exact must be true or false")
			}
			exact = bool(b)
		default:
			return l, fmt.Errorf("unknown field %s", k)
		}
		if err != nil {
			return l, err
		}
	}
	switch {
	case l.Name == "":
		return l, fmt.Errorf("a limit needs a name")
	case key == nil:
		return l, fmt.Errorf("a limit needs a key (a string, or an array of strings)")
	case kinds != 1:
		return l, fmt.Errorf("a limit sets exactly one of calls, bytes and concurrent")
	}
	if l.Concurrent > 0 {
		if per != "" {
			return l, fmt.Errorf("per is for calls and bytes, not concurrent")
		}
		if exact {
			return l, fmt.Errorf("exact is for calls and bytes: calls at once are counted exactly always")
		}
		if queue != nil {
			if err := l.queueOf(queue); err != nil {
				return l, err
			}
		}
	} else {
		if queue != nil {
			return l, fmt.Errorf("queue is for concurrent limits")
		}
		d, err := time.ParseDuration(per)
		if err != nil || d < minLimitPer || d > MaxLimitPer {
			return l, fmt.Errorf("per must be a duration from %s to %s, such as \"1m\"", minLimitPer, MaxLimitPer)
		}
		l.Per, l.Exact = d, exact
	}
	l.ID = limitID(&l, key)
	return l, nil
}

func (l *Limit) queueOf(q ast.Object) error {
	for _, k := range q.Keys() {
		name, _ := k.Value.(ast.String)
		val := q.Get(k).Value
		switch string(name) {
		case "max":
			n, err := positive(val, "queue.max")
			if err != nil {
				return err
			}
			l.Queue = int(min(n, maxQueue))
		case "wait":
			s, _ := val.(ast.String)
			d, err := time.ParseDuration(string(s))
			if err != nil || d <= 0 || d > MaxQueueWait {
				return fmt.Errorf("queue.wait must be a duration above 0 and at most %s, such as \"30s\"", MaxQueueWait)
			}
			l.QueueWait = d
		default:
			return fmt.Errorf("unknown field queue.%s", k)
		}
	}
	if l.Queue == 0 || l.QueueWait == 0 {
		return fmt.Errorf("queue needs max and wait")
	}
	return nil
}

// keyOf reads a limit's key: a string, or an array of strings, kept
// apart so that no choice of a caller's names makes two keys one.
func keyOf(v ast.Value) ([]string, error) {
	bad := fmt.Errorf("key must be a string, or an array of strings, of at most %d bytes", maxLimitKey)
	var key []string
	switch v := v.(type) {
	case ast.String:
		key = []string{string(v)}
	case *ast.Array:
		key = make([]string, 0, v.Len())
		for i := range v.Len() {
			s, ok := v.Elem(i).Value.(ast.String)
			if !ok {
				return nil, bad
			}
			key = append(key, string(s))
		}
	default:
		return nil, bad
	}
	n := 0
	for _, s := range key {
		n += len(s)
	}
	if n > maxLimitKey {
		return nil, bad
	}
	return key, nil
}

func positive(v ast.Value, name string) (int64, error) {
	n, ok := v.(ast.Number)
	if !ok {
		return 0, fmt.Errorf("%s must be a whole number above 0", name)
	}
	i, ok := n.Int64()
	if !ok || i < 1 {
		return 0, fmt.Errorf("%s must be a whole number above 0", name)
	}
	return i, nil
}

// limitID is the counter of l for key: every field that makes a count
// its own, hashed, so that a change of interval or kind starts another.
func limitID(l *Limit, key []string) string {
	kind := "concurrent"
	switch {
	case l.Calls > 0:
		kind = "calls"
	case l.Bytes > 0:
		kind = "bytes"
	}
	k, _ := json.Marshal(key) // strings only: cannot fail
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", kind, strconv.Quote(l.Name), l.Per)
	h.Write(k)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18])
}
