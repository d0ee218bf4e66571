package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The confirmation protocol. When the policy says ASK_USER, the executor
// publishes a ConfirmRequest on SubjectConfirm; any approver (a terminal, the
// web console, an agent's own user) answers with a ConfirmAnswer sent as a
// request to the request's AnswerTo subject, and the executor replies with a
// ConfirmAck: accepted, or refused and why. The executor asks the policy
// (data.toolbus.approver_allowed) about every answer; the first accepted one
// wins and is published on SubjectConfirmAnswered, a refused one on
// SubjectConfirmRejected, and a request that ends with no accepted answer
// (deadline, cancellation) on SubjectConfirmClosed. Every approver follows
// these subjects, so each shows who answered what within moments.

// ConfirmRequest asks an approver whether an invocation may run, sent on
// SubjectConfirm when the policy said ASK_USER. It carries what a person
// needs to decide.
type ConfirmRequest struct {
	Header
	InvocationID string          `json:"invocationId"`
	Tool         string          `json:"tool"`
	Server       string          `json:"server,omitempty"`
	Kind         Kind            `json:"kind"`
	Caller       Identity        `json:"caller"`
	Args         json.RawMessage `json:"args,omitempty"`
	Reason       string          `json:"reason"`
	// Diff is a unified diff of the change, for edits.
	Diff string `json:"diff,omitempty"`
	// Command is the shell line, for shell tools.
	Command string `json:"command,omitempty"`
	// Flagged are the parts of the call the policy points the approver at
	// (data.toolbus.flagged): for a shell line, the commands and targets
	// that made it ask.
	Flagged []Flag `json:"flagged,omitempty"`
	// Always lists the "always" answers the policy lets be remembered for
	// this call, each with what it would remember; empty when none may be,
	// and then an approver offers none.
	Always []AlwaysOption `json:"always,omitempty"`
	// DeadlineMillis is how long the executor waits for an answer.
	DeadlineMillis int64 `json:"deadlineMillis"`
	// CallerMayAnswer says the person in front of the calling agent may
	// answer this request too: the caller asked to confirm its own calls
	// (Invocation.CallerConfirms), the policy lets it for this call
	// (data.toolbus.elicitation_allowed), and the request went to the
	// caller as well. The first accepted answer still wins.
	CallerMayAnswer bool `json:"callerMayAnswer,omitempty"`
	// AnswerTo is the subject an answer is sent to, as a request that the
	// executor acknowledges. It is in the body, not only the message's
	// reply subject, so an approver that reads the request back from the
	// audit stream (one started after it was sent) can answer it too. An
	// empty AnswerTo is answered by replying to the message.
	//
	// It is the request's own: an unguessable token (128 random bits)
	// made for this request and this round of it, never the invocation
	// id, which the caller chooses. Approvers key their requests by it,
	// and an answer counts only on the AnswerTo of the request it
	// answers, so a request cannot take another's place in a view.
	AnswerTo string `json:"answerTo,omitempty"`
	// ApprovalsRequired is how many distinct proven people must approve
	// the call before it runs (data.toolbus.approvals_required); 0 or 1:
	// one answer decides, as it always has.
	ApprovalsRequired int `json:"approvalsRequired,omitempty"`
	// Shortened says Args, Diff, Command or Flagged were cut to what an approver is
	// shown (MaxShownArgs, MaxShownCommand): Args is then a JSON string
	// holding the first bytes of the arguments. The whole request is in
	// the invocation's record in the audit stream.
	Shortened bool `json:"shortened,omitempty"`
}

// Bounds of what a ConfirmRequest shows, in bytes: one caller's requests
// are held by every approver, so their size is the executor's to bound.
const (
	MaxShownArgs    = 16 << 10
	MaxShownCommand = 8 << 10
	MaxShownDiff    = 64 << 10
	// MaxShownFlags and MaxShownFlag bound the flags a request shows:
	// how many, and the bytes of each.
	MaxShownFlags = 64
	MaxShownFlag  = 512
)

