// Package notify tells a webhook about every confirmation request that
// waits for a person: one signed JSON POST per request, with a link to
// that request in the web console, retried with backoff while the
// request still waits.
//
// A notifier only reads: it follows the requests through a Source (an
// approve.Approver's Snapshot) and holds no seat of its own, so it never
// makes an approver present and never answers. A webhook is not a
// person: a call waits only while an approver is present, as before, and
// is approved only in a signed-in console or terminal. What a delivery
// does or fails to do changes nothing for the call.
//
// A payload carries what a person needs to decide whether to go and look
// (tool, kind, caller, the policy's reason, until when it waits, the
// link), never the call's arguments, command or diff: those may hold
// secrets, and a webhook's receiver (a chat channel, a pager) is seen by
// more people, and kept longer, than the console that shows them.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
)

// The headers of a delivery.
const (
	// HeaderDelivery is the delivery's id, the same for every attempt
	// of one request's notification (and in the body as "id"), so that
	// a receiver can drop a repeat.
	HeaderDelivery = "X-Toolbus-Delivery"
	// HeaderTimestamp is when the attempt was sent, in Unix seconds.
	// It is signed with the body, so that a receiver can refuse an old
	// delivery replayed.
	HeaderTimestamp = "X-Toolbus-Timestamp"
	// HeaderSignature is "sha256=" and the hex of HMAC-SHA256 under the
	// shared secret of the timestamp, a ".", and the body.
	HeaderSignature = "X-Toolbus-Signature"
	// HeaderAttempt counts the attempts of one delivery from 1. It is
	// not signed: it informs, and nothing should depend on it.
	HeaderAttempt = "X-Toolbus-Attempt"
)

// EventWaiting is the event of a payload: a call waits for a person.
const EventWaiting = "confirm.waiting"

// Defaults of Config.
const (
	DefaultAttempts   = 5
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 30 * time.Second
	DefaultTimeout    = 10 * time.Second
	DefaultQueue      = 256
	DefaultWorkers    = 4
	// MinSecret is the shortest secret accepted, in bytes: a short one
	// could be found by trying.
	MinSecret = 16
)

// Config configures a Notifier.
type Config struct {
	// URL is where deliveries are POSTed: http or https. Required.
	URL string
	// Secret signs every delivery (HeaderSignature); at least MinSecret
	// bytes. Required. ReadSecret reads one from a file.
	Secret []byte
	// Console is the web console's base address (console.BaseURL): the
	// link of a payload is it with "#request=" and the request's
	// answerTo. Empty: payloads carry no link.
	Console string
	// Attempts bounds the tries of one delivery (default
	// DefaultAttempts). A delivery is tried again after a network
	// error, a timeout, or a 408, 429 or 5xx answer; any other answer
	// but 2xx ends it.
	Attempts int
	// Backoff is the wait before the second attempt, doubled before
	// each further one up to MaxBackoff, with jitter (defaults
	// DefaultBackoff, DefaultMaxBackoff). A Retry-After the receiver
	// sends is honoured up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Timeout bounds one attempt (default DefaultTimeout).
	Timeout time.Duration
	// Queue bounds the deliveries waiting for a worker (default
	// DefaultQueue): past it a new request is not notified, and
	// counted (Stats.Dropped), so that a flood of requests cannot grow
	// memory without end.
	Queue int
	// Workers is how many deliveries are made at once (default
	// DefaultWorkers).
	Workers int
	// Client sends the deliveries; nil: one that follows no redirect
	// (a redirect is an answer that is not 2xx: the signed body goes
	// to the configured URL and nowhere else).
	Client *http.Client
	Logger *slog.Logger
}

// Validate reports what is wrong with cfg.
func (cfg Config) Validate() error {
	u, err := url.Parse(cfg.URL)
	switch {
	case cfg.URL == "":
		return errors.New("notify: no webhook URL")
	case err != nil:
		return fmt.Errorf("notify: webhook URL: %w", err)
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("notify: webhook URL %q: want http:// or https:// and a host", cfg.URL)
	case len(cfg.Secret) < MinSecret:
		return fmt.Errorf("notify: the webhook secret is %d bytes; at least %d are needed", len(cfg.Secret), MinSecret)
	case cfg.Console != "":
		if c, err := url.Parse(cfg.Console); err != nil || (c.Scheme != "http" && c.Scheme != "https") || c.Host == "" {
			return fmt.Errorf("notify: console address %q: want http:// or https:// and a host", cfg.Console)
		}
	}
	return nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.Backoff)
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// ReadSecret reads a webhook secret from the file path: its contents,
// without surrounding white space. It refuses a file that anyone but its
// owner may read or write (the secret lets whoever holds it sign
// deliveries a receiver believes), and a secret shorter than MinSecret.
func ReadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("webhook secret %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("webhook secret %s may be read or written by others (mode %04o): run chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	secret := bytes.TrimSpace(data)
	if len(secret) < MinSecret {
		return nil, fmt.Errorf("webhook secret %s holds %d bytes; at least %d are needed (head -c 32 /dev/urandom | base64 > %s)", path, len(secret), MinSecret, path)
	}
	return secret, nil
}

