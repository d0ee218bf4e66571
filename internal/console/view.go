package console

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/redact"
)

// state is what the page shows, sent whole on every change: the queue is
// short and a whole state keeps the page from drifting.
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
	// RequestID tells the rounds of one invocation apart: modified
	// arguments are judged again and may be asked about again.
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
	v := request{RequestID: r.ID, InvocationID: r.InvocationID, Tool: r.Tool, Server: r.Server, Kind: r.Kind, Caller: r.Caller,
		Reason: r.Reason, Args: r.Args, Diff: r.Diff, Command: r.Command, Flagged: r.Flagged, Always: r.Always,
		Asked: r.Time, Status: r.Status(), Closed: r.Closed, Ended: r.Ended}
	if r.DeadlineMillis > 0 {
		v.Deadline = r.Deadline
	}
	if len(v.Args) > 0 && !json.Valid(v.Args) {
		// Raw bytes that are not JSON would break the whole state.
		v.Args, _ = json.Marshal(string(v.Args))
	}
	if a := r.Answer; a != nil {
		v.Answer = &answered{By: a.Sender.ID, Outcome: a.Outcome, Message: a.Message, At: a.Time}
	}
	for _, rej := range r.Rejected {
		v.Rejected = append(v.Rejected, rejected{By: rej.Answer.Sender.ID, Outcome: rej.Answer.Outcome, Reason: rej.Reason})
	}
	return v
}
