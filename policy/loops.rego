# Loop guards: a model that loops makes the same call again and again, or
# never stops calling. For a call whose caller names a session, the
# executor shows the policy what the fleet counted of that session
# (input.session, see README.md): its calls, and how many times it made
# this very call (the same tool, the same arguments) in the last minutes,
# this call included in both. A person is asked about a mutating call
# repeated repeat_asks_at times or more, and a session past its budget of
# calls is denied. A call without a session has no input.session, and
# these rules leave it alone.
package toolbus

# The number of repeats of one mutating call at which a person is asked,
# this one and every one after it.
repeat_asks_at := 5

# The calls a session may make; past them every call of it is denied.
session_call_budget := 2000

# The kinds whose repeats are asked about: those that change things.
loop_kinds := {"edit", "delete", "move", "execute"}

# looping: the session repeats a call that changes things.
looping if {
	input.tool.kind in loop_kinds
	input.session.repeats >= repeat_asks_at
}

# Through ask_always (toolbus.rego): a remembered approval of the tool,
# the path or the command does not turn it into ALLOW, and the answer is
# not remembered. Nor is the agent's own client asked (approvers.rego,
# elicitation_allowed): a looping agent's client may answer for it.
ask_always contains sprintf("this session made this same call %d times in the last minutes: a person confirms it should go on (from %d times, each repeat is asked)", [input.session.repeats, repeat_asks_at]) if {
	looping
}

deny contains sprintf("this session made %d calls, past its budget of %d: start a new session to go on", [input.session.calls, session_call_budget]) if {
	input.session.calls > session_call_budget
}