// Shorten cuts what r shows to the bounds every approver can hold, as an
// executor does before it asks: arguments past MaxShownArgs are shown as
// a JSON string of their first bytes, a diff or a command as its first
// bytes, each with a note saying where it was cut, and r says it was
// Shortened. The invocation's record in the audit stream keeps the whole
// request.
func (r *ConfirmRequest) Shorten() {
	if len(r.Args) > MaxShownArgs {
		head := truncateBytes(string(r.Args), MaxShownArgs)
		note := fmt.Sprintf("%s… [arguments cut at %d of %d bytes; the whole call is in the audit trail]", head, len(head), len(r.Args))
		if quoted, err := json.Marshal(note); err == nil {
			r.Args = quoted
		} else {
			r.Args = nil
		}
		r.Shortened = true
	}
	if len(r.Command) > MaxShownCommand {
		head := truncateBytes(r.Command, MaxShownCommand)
		r.Command = fmt.Sprintf("%s… [command cut at %d of %d bytes; the whole call is in the audit trail]", head, len(head), len(r.Command))
		r.Shortened = true
	}
	if len(r.Diff) > MaxShownDiff {
		head := truncateBytes(r.Diff, MaxShownDiff)
		r.Diff = fmt.Sprintf("%s\n… [diff cut at %d of %d bytes; the whole call is in the audit trail]\n", head, len(head), len(r.Diff))
		r.Shortened = true
	}
	if len(r.Flagged) > MaxShownFlags {
		r.Flagged, r.Shortened = r.Flagged[:MaxShownFlags], true
	}
	for i := range r.Flagged {
		if f := &r.Flagged[i]; len(f.Text) > MaxShownFlag {
			f.Text, r.Shortened = truncateBytes(f.Text, MaxShownFlag)+"…", true
		}
	}
}

// truncateBytes is s cut to at most n bytes, on a character boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Flag is one part of a call the policy points an approver at.
type Flag struct {
	// Text is the part as it appears in the command (or a path).
	Text string `json:"text"`
	// Why says what is worth a look.
	Why string `json:"why"`
}

// AlwaysOption is one "always" answer an approver may give.
type AlwaysOption struct {
	Outcome Outcome `json:"outcome"`
	// Remembers says what the allowlist would keep: "the command git
	// status", "the path /w/notes.md", "the MCP server github".
	Remembers string `json:"remembers"`
}

// EnvelopeType implements Envelope.
func (*ConfirmRequest) EnvelopeType() string { return "tool.confirm.request" }

// Validate implements Envelope.
func (c *ConfirmRequest) Validate() error {
	typ := c.EnvelopeType()
	if err := c.header().validate(); err != nil {
		return err
	}
	switch {
	case c.InvocationID == "":
		return invalid(typ, "invocationId is empty")
	case c.Tool == "":
		return invalid(typ, "tool is empty")
	}
	return nil
}

// Outcome is an approver's answer (seed 003 ToolConfirmationOutcome).
type Outcome string

// The outcomes of seed 003.
const (
	ProceedOnce         Outcome = "proceed_once"
	ProceedAlways       Outcome = "proceed_always"
	ProceedAlwaysServer Outcome = "proceed_always_server"
	ProceedAlwaysTool   Outcome = "proceed_always_tool"
	ModifyWithEditor    Outcome = "modify_with_editor"
	Cancel              Outcome = "cancel"
)

// Valid reports whether o is one of the outcomes.
func (o Outcome) Valid() bool {
	switch o {
	case ProceedOnce, ProceedAlways, ProceedAlwaysServer, ProceedAlwaysTool, ModifyWithEditor, Cancel:
		return true
	}
	return false
}

// Always reports whether o asks for the approval to be remembered.
func (o Outcome) Always() bool {
	return o == ProceedAlways || o == ProceedAlwaysServer || o == ProceedAlwaysTool
}

// RoleAgentUser is the role of an answer given by the person in front of
// the calling agent, asked through the agent's own client (an MCP
// elicitation), rather than by an approver on tool.confirm. Its identity
// is AgentUser(caller).
const RoleAgentUser = "agent-user"

