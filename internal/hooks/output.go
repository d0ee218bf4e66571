package hooks

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Decision is what a hook answered about a call.
type Decision int

// The answers, from the weakest: a hook that says nothing, one that lets
// the call go on (which never makes it more allowed than the policy made
// it), one that wants a person asked, one that blocks it.
const (
	None Decision = iota
	Allow
	Ask
	Deny
)

// String is the decision's name in the audit trail.
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return "none"
}

// Outcome is what came of one run of a hook.
type Outcome struct {
	// Decision is the hook's answer; None when it failed.
	Decision Decision
	// Message says why: the reason of a deny or an ask (or its stderr,
	// on exit code 2), a post hook's feedback. Capped at MaxMessage.
	Message string
	// Context is additionalContext, for the model (post hooks). Capped at
	// MaxContext.
	Context string
	// Failure, when not empty, says how the hook failed: it could not
	// start, exited with another status than 0 or 2, printed JSON that
	// does not read or more than MaxOutput, was killed, or ran out of
	// time (TimedOut).
	Failure  string
	TimedOut bool
	// ExitCode is the hook's exit status, or -1 when it did not exit
	// (killed, not started, a function hook).
	ExitCode int
	Duration time.Duration
}

// Caps on what a hook's answer may carry.
const (
	// MaxOutput is how much a hook may print on stdout and on stderr
	// each: past it the hook is killed and has failed.
	MaxOutput = 1 << 20
	// MaxMessage and MaxContext, in characters: longer ones are cut.
	MaxMessage = 2000
	MaxContext = 10000
)

// Interpret reads a finished hook's answer: its exit status and what it
// printed. Exit 0 with JSON on stdout: the JSON's decision; exit 0 with
// nothing or plain text: no decision; exit 2: a block, stderr being the
// message; any other status: a failure. For a hook of event ev.
//
// It never panics, and fails rather than guesses: JSON that does not read
// (a syntax error, a field of the wrong type, a field given twice, text
// around the object) or a decision it does not know is a failure, which
// blocks a pre hook's call.
func Interpret(ev Event, exitCode int, stdout, stderr []byte) Outcome {
	o := Outcome{ExitCode: exitCode}
	switch exitCode {
	case 0:
	case 2:
		o.Decision = Deny
		o.Message = cut(strings.TrimSpace(string(bytes.ToValidUTF8(stderr, nil))), MaxMessage)
		if o.Message == "" {
			o.Message = "(the hook exited with status 2 and gave no reason on stderr)"
		}
		return o
	default:
		o.Failure = fmt.Sprintf("exited with status %d", exitCode)
		if msg := strings.TrimSpace(string(bytes.ToValidUTF8(stderr, nil))); msg != "" {
			o.Failure += ": " + cut(msg, MaxMessage)
		}
		return o
	}
	out := bytes.TrimSpace(stdout)
	if len(out) == 0 {
		return o
	}
	if out[0] != '{' {
		// Plain text: Claude Code shows it in the transcript, Gemini CLI
		// as a system message; neither decides anything with it. But a
		// line that starts a JSON object means JSON was meant, and text
		// around it would hide the decision: that fails.
		for _, line := range bytes.Split(out, []byte("\n")) {
			if l := bytes.TrimSpace(line); len(l) > 0 && l[0] == '{' {
				o.Failure = "printed text around its JSON answer on stdout (print only the JSON object; logs go to stderr)"
				return o
			}
		}
		o.Message = cut(string(bytes.ToValidUTF8(out, nil)), MaxMessage)
		return o
	}
	var a answer
	if err := jsonv2.Unmarshal(out, &a); err != nil {
		o.Failure = "printed JSON that does not read: " + cut(err.Error(), 300)
		return o
	}
	return a.outcome(ev, o)
}

// answer is the JSON a hook prints: both agents' fields, which do not
// clash. Field names match exactly, and a name given twice is an error.
type answer struct {
	Continue          *bool   `json:"continue"`
	StopReason        string  `json:"stopReason"`
	Decision          string  `json:"decision"`
	Reason            string  `json:"reason"`
	SystemMessage     string  `json:"systemMessage"`
	SuppressOutput    bool    `json:"suppressOutput"`
	AdditionalContext string  `json:"additionalContext"`
	Specific          *detail `json:"hookSpecificOutput"`
}

type detail struct {
	HookEventName            string         `json:"hookEventName"`
	PermissionDecision       string         `json:"permissionDecision"`
	PermissionDecisionReason string         `json:"permissionDecisionReason"`
	AdditionalContext        string         `json:"additionalContext"`
	UpdatedInput             jsontext.Value `json:"updatedInput"`
	ToolInput                jsontext.Value `json:"tool_input"`
	ToolOutput               jsontext.Value `json:"tool_output"`
}

func (a *answer) outcome(ev Event, o Outcome) Outcome {
	var d detail
	if a.Specific != nil {
		d = *a.Specific
	}
	decision, ok := decisionOf(a.Decision, true)
	if !ok {
		o.Failure = fmt.Sprintf("answered decision %q, which is none of allow, approve, ask, deny, block", a.Decision)
		return o
	}
	permission, ok := decisionOf(d.PermissionDecision, false)
	if !ok {
		o.Failure = fmt.Sprintf("answered permissionDecision %q, which is none of allow, ask, deny", d.PermissionDecision)
		return o
	}
	if ev == Pre && (given(d.UpdatedInput) || given(d.ToolInput)) {
		// Running the call with its old arguments would ignore what the
		// hook asked; running it with new ones would skip the policy's
		// judgement of them.
		o.Failure = "asked to change the call's arguments (updatedInput / tool_input), which toolbus does not do"
		return o
	}
	stop := a.Continue != nil && !*a.Continue
	o.Decision = max(decision, permission)
	if stop {
		o.Decision = Deny
	}
	var reasons []string
	switch o.Decision {
	case Deny:
		if permission == Deny {
			reasons = append(reasons, d.PermissionDecisionReason)
		}
		if decision == Deny {
			reasons = append(reasons, a.Reason)
		}
		if stop {
			reasons = append(reasons, a.StopReason)
		}
	case Ask:
		reasons = append(reasons, d.PermissionDecisionReason, a.Reason)
	}
	reasons = append(reasons, a.Reason, d.PermissionDecisionReason, a.SystemMessage)
	for _, r := range reasons {
		if r = strings.TrimSpace(r); r != "" {
			o.Message = cut(r, MaxMessage)
			break
		}
	}
	if o.Decision == Deny && o.Message == "" {
		o.Message = "(the hook blocked the call and gave no reason)"
	}
	ctx := strings.TrimSpace(d.AdditionalContext)
	if top := strings.TrimSpace(a.AdditionalContext); top != "" && top != ctx {
		ctx = strings.TrimSpace(ctx + "\n" + top)
	}
	o.Context = cut(ctx, MaxContext)
	return o
}

// given reports whether a JSON value was given and is not null.
func given(v jsontext.Value) bool {
	return len(v) > 0 && string(v) != "null"
}

// decisionOf reads a decision word; legacy allows the top-level
// "decision" words (approve, block) beside the permission words.
func decisionOf(s string, legacy bool) (Decision, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return None, true
	case "allow":
		return Allow, true
	case "ask":
		return Ask, true
	case "deny":
		return Deny, true
	case "approve":
		return Allow, legacy
	case "block":
		return Deny, legacy
	}
	return None, false
}
