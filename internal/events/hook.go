package events

// HookOutcome is what came of one run of a user hook.
type HookOutcome string

// The outcomes of a hook run: the hook's answer (allow, ask, deny, or none
// when it said nothing), or how it failed.
const (
	HookAllow    HookOutcome = "allow"
	HookAsk      HookOutcome = "ask"
	HookDeny     HookOutcome = "deny"
	HookNone     HookOutcome = "none"
	HookFailed   HookOutcome = "failed"
	HookTimedOut HookOutcome = "timed_out"
)

// Valid reports whether o is one of the outcomes above.
func (o HookOutcome) Valid() bool {
	switch o {
	case HookAllow, HookAsk, HookDeny, HookNone, HookFailed, HookTimedOut:
		return true
	}
	return false
}

// The events a hook runs at.
const (
	HookPre  = "pre"
	HookPost = "post"
)

// HookRun records one run of a user hook (Claude Code's and Gemini CLI's
// hooks, as the executor runs them) around an invocation, on SubjectHook:
// a pre hook before the tool runs, a post hook after. The result says what
// a pre hook's deny did to the call; this event says what every hook
// answered, including those that changed nothing and those that failed.
type HookRun struct {
	Header
	InvocationID string `json:"invocationId"`
	Tool         string `json:"tool"`
	// Event is HookPre or HookPost; AgentEvent the name in the file the
	// hook came from (PreToolUse, BeforeTool, …).
	Event      string `json:"event"`
	AgentEvent string `json:"agentEvent,omitempty"`
	// Hook names the hook: its name, else its command; Command is the
	// command in full and File the settings file it came from, when it
	// came from one.
	Hook    string      `json:"hook"`
	Command string      `json:"command,omitempty"`
	File    string      `json:"file,omitempty"`
	Outcome HookOutcome `json:"outcome"`
	// Message is the hook's reason, feedback or what went wrong.
	Message string `json:"message,omitempty"`
	// ExitCode is the hook's exit status, absent when it did not exit
	// (killed, not started, a function hook).
	ExitCode       *int  `json:"exitCode,omitempty"`
	DurationMillis int64 `json:"durationMillis"`
}

// EnvelopeType implements Envelope.
func (*HookRun) EnvelopeType() string { return "tool.hook" }

// Validate implements Envelope.
func (h *HookRun) Validate() error {
	typ := h.EnvelopeType()
	if err := h.header().validateAbout(typ, h.InvocationID); err != nil {
		return err
	}
	switch {
	case h.Event != HookPre && h.Event != HookPost:
		return invalid(typ, "event %q is neither %q nor %q", h.Event, HookPre, HookPost)
	case h.Hook == "":
		return invalid(typ, "hook is empty")
	case !h.Outcome.Valid():
		return invalid(typ, "unknown outcome %q", h.Outcome)
	case h.DurationMillis < 0:
		return invalid(typ, "durationMillis is negative")
	}
	return nil
}