// AgentUser is the approver identity of the person in front of caller's
// agent: "user-of:" and the caller's id, with the caller's agent, session,
// user, host and client, so the audit trail shows which client asked whom.
func AgentUser(caller Identity) Identity {
	id := caller
	id.ID, id.Role = "user-of:"+caller.ID, RoleAgentUser
	return id
}

// ConfirmAnswer answers a ConfirmRequest; its Sender is the approver.
type ConfirmAnswer struct {
	Header
	InvocationID string  `json:"invocationId"`
	Outcome      Outcome `json:"outcome"`
	// Args are the edited arguments of a ModifyWithEditor answer.
	Args json.RawMessage `json:"args,omitempty"`
	// Message is the approver's word to the agent: why a call was
	// cancelled, say. The agent sees it in the result.
	Message string `json:"message,omitempty"`
	// AnswerTo is the request answered, set by the executor on the
	// answer it records on SubjectConfirmAnswered (what an answerer puts
	// here is overwritten).
	AnswerTo string `json:"answerTo,omitempty"`
	// Person names who answered, as the answerer says: of the people who
	// share one console (one member of the fleet, one token), the one
	// whose click this was, with the token's id. It is the answerer's
	// claim, shown beside Sender, which the bus proves; no policy reads
	// it.
	Person string `json:"person,omitempty"`
	// Who is the person who answered, as the answerer's sign-in knows
	// them (Signer): the executor shows the policy who that is
	// (input.approver.person, .groups) and whether it is proven, which
	// it decides itself (never from what the answer says).
	Who *Signer `json:"who,omitempty"`
	// Via is where the person answered: ViaConsole, ViaTerminal. The
	// executor sets ViaAgentUser for an answer on the caller's subject,
	// whatever this says.
	Via string `json:"via,omitempty"`
	// Approval and Of are set by the executor on the answer it records
	// (SubjectConfirmAnswered) for a call that needs several people:
	// this answer is approval number Approval of the Of the call needs.
	// What an answerer puts here is overwritten.
	Approval int `json:"approval,omitempty"`
	Of       int `json:"of,omitempty"`
}

// Where a person answered a confirmation request (ConfirmAnswer.Via).
const (
	ViaConsole   = "console"
	ViaTerminal  = "terminal"
	ViaAgentUser = "agent-user"
)

// Signer is a person as the sign-in of the approver they answered through
// knows them.
//
//   - Signed in with the organization's OpenID provider (the console):
//     Issuer and Subject name them, Name, Email and Groups are the ID
//     token's claims.
//   - Holding an approver identity of the fleet of their own (`toolbus
//     init --add approver:alice`, `toolbus confirm` with its seed):
//     Member, and the person is that member.
//   - Otherwise (a console's shared token, `toolbus confirm` without an
//     identity of its own): Name, the OS user who holds the token or runs
//     the terminal, which nobody proves.
type Signer struct {
	Issuer  string   `json:"iss,omitempty"`
	Subject string   `json:"sub,omitempty"`
	Name    string   `json:"name,omitempty"`
	Email   string   `json:"email,omitempty"`
	Groups  []string `json:"groups,omitempty"`
	Member  bool     `json:"member,omitempty"`
}

// Bounds of a Signer: one answer is held by every approver.
const (
	MaxSignerField  = 512
	MaxSignerGroups = 64
)

// validate checks s's bounds: every field printable and short, a bounded
// number of groups.
func (s *Signer) validate() error {
	fields := append([]string{s.Issuer, s.Subject, s.Name, s.Email}, s.Groups...)
	if len(s.Groups) > MaxSignerGroups {
		return fmt.Errorf("%d groups; at most %d", len(s.Groups), MaxSignerGroups)
	}
	for _, f := range fields {
		if len(f) > MaxSignerField {
			return fmt.Errorf("a field of %d bytes; at most %d", len(f), MaxSignerField)
		}
		if strings.IndexFunc(f, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return fmt.Errorf("%q holds a character that does not print", f)
		}
	}
	if (s.Issuer == "") != (s.Subject == "") {
		return errors.New("an issuer without a subject, or a subject without an issuer")
	}
	return nil
}

