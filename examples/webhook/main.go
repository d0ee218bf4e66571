// Command webhook is an example receiver of toolbus's webhook: it checks
// each delivery's signature and timestamp, drops repeats, and prints who
// waits for what with the link to the request in the console. It uses the
// standard library alone, so that it can be copied into any Go program.
//
//	go run ./examples/webhook --listen 127.0.0.1:9099 --secret-file ~/.config/toolbus/webhook-secret
//	toolbus up --webhook http://127.0.0.1:9099/ --webhook-secret-file ~/.config/toolbus/webhook-secret
//
// Every field but the link may come from a prompt-injected agent (the
// caller's names) or a policy that quotes one: show them as text, and
// take a link only from "link", never from another field.
package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// Tolerance is how far a delivery's timestamp may be from the receiver's
// clock: an older delivery is refused as a replay.
const Tolerance = 5 * time.Minute

// maxBody bounds what a delivery may hold; toolbus's payloads are far
// smaller.
const maxBody = 1 << 20

// Errors of Verify.
var (
	ErrNoSignature  = errors.New("no X-Toolbus-Signature or X-Toolbus-Timestamp")
	ErrBadSignature = errors.New("the signature does not match the body")
	ErrStale        = errors.New("the timestamp is too far from now: a replay, or a clock far off")
)

// Verify checks a delivery: its X-Toolbus-Signature must be
// "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)), with the
// X-Toolbus-Timestamp it was sent at, and that timestamp within tolerance
// of now. The signature is compared in constant time.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sig := h.Get("X-Toolbus-Timestamp"), h.Get("X-Toolbus-Signature")
	if ts == "" || sig == "" {
		return ErrNoSignature
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return ErrBadSignature
	}
	// The timestamp is checked after the signature: it is the sender's
	// only once signed.
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}

// Payload is what a delivery says (docs/approvals.md): a call waits for a
// person.
type Payload struct {
	ID           string    `json:"id"`
	Event        string    `json:"event"`
	AnswerTo     string    `json:"answerTo"`
	InvocationID string    `json:"invocationId"`
	Tool         string    `json:"tool"`
	Server       string    `json:"server"`
	Kind         string    `json:"kind"`
	Caller       Caller    `json:"caller"`
	Reason       string    `json:"reason"`
	RequestedAt  time.Time `json:"requestedAt"`
	WaitsUntil   time.Time `json:"waitsUntil"`
	Link         string    `json:"link"`
}

// Caller is who made the call, as the payload names it.
type Caller struct {
	ID      string `json:"id"`
	Agent   string `json:"agent"`
	Session string `json:"session"`
	User    string `json:"user"`
	Host    string `json:"host"`
}

// Receiver is an http.Handler that takes verified deliveries and hands
// each one to Handle once, however often it is sent.
type Receiver struct {
	Secret []byte
	// Handle is given each new delivery.
	Handle func(Payload)
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time // delivery id -> when taken, for Tolerance
}

// ServeHTTP answers 204 to a delivery it took (or took before), 401 to one
// that does not verify, 400 to one that is not a payload.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "body unreadable or too large", http.StatusBadRequest)
		return
	}
	now := time.Now()
	if rc.Now != nil {
		now = rc.Now()
	}
	if err := Verify(rc.Secret, r.Header, body, now, Tolerance); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil || p.ID == "" {
		http.Error(w, "not a toolbus payload", http.StatusBadRequest)
		return
	}
	if rc.firstTime(p.ID, now) && rc.Handle != nil {
		rc.Handle(p)
	}
	w.WriteHeader(http.StatusNoContent)
}

// firstTime reports whether delivery id is new, and remembers it for as
// long as a copy of it could still verify.
func (rc *Receiver) firstTime(id string, now time.Time) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.seen == nil {
		rc.seen = map[string]time.Time{}
	}
	for k, at := range rc.seen {
		if now.Sub(at) > 2*Tolerance {
			delete(rc.seen, k)
		}
	}
	if _, ok := rc.seen[id]; ok {
		return false
	}
	rc.seen[id] = now
	return true
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9099", "address to listen on")
	secretFile := flag.String("secret-file", "", "file holding the shared secret (as given to toolbus --webhook-secret-file)")
	flag.Parse()
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		log.Fatal(err)
	}
	rc := &Receiver{Secret: bytes.TrimSpace(secret), Handle: func(p Payload) {
		// %q shows control characters an agent put in its names as
		// escapes, not as terminal commands.
		fmt.Printf("%s waits for a person: %q by %q (%q); open %s\n", p.Tool, p.Reason, p.Caller.ID, p.Caller.Agent, p.Link)
	}}
	log.Printf("webhook receiver on http://%s/", *listen)
	srv := &http.Server{Addr: *listen, Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