// Source is where a notifier reads the confirmation requests: an
// approve.Approver. It is read only: nothing is answered through it, and
// nothing made present.
type Source interface {
	Snapshot() (approve.State, <-chan struct{})
}

var _ Source = (*approve.Approver)(nil)

// Payload is the JSON body of a delivery.
type Payload struct {
	// ID is the delivery's id, the same as HeaderDelivery: the
	// request's envelope id.
	ID string `json:"id"`
	// Event is EventWaiting.
	Event string `json:"event"`
	// AnswerTo is the request's own token, which names it in the
	// console and in `toolbus confirm --json`.
	AnswerTo     string          `json:"answerTo"`
	InvocationID string          `json:"invocationId"`
	Tool         string          `json:"tool"`
	Server       string          `json:"server,omitempty"`
	Kind         events.Kind     `json:"kind"`
	Caller       events.Identity `json:"caller"`
	// Reason is the policy's reason for asking.
	Reason string `json:"reason"`
	// RequestedAt is when the executor asked; WaitsUntil when it stops
	// waiting (zero: no deadline was given).
	RequestedAt time.Time `json:"requestedAt"`
	WaitsUntil  time.Time `json:"waitsUntil,omitzero"`
	// Link opens the console at this request; empty when the notifier
	// knows no console. Following it approves nothing: the console asks
	// its sign-in first.
	Link string `json:"link,omitempty"`
}

// Stats counts what a notifier did; every field only grows.
type Stats struct {
	// Delivered: deliveries a receiver took (2xx).
	Delivered int64
	// Failed: deliveries given up, refused or out of attempts.
	Failed int64
	// Ended: deliveries stopped because the request no longer waits
	// (answered, closed, past its deadline).
	Ended int64
	// Dropped: requests not notified because the queue was full.
	Dropped int64
	// Attempts: POSTs sent.
	Attempts int64
}

// Notifier delivers a payload for each pending request of a Source. It
// is safe for concurrent use; Run drives it.
type Notifier struct {
	cfg Config
	log *slog.Logger

	delivered, failed, ended, dropped, attempts atomic.Int64
	droppedLogged                               atomic.Bool
}

// New validates cfg and returns a notifier; nothing runs before Run.
func New(cfg Config) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Notifier{cfg: cfg, log: cfg.Logger}, nil
}

// Stats returns the counts so far.
func (n *Notifier) Stats() Stats {
	return Stats{Delivered: n.delivered.Load(), Failed: n.failed.Load(), Ended: n.ended.Load(),
		Dropped: n.dropped.Load(), Attempts: n.attempts.Load()}
}

// delivery is the notification of one request, until it is delivered,
// given up, or the request stops waiting (ctx ends).
type delivery struct {
	ctx    context.Context
	cancel context.CancelFunc
	body   []byte
	id     string
}

