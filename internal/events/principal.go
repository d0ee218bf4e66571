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

// ValidPrincipal says whether name can name an identity: lower-case
// letters, digits, '-' and '_', starting with a letter or digit, at most
// 63 bytes, so it is one subject token in every subject that carries it.
func ValidPrincipal(name string) error {
	if !principalName.MatchString(name) {
		return fmt.Errorf("%q cannot name an identity: use 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

// principalToken is the token a sender puts in a binding subject.
func principalToken(principal string) string {
	if principal == "" {
		return Unproven
	}
	return principal
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
	as, principal, ok = strings.Cut(rest, ".")
	if !ok || principal == "" || strings.Contains(principal, ".") || (as != AnswerAsApprover && as != AnswerAsCaller) {
		return "", "", false, fmt.Errorf("answer subject %q: want %s.{approver|caller}.<principal>", subject, answerTo)
	}
	return as, principal, principal != Unproven, nil
}

// PrincipalOf reads the principal from a binding subject: the token after
// prefix + ".", which must be the last. proven is false for Unproven.
func PrincipalOf(prefix, subject string) (principal string, proven bool, err error) {
	p, ok := strings.CutPrefix(subject, prefix+".")
	if !ok || p == "" || strings.Contains(p, ".") {
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
	claimed.Proven = false
	if !proven {
		return claimed, nil
	}
	if claimed.ID != principal && !strings.HasPrefix(claimed.ID, principal+"/") {
		return Identity{}, fmt.Errorf("the sender names itself %q, but it was sent with the identity %q: a caller may name only itself (or %q/…)", claimed.ID, principal, principal)
	}
	claimed.Proven = true
	return claimed, nil
}
