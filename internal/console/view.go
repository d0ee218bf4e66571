package console

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/redact"
)

// state is what the page shows: sent whole when a page connects (and on
// GET /api/state), then changed by deltas (see change).
type state struct {
	// Now is the server's clock, so the page counts time left against
	// it rather than against a browser clock that may be off.
	Now       time.Time    `json:"now"`
	Approver  string       `json:"approver"`
	Pending   []request    `json:"pending"`
	Recent    []request    `json:"recent"`
	Allowlist []allowEntry `json:"allowlist"`
}

// request is a confirmation request as the page shows it.
type request struct {
	// Key names the request, and an answer names it: the request's own
	// AnswerTo token. Many requests may share an
	// invocation id, the rounds of a modified call or a caller's reuse.
	Key          string                `json:"key"`
	RequestID    string                `json:"requestId"`
	InvocationID string                `json:"invocationId"`
	Tool         string                `json:"tool"`
	Server       string                `json:"server,omitempty"`
	Kind         events.Kind           `json:"kind"`
	Caller       events.Identity       `json:"caller"`
	Reason       string                `json:"reason"`
	Args         json.RawMessage       `json:"args,omitempty"`
	Diff         string                `json:"diff,omitempty"`
	Command      string                `json:"command,omitempty"`
	Flagged      []events.Flag         `json:"flagged,omitempty"`
	Always       []events.AlwaysOption `json:"always,omitempty"`
	Asked        time.Time             `json:"asked"`
	Deadline     time.Time             `json:"deadline,omitzero"`
	Status       string                `json:"status"`
	Answer       *answered             `json:"answer,omitempty"`
	Closed       *events.ConfirmClosed `json:"closed,omitempty"`
	Rejected     []rejected            `json:"rejected,omitempty"`
	Ended        time.Time             `json:"ended,omitzero"`
	// Needs is how many people must approve the call, when more than
	// one; Progress how many did and who ("1 of 2 approved (alice)").
	Needs    int    `json:"needs,omitempty"`
	Progress string `json:"progress,omitempty"`
	// Shortened says the executor cut the request's arguments, diff,
	// shell line or flags to what an approver is shown
	// (events.ConfirmRequest.Shortened): the page warns before anything.
	Shortened bool `json:"shortened,omitempty"`
}

// answered is the answer the executor acted on.
type answered struct {
	By      string         `json:"by"`
	Outcome events.Outcome `json:"outcome"`
	Message string         `json:"message,omitempty"`
	At      time.Time      `json:"at"`
}

// rejected is an answer the policy refused.
type rejected struct {
	By      string         `json:"by"`
	Outcome events.Outcome `json:"outcome"`
	Reason  string         `json:"reason"`
}

// newState is the page's state. The requests waiting for an answer are
// shown whole: the approver decides on exactly these bytes, and hiding
// what looks like a secret would let an agent hide a payload from them
// behind a key named "token". The requests answered are history, which
// anyone at the page may read over the approver's shoulder: their
// secrets are hidden, as toolbus audit hides them.
func newState(s approve.State, allow []allowEntry, approver string, red *redact.Redactor) state {
	out := state{Now: time.Now().UTC(), Approver: approver, Pending: make([]request, len(s.Pending)),
		Recent: make([]request, len(s.Recent)), Allowlist: allow}
	for i, r := range s.Pending {
		out.Pending[i] = newRequest(r)
	}
	for i, r := range s.Recent {
		out.Recent[i] = redacted(newRequest(r), red)
	}
	return out
}

// redacted is v with the secrets of everything it shows hidden.
func redacted(v request, red *redact.Redactor) request {
	v.Args = red.JSON(v.Args)
	v.Diff, v.Command, v.Reason = red.Text(v.Diff), red.Text(v.Command), red.Text(v.Reason)
	v.Flagged = slices.Clone(v.Flagged)
	for i := range v.Flagged {
		v.Flagged[i].Text, v.Flagged[i].Why = red.Text(v.Flagged[i].Text), red.Text(v.Flagged[i].Why)
	}
	if v.Answer != nil {
		a := *v.Answer
		a.Message = red.Text(a.Message)
		v.Answer = &a
	}
	if v.Closed != nil {
		c := *v.Closed
		c.Reason = red.Text(c.Reason)
		v.Closed = &c
	}
	v.Rejected = slices.Clone(v.Rejected)
	for i := range v.Rejected {
		v.Rejected[i].Reason = red.Text(v.Rejected[i].Reason)
	}
	return v
}

