package events

import (
	"fmt"
	"regexp"
	"strings"
)

// A principal is the name of the NATS identity a message was sent with.
// Where the bus enforces identities (`toolbus init`), each identity may
// publish the subjects that bind a message to a sender only with its own
// name in them, so a name read from such a subject is proven: the caller
// of an invocation, the approver of an answer. An envelope's Sender is
// what the sender says of itself; the subject is what the bus vouches for.
//
// A part that connects without an identity sends Unproven in its place,
// which an identity of a fleet may never publish: the message is then
// judged as a claim, as everything was before identities.

// Unproven stands for the principal on the subjects of a sender without
// an identity.
const Unproven = "_"

var principalName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// reservedPrincipal is the one name no identity may take: the subjects
// of a client of a facade so named (InvokeSubject("batch/<client>"))
// would be the batch subjects of every principal (InvokeBatchSubject).
const reservedPrincipal = "batch"

// ValidPrincipal says whether name can name an identity: lower-case
// letters, digits, '-' and '_', starting with a letter or digit, at most
// 63 bytes, so it is one subject token in every subject that carries it;
// and not "batch", which subjects reserve.
func ValidPrincipal(name string) error {
	if !principalName.MatchString(name) {
		return fmt.Errorf("%q cannot name an identity: use 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	if name == reservedPrincipal {
		return fmt.Errorf("%q cannot name an identity: the subjects reserve it", name)
	}
	return nil
}

// A client of the MCP facade is a principal of its own under the
// facade's: ClientPrincipal(facade, client), "facade/alice". The facade
// sends its clients' calls, cancels, output reads, records and answers
// on their own subjects, whose principal part is two tokens,
// "facade.alice" (ClientWildcard). Only a member of the facade role may
// publish a subject with a token after its name (auth.GrantOf), so an
// executor that reads a client principal from a subject knows that the
// bus proved the facade, and that the facade vouches for the client: no
// list of facades is kept anywhere. An agent that names a client in an
// identity is still judged as itself (Caller).

// ClientWildcard is the principal part of a binding subject that matches
// every client of every facade ("*.*"), beside "*" for the principals
// themselves.
const ClientWildcard = "*.*"

// ValidClient says whether name can name a client of a facade: the same
// names as an identity's, so it is one subject token.
func ValidClient(name string) error {
	if !principalName.MatchString(name) {
		return fmt.Errorf("%q cannot name an MCP client: use 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

// ClientPrincipal is the principal of client under facade.
func ClientPrincipal(facade, client string) string { return facade + "/" + client }

// SplitClient is the facade and the client of a client principal; ok is
// false for a principal of the bus's own.
func SplitClient(principal string) (facade, client string, ok bool) {
	return strings.Cut(principal, "/")
}

// principalToken is the token (two, for a client of a facade) a sender
// puts in a binding subject.
func principalToken(principal string) string {
	if principal == "" {
		return Unproven
	}
	if f, c, ok := SplitClient(principal); ok {
		return f + "." + c
	}
	return principal
}

// principalFromTokens is the principal the principal part of a binding
// subject names: one token (the bus's permissions say which a sender may
// use), or two valid names for a client of a facade. Anything else is
// not a principal.
func principalFromTokens(p string) (string, bool) {
	f, c, two := strings.Cut(p, ".")
	if !two {
		// "/" separates a facade from its client, and only the
		// two-token form says that.
		return p, p != "" && !strings.Contains(p, "/")
	}
	if ValidPrincipal(f) != nil || ValidClient(c) != nil {
		return "", false
	}
	return ClientPrincipal(f, c), true
}

// bindingPrefixes are the subjects whose rest names the sender's
// principal, the longest first (the batch subject is below the invoke
// subject).
var bindingPrefixes = []string{
	RequestPrefix + SubjectInvokeBatch + ".", RequestPrefix + SubjectInvoke + ".", RequestPrefix + SubjectCancel + ".",
	RequestPrefix + SubjectResult + ".", SubjectOutputPrefix,
	SubjectInvokeBatch + ".", SubjectInvoke + ".", SubjectCancel + ".", SubjectResult + ".",
}

// SubjectPrincipal is the principal a binding subject names (its
// principal part after InvokeSubject's, InvokeBatchSubject's,
// CancelSubject's, CallerRecordSubject's or OutputSubject's prefix, or
// after the subject such a request is recorded on); false when subject
// is none of them or names no valid principal.
func SubjectPrincipal(subject string) (string, bool) {
	for _, prefix := range bindingPrefixes {
		if rest, ok := strings.CutPrefix(subject, prefix); ok {
			return principalFromTokens(rest)
		}
	}
	return "", false
}

// InvokeSubject is where principal sends its invocations. The executor
// that takes one records it on Recorded(InvokeSubject(principal)).
func InvokeSubject(principal string) string {
	return RequestPrefix + SubjectInvoke + "." + principalToken(principal)
}

// InvokeBatchSubject is where principal sends its batches.
func InvokeBatchSubject(principal string) string {
	return RequestPrefix + SubjectInvokeBatch + "." + principalToken(principal)
}

// CancelSubject is where principal cancels its own calls. A cancel on
// Request(SubjectCancel) may cancel any call; only admins may send one.
func CancelSubject(principal string) string {
	return RequestPrefix + SubjectCancel + "." + principalToken(principal)
}

// CallerResultSubject is where a caller records the terminal result of a
// call that its executor could not give (EXECUTOR_LOST, a deadline
// passed with no executor to tell): a caller's record, beside the
// executors' SubjectResult.
func CallerResultSubject(principal string) string {
	return SubjectResult + "." + principalToken(principal)
}

// CallerRecordSubject is where principal sends its record of such a call:
// an executor checks it and records it on CallerResultSubject, so that no
// caller publishes into the audit stream itself (its size and rate are
// the executor's to bound).
func CallerRecordSubject(principal string) string {
	return Request(CallerResultSubject(principal))
}

// CallerRecordKept is an executor's answer to a caller's record it
// recorded; any other answer says why it did not.
const CallerRecordKept = "recorded"

// Answerer roles in an answer subject.
const (
	AnswerAsApprover = "approver"
	AnswerAsCaller   = "caller"
)

// AnswerSubjectPrefix + a token of the executor's own is a confirmation
// request's AnswerTo; answers go to AnswerSubject of it.
const AnswerSubjectPrefix = "toolbus.answer."

// NewAnswerTo makes the AnswerTo of one confirmation request (one round
// of it): AnswerSubjectPrefix and a capability (NewCapability), one
// subject token. Nobody can guess it, so nobody can make a request, or an
// answer, take the place of another's.
func NewAnswerTo() string {
	return AnswerSubjectPrefix + NewCapability()
}

// AnswerSubject is where principal answers the confirmation request whose
// AnswerTo is answerTo: as an approver, or (as) the person in front of
// the calling agent.
func AnswerSubject(answerTo, as, principal string) string {
	return answerTo + "." + as + "." + principalToken(principal)
}

// SplitAnswerSubject reads the answerer's role and principal from an
// answer subject below answerTo; proven is false for Unproven.
func SplitAnswerSubject(answerTo, subject string) (as, principal string, proven bool, err error) {
	rest, ok := strings.CutPrefix(subject, answerTo+".")
	if !ok {
		return "", "", false, fmt.Errorf("answer subject %q is not below %q", subject, answerTo)
	}
	as, tokens, ok := strings.Cut(rest, ".")
	if ok {
		principal, ok = principalFromTokens(tokens)
	}
	if !ok || (as != AnswerAsApprover && as != AnswerAsCaller) {
		return "", "", false, fmt.Errorf("answer subject %q: want %s.{approver|caller}.<principal>", subject, answerTo)
	}
	return as, principal, principal != Unproven, nil
}

// PrincipalOf reads the principal from a binding subject: the token after
// prefix + ".", which must be the last. proven is false for Unproven.
func PrincipalOf(prefix, subject string) (principal string, proven bool, err error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	p := ""
	if ok {
		p, ok = principalFromTokens(rest)
	}
	if !ok {
		return "", false, fmt.Errorf("subject %q does not name a principal after %q", subject, prefix)
	}
	return p, p != Unproven, nil
}

// Caller is the identity the policy judges a call's sender as: what the
// sender claimed, with Proven set only when the bus vouched for its
// principal. A sender with a principal may name itself only as that
// principal, or as one of the callers it speaks for ("principal/…", as
// the MCP facade does for its sessions); anything else is refused, as an
// impersonation.
func Caller(claimed Identity, principal string, proven bool) (Identity, error) {
	claimed.Proven, claimed.Principal = false, ""
	if !proven {
		return claimed, nil
	}
	if claimed.ID != principal && !strings.HasPrefix(claimed.ID, principal+"/") {
		return Identity{}, fmt.Errorf("the sender names itself %q, but it was sent with the identity %q: a caller may name only itself (or %q/…)", claimed.ID, principal, principal)
	}
	claimed.Proven, claimed.Principal = true, principal
	return claimed, nil
}
