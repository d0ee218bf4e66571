# Loop guards: a model that loops makes the same call again and again, or
# never stops calling. For every call the executor shows the policy what
# the fleet counted of its caller (input.session, see README.md): the
# calls of its session (for a caller that names none, its calls without
# one), and how many times the caller made this very call (the same tool,
# the same arguments) in the last minutes, in any session or none, this
# call included in both. A person is asked about a mutating call repeated
# repeat_asks_at times or more, and a session past its budget of calls is
# denied. Renaming the session, or naming none, escapes neither count.
#
# This package is the one part of the policy that reads input.session;
# the rest reads what it concludes (data.toolbus.session: ask, deny,
# looping). The counts change with every call, what this package
# concludes from them seldom does: the executor evaluates this package on
# every call and reuses the decision the rest made for the same call and
# the same conclusions (README.md, "Session counts").
package toolbus.session

# The number of repeats of one mutating call at which a person is asked,
# this one and every one after it.
repeat_asks_at := 5

# The calls a session may make; past them every call of it is denied.
call_budget := 2000

# The calls a caller may make without naming a session, all of them one
# session that never ends (until a day passes without a call): past them
# every such call is denied. Far above a session's, so that a client that
# never names one (a script, a long-running service) is not cut off,
# while a model that never stops calling still meets an end; the repeats
# are what catch a loop.
sessionless_call_budget := 100000

# named: the caller names its session.
named if input.caller.session != ""

# The kinds whose repeats are asked about: those that change things.
loop_kinds := {"edit", "delete", "move", "execute"}

# looping: the session repeats a call that changes things.
looping if {
	input.tool.kind in loop_kinds
	input.session.repeats >= repeat_asks_at
}

# ask joins the policy's ask_always (toolbus.rego): a remembered approval
# of the tool, the path or the command does not turn it into ALLOW, and
# the answer is not remembered. Nor is the agent's own client asked
# (approvers.rego, elicitation_allowed): a looping agent's client may
# answer for it.
ask contains sprintf("this caller made this same call %d times in the last minutes, in any session: a person confirms it should go on (from %d times, each repeat is asked)", [input.session.repeats, repeat_asks_at]) if {
	looping
}

# deny joins the policy's deny (toolbus.rego).
deny contains sprintf("this session made %d calls, past its budget of %d: start a new session to go on", [input.session.calls, call_budget]) if {
	named
	input.session.calls > call_budget
}

deny contains sprintf("this caller made %d calls without naming a session, past the budget of %d for them", [input.session.calls, sessionless_call_budget]) if {
	not named
	input.session.calls > sessionless_call_budget
}