// EnvelopeType implements Envelope.
func (*ConfirmAnswer) EnvelopeType() string { return "tool.confirm.answer" }

// MaxAnswerMessage is the longest Message an answer may carry, in bytes.
const MaxAnswerMessage = 2000

// Validate implements Envelope.
func (c *ConfirmAnswer) Validate() error {
	typ := c.EnvelopeType()
	if err := c.header().validate(); err != nil {
		return err
	}
	switch {
	case c.InvocationID == "":
		return invalid(typ, "invocationId is empty")
	case !c.Outcome.Valid():
		return invalid(typ, "unknown outcome %q", c.Outcome)
	case c.Outcome == ModifyWithEditor && !isJSONObject(c.Args):
		return invalid(typ, "modify_with_editor needs args, a JSON object")
	case len(c.Message) > MaxAnswerMessage:
		return invalid(typ, "message is %d bytes; at most %d", len(c.Message), MaxAnswerMessage)
	case len(c.Person) > MaxPerson:
		return invalid(typ, "person is %d bytes; at most %d", len(c.Person), MaxPerson)
	case strings.IndexFunc(c.Person, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return invalid(typ, "person %q holds a character that does not print", c.Person)
	case c.Via != "" && c.Via != ViaConsole && c.Via != ViaTerminal && c.Via != ViaAgentUser:
		return invalid(typ, "via is %q, not %s, %s or %s", c.Via, ViaConsole, ViaTerminal, ViaAgentUser)
	}
	if c.Who != nil {
		if err := c.Who.validate(); err != nil {
			return invalid(typ, "who: %v", err)
		}
	}
	return nil
}

// MaxPerson is the longest Person an answer may carry, in bytes.
const MaxPerson = 200

// ConfirmDismissed says that the person in front of the calling agent
// made no decision on a ConfirmRequest: their client dismissed the
// question (MCP's "cancel"), could not put it to them, or got no answer.
// The caller's facade sends it, as the user of the caller
// (AgentUser), to the request's AnswerTo on the caller's subject, as it
// would an answer. It is not a ConfirmAnswer and holds no Outcome, so
// that it can neither allow a call nor refuse it as the person's no: the
// executor leaves the request to the fleet's approvers when one is
// present, and otherwise denies the call at once, saying where to
// approve. The executor acknowledges it with a ConfirmAck that is never
// Accepted (it decides nothing).
type ConfirmDismissed struct {
	Header
	InvocationID string `json:"invocationId"`
	// Why says how the question ended without a decision, in the
	// facade's words ("dismissed the question", "could not be asked:
	// ..."), for the trail.
	Why string `json:"why,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ConfirmDismissed) EnvelopeType() string { return "tool.confirm.dismissed" }

// Validate implements Envelope.
func (c *ConfirmDismissed) Validate() error {
	typ := c.EnvelopeType()
	if err := c.header().validateAbout(typ, c.InvocationID); err != nil {
		return err
	}
	if len(c.Why) > MaxAnswerMessage {
		return invalid(typ, "why is %d bytes; at most %d", len(c.Why), MaxAnswerMessage)
	}
	return nil
}

// ConfirmAck is the executor's reply to an answer sent to AnswerTo.
type ConfirmAck struct {
	Header
	InvocationID string `json:"invocationId"`
	// Accepted: this answer decides the call, or, with Approval, counts
	// as approval Approval of the Of people the call needs, and the call
	// waits for the others.
	Accepted bool `json:"accepted"`
	Approval int  `json:"approval,omitempty"`
	Of       int  `json:"of,omitempty"`
	// Reason says why an answer was not accepted: the policy does not
	// let this approver answer this call, or it is answered already.
	Reason string `json:"reason,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ConfirmAck) EnvelopeType() string { return "tool.confirm.ack" }

// Validate implements Envelope.
func (c *ConfirmAck) Validate() error {
	return c.header().validateAbout(c.EnvelopeType(), c.InvocationID)
}

// ConfirmRejected records an answer the executor did not act on, published
// on SubjectConfirmRejected: the answer as sent, and why.
type ConfirmRejected struct {
	Header
	InvocationID string        `json:"invocationId"`
	Answer       ConfirmAnswer `json:"answer"`
	Reason       string        `json:"reason"`
	// AnswerTo is the request the refused answer was sent for.
	AnswerTo string `json:"answerTo,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ConfirmRejected) EnvelopeType() string { return "tool.confirm.rejected" }

// Validate implements Envelope.
func (c *ConfirmRejected) Validate() error {
	return c.header().validateAbout(c.EnvelopeType(), c.InvocationID)
}

// ConfirmClosed records that a confirmation request ended with no accepted
// answer, published on SubjectConfirmClosed, so approvers take it off
// their queues: the deadline passed, the call was cancelled, or the
// executor stopped.
type ConfirmClosed struct {
	Header
	InvocationID string    `json:"invocationId"`
	ErrorType    ErrorType `json:"errorType"`
	Reason       string    `json:"reason"`
	// AnswerTo is the request that closed.
	AnswerTo string `json:"answerTo,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ConfirmClosed) EnvelopeType() string { return "tool.confirm.closed" }

// Validate implements Envelope.
func (c *ConfirmClosed) Validate() error {
	return c.header().validateAbout(c.EnvelopeType(), c.InvocationID)
}

// ConfirmWaiting tells a caller that its call waits for a person's
// answer: sent by the executor on the invocation's reply subject, as a
// message of kind KindWaiting, once the confirmation request is out (and
// again for each later round of it). It is the caller's alone and is not
// recorded: the ConfirmRequest is.
type ConfirmWaiting struct {
	Header
	InvocationID string `json:"invocationId"`
	Tool         string `json:"tool"`
	// Reason is the policy's reason for asking.
	Reason string `json:"reason,omitempty"`
	// DeadlineMillis is how long from now the executor waits for an
	// answer: a span, not a time, so that the caller's clock need not
	// agree with the executor's.
	DeadlineMillis int64 `json:"deadlineMillis"`
	// Hint says where a person approves calls of this executor (the web
	// console's address, `toolbus confirm`).
	Hint string `json:"hint,omitempty"`
}

// EnvelopeType implements Envelope.
func (*ConfirmWaiting) EnvelopeType() string { return "tool.confirm.waiting" }

// Validate implements Envelope.
func (c *ConfirmWaiting) Validate() error {
	typ := c.EnvelopeType()
	if err := c.header().validateAbout(typ, c.InvocationID); err != nil {
		return err
	}
	if c.DeadlineMillis < 0 {
		return invalid(typ, "deadlineMillis is negative")
	}
	return nil
}

// Queued tells a caller that its call waits in line for a slot of a
// limit of calls at once the policy set (data.toolbus.limits): sent by
// the executor on the invocation's reply subject, as a message of kind
// KindQueued, when the call joins the line. It is the caller's alone; the
// trail has a "queued" Step.
type Queued struct {
	Header
	InvocationID string `json:"invocationId"`
	Tool         string `json:"tool"`
	// Limit is the policy's name of the limit.
	Limit string `json:"limit"`
	// Position is the call's place in line when it joined: 1 is next.
	Position int `json:"position"`
	// DeadlineMillis is how long from now the call waits at most.
	DeadlineMillis int64 `json:"deadlineMillis"`
}

// EnvelopeType implements Envelope.
func (*Queued) EnvelopeType() string { return "tool.queued" }

// Validate implements Envelope.
func (q *Queued) Validate() error {
	typ := q.EnvelopeType()
	if err := q.header().validateAbout(typ, q.InvocationID); err != nil {
		return err
	}
	if q.DeadlineMillis < 0 || q.Position < 1 {
		return invalid(typ, "deadlineMillis is negative, or position below 1")
	}
	return nil
}

// ForInvocation is the id of the invocation that waits in line
// (InvocationID).
func (q *Queued) ForInvocation() string { return q.InvocationID }