// Run follows src and delivers a payload for each request that waits,
// until ctx ends; it returns once every delivery in flight has stopped.
// Requests that were pending when it started are notified too, unless
// past their deadline.
func (n *Notifier) Run(ctx context.Context, src Source) {
	queue := make(chan *delivery, n.cfg.Queue)
	var workers sync.WaitGroup
	for range n.cfg.Workers {
		workers.Go(func() {
			for {
				select {
				case d := <-queue:
					n.deliver(ctx, d)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	n.watch(ctx, src, queue)
	workers.Wait()
}

// watch queues a delivery for each request that newly waits, and stops
// the delivery of each that no longer does, until ctx ends.
func (n *Notifier) watch(ctx context.Context, src Source, queue chan<- *delivery) {
	// The deliveries of the requests pending at the last look, by
	// answerTo: a request leaves the map when it stops waiting, so the
	// map is as large as the approver's queue and no larger.
	tracked := map[string]*delivery{}
	defer func() {
		for _, d := range tracked {
			if d != nil {
				d.cancel()
			}
		}
	}()
	for {
		state, changed := src.Snapshot()
		now := time.Now()
		waiting := make(map[string]bool, len(state.Pending))
		for _, r := range state.Pending {
			waiting[r.AnswerTo] = true
			if _, ok := tracked[r.AnswerTo]; ok || r.AnswerTo == "" {
				continue
			}
			d := n.newDelivery(ctx, r)
			tracked[r.AnswerTo] = d
			if d == nil || d.ctx.Err() != nil || (r.DeadlineMillis > 0 && !now.Before(r.Deadline)) {
				continue // past its deadline already: nobody can answer it
			}
			select {
			case queue <- d:
			default:
				d.cancel()
				n.dropped.Add(1)
				if !n.droppedLogged.Swap(true) {
					n.log.Warn("notify: the webhook's queue is full: requests are not notified, and counted as dropped", "queue", n.cfg.Queue, "url", n.cfg.URL)
				}
			}
		}
		for k, d := range tracked {
			if !waiting[k] {
				if d != nil {
					d.cancel()
				}
				delete(tracked, k)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// newDelivery makes the delivery of r: its payload, and a context that
// ends with ctx, at r's deadline, or when cancelled. Nil when the
// payload does not encode (it is logged).
func (n *Notifier) newDelivery(ctx context.Context, r approve.Request) *delivery {
	p := Payload{ID: r.ID, Event: EventWaiting, AnswerTo: r.AnswerTo, InvocationID: r.InvocationID, Tool: r.Tool, Server: r.Server,
		Kind: r.Kind, Caller: r.Caller, Reason: r.Reason, RequestedAt: r.Time}
	if r.DeadlineMillis > 0 {
		p.WaitsUntil = r.Deadline
	}
	if n.cfg.Console != "" {
		p.Link = Link(n.cfg.Console, r.AnswerTo)
	}
	body, err := json.Marshal(p)
	if err != nil {
		n.log.Warn("notify: a request's payload does not encode", "answerTo", r.AnswerTo, "err", err)
		return nil
	}
	d := &delivery{body: body, id: r.ID}
	if r.DeadlineMillis > 0 {
		d.ctx, d.cancel = context.WithDeadline(ctx, r.Deadline)
	} else {
		d.ctx, d.cancel = context.WithCancel(ctx)
	}
	return d
}

// Link is the address of the request answerTo in the console at base:
// the page selects that request once signed in. The request is named in
// the fragment, which the browser sends to no server.
func Link(base, answerTo string) string {
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	return base + "#request=" + url.QueryEscape(answerTo)
}

// deliver tries d until it is delivered, refused, out of attempts, or
// its request stops waiting; stop ends it at once (the notifier stops).
func (n *Notifier) deliver(stop context.Context, d *delivery) {
	defer d.cancel()
	for attempt := 1; ; attempt++ {
		retry, after, err := n.post(d, attempt)
		if err == nil {
			n.delivered.Add(1)
			return
		}
		if d.ctx.Err() != nil {
			n.stopped(stop)
			return
		}
		if !retry || attempt >= n.cfg.Attempts {
			n.failed.Add(1)
			n.log.Warn("notify: the webhook did not take a delivery; giving up", "url", n.cfg.URL, "delivery", d.id, "attempts", attempt, "err", err)
			return
		}
		n.log.Debug("notify: the webhook did not take a delivery; trying again", "url", n.cfg.URL, "delivery", d.id, "attempt", attempt, "err", err)
		wait := n.backoff(attempt, after)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
			n.stopped(stop)
			return
		}
	}
}

// stopped counts a delivery that stopped because its request no longer
// waits; one stopped because the notifier stops counts for nothing.
func (n *Notifier) stopped(stop context.Context) {
	if stop.Err() == nil {
		n.ended.Add(1)
	}
}

// backoff is the wait after attempt (1 for the first): the receiver's
// Retry-After when it gave one, else Backoff doubled per attempt, both
// at most MaxBackoff, less up to half at random, so that the deliveries
// of many requests that failed together do not come back together.
func (n *Notifier) backoff(attempt int, after time.Duration) time.Duration {
	if after > 0 {
		return min(after, n.cfg.MaxBackoff)
	}
	d := n.cfg.Backoff
	for i := 1; i < attempt && d < n.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, n.cfg.MaxBackoff)
	return d - rand.N(d/2+1)
}

// errStatus is a receiver's answer that is not 2xx.
type errStatus struct{ code int }

func (e errStatus) Error() string {
	return "the webhook answered " + http.StatusText(e.code) + " (" + strconv.Itoa(e.code) + ")"
}

// post sends one attempt of d, signed now. retry says whether another
// attempt may succeed; after is the wait the receiver asked for.
func (n *Notifier) post(d *delivery, attempt int) (retry bool, after time.Duration, err error) {
	ctx, cancel := context.WithTimeout(d.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(d.body))
	if err != nil {
		return false, 0, err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolbus-webhook/1")
	req.Header.Set(HeaderDelivery, d.id)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(n.cfg.Secret, ts, d.body))
	req.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	n.attempts.Add(1)
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return true, 0, err
	}
	// Read a little of the body, so that the connection can serve the
	// next delivery; a receiver has nothing to say in it.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return false, 0, nil
	}
	code := resp.StatusCode
	retry = code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		after = time.Duration(s) * time.Second
	}
	return retry, after, errStatus{code}
}

// Sign is the HeaderSignature of body sent at timestamp (Unix seconds,
// as in HeaderTimestamp) under secret: "sha256=" and the hex of
// HMAC-SHA256 of timestamp + "." + body.
func Sign(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