func newRequest(r approve.Request) request {
	v := request{Key: r.AnswerTo, RequestID: r.ID, InvocationID: r.InvocationID, Tool: r.Tool, Server: r.Server, Kind: r.Kind, Caller: r.Caller,
		Reason: r.Reason, Args: r.Args, Diff: r.Diff, Command: r.Command, Flagged: r.Flagged, Always: r.Always,
		Asked: r.Time, Status: r.Status(), Closed: r.Closed, Ended: r.Ended, Shortened: r.Shortened}
	if r.ApprovalsRequired > 1 {
		v.Needs, v.Progress = r.ApprovalsRequired, r.Progress()
	}
	if r.DeadlineMillis > 0 {
		v.Deadline = r.Deadline
	}
	if len(v.Args) > 0 && !json.Valid(v.Args) {
		// Raw bytes that are not JSON would break the whole state.
		v.Args, _ = json.Marshal(string(v.Args))
	}
	if a := r.Answer; a != nil {
		v.Answer = &answered{By: answerer(a), Outcome: a.Outcome, Message: a.Message, At: a.Time}
	}
	for _, rej := range r.Rejected {
		v.Rejected = append(v.Rejected, rejected{By: answerer(&rej.Answer), Outcome: rej.Answer.Outcome, Reason: rej.Reason})
	}
	return v
}

// change is what a page is sent when the queue or the allowlist changes:
// only what changed, so what a change costs a page is the size of the
// change, not of the whole queue.
type change struct {
	Now time.Time `json:"now"`
	// Pending are requests new to the page, or changed (a refusal
	// recorded), whole.
	Pending []request `json:"pending,omitempty"`
	// Ended are requests that ended, oldest first, as the history shows
	// them: the page takes each off its queue if there and puts it on top
	// of its history.
	Ended []request `json:"ended,omitempty"`
	// Gone are the keys of requests the page shows that are no longer
	// kept at all.
	Gone []string `json:"gone,omitempty"`
	// Allow are allowlist entries new or changed; Revoked the keys of
	// entries gone.
	Allow   []allowEntry `json:"allow,omitempty"`
	Revoked []string     `json:"revoked,omitempty"`
}

func (c *change) empty() bool {
	return len(c.Pending) == 0 && len(c.Ended) == 0 && len(c.Gone) == 0 && len(c.Allow) == 0 && len(c.Revoked) == 0
}

// shown is what one page has been sent, so the next change sends it only
// the difference. It holds keys and revisions, never requests.
type shown struct {
	pending map[string]uint64 // request key -> revision sent
	recent  map[string]bool   // keys of the ended requests sent
	allow   map[string]uint64 // allowlist key -> revision sent
}

func newShown() *shown {
	return &shown{pending: map[string]uint64{}, recent: map[string]bool{}, allow: map[string]uint64{}}
}

// diff records st and allow as shown and returns what changed since the
// last call; the first call returns everything.
func (p *shown) diff(st approve.State, allow []allowEntry, red *redact.Redactor) change {
	c := change{Now: time.Now().UTC()}
	live := make(map[string]bool, len(st.Pending))
	for _, r := range st.Pending {
		k := r.AnswerTo
		live[k] = true
		if rev, ok := p.pending[k]; !ok || rev != r.Revision {
			c.Pending = append(c.Pending, newRequest(r))
			p.pending[k] = r.Revision
		}
	}
	recent := make(map[string]bool, len(st.Recent))
	for i := len(st.Recent) - 1; i >= 0; i-- {
		r := st.Recent[i]
		k := r.AnswerTo
		recent[k] = true
		if !p.recent[k] {
			c.Ended = append(c.Ended, redacted(newRequest(r), red))
		}
	}
	for k := range p.pending {
		if !live[k] {
			delete(p.pending, k)
			if !recent[k] {
				c.Gone = append(c.Gone, k)
			}
		}
	}
	p.recent = recent
	seen := make(map[string]bool, len(allow))
	for _, e := range allow {
		seen[e.Key] = true
		if rev, ok := p.allow[e.Key]; !ok || rev != e.rev {
			c.Allow = append(c.Allow, e)
			p.allow[e.Key] = e.rev
		}
	}
	for k := range p.allow {
		if !seen[k] {
			delete(p.allow, k)
			c.Revoked = append(c.Revoked, k)
		}
	}
	slices.Sort(c.Gone)
	slices.Sort(c.Revoked)
	return c
}

// answerer names who answered: the member the bus proved, and the person
// it says answered, where it says one.
func answerer(a *events.ConfirmAnswer) string {
	if a.Person == "" {
		return a.Sender.ID
	}
	return a.Sender.ID + " (" + a.Person + ")"
}
