package toolbus_test

import data.toolbus

in_session(inp, calls, repeats) := object.union(inp, {"caller": {"session": "s1"}, "session": {"calls": calls, "repeats": repeats}})

# in_no_session: counts of a caller that names no session.
in_no_session(inp, calls, repeats) := object.union(inp, {"caller": {"session": ""}, "session": {"calls": calls, "repeats": repeats}})

write_k := file_tool("write_file", "edit", ["/w/k.txt"])

write_k_remembered := object.union(write_k, {"allowlist": [{"scope": "path", "tool": "write_file", "path": "/w/k.txt"}]})

# The kinds that change things ask at the fifth repeat, and not before,
# also when an "always" answer covers the call; the answer to that ask
# is not remembered.
test_fifth_repeat_of_a_mutating_call_asks if {
	every kind in ["edit", "delete", "move", "execute"] {
		inp := object.union(file_tool("t", kind, ["/w/k.txt"]), {"allowlist": [{"scope": "tool", "tool": "t"}]})
		verdict(in_session(inp, 4, 4)) == "ALLOW"
		d := toolbus.decision with input as in_session(inp, 5, 5)
		d.verdict == "ASK_USER"
		contains(d.reason, "made this same call 5 times")
		d.remember == false
		verdict(in_session(inp, 9, 6)) == "ASK_USER"
	}
}

test_fifth_repeat_not_turned_into_allow_by_a_remembered_path if {
	verdict(in_session(write_k_remembered, 10, 4)) == "ALLOW"
	verdict(in_session(write_k_remembered, 10, 5)) == "ASK_USER"
}

test_fifth_repeat_of_a_remembered_command_asks if {
	inp := object.union(shell([cmd("make", ["build"])]), {"allowlist": remember_entries([{"argv": ["make", "build"], "exact": true}])})
	verdict(in_session(inp, 4, 4)) == "ALLOW"
	verdict(in_session(inp, 5, 5)) == "ASK_USER"
}

# Reading, searching and thinking may repeat: they change nothing.
test_repeated_reads_allowed if {
	every kind in ["read", "search", "think"] {
		verdict(in_session(file_tool("t", kind, ["/w/k.txt"]), 50, 50)) == "ALLOW"
	}
}

test_the_repeats_threshold_is_data if {
	verdict(in_session(write_k_remembered, 10, 2)) == "ASK_USER" with data.toolbus.session.repeat_asks_at as 2
	verdict(in_session(write_k_remembered, 10, 1)) == "ALLOW" with data.toolbus.session.repeat_asks_at as 2
}

# A session past its budget is denied, whatever the call, and says why;
# at the budget it is not.
test_session_past_its_budget_denied if {
	d := toolbus.decision with input as in_session(file_tool("read_file", "read", ["/w/k.txt"]), 2001, 1)
	d.verdict == "DENY"
	contains(d.reason, "made 2001 calls, past its budget of 2000")
	verdict(in_session(file_tool("read_file", "read", ["/w/k.txt"]), 2000, 1)) == "ALLOW"
	verdict(in_session(write_k_remembered, 2001, 1)) == "DENY"
}

test_the_budget_is_data if {
	verdict(in_session(file_tool("read_file", "read", ["/w/k.txt"]), 4, 1)) == "DENY" with data.toolbus.session.call_budget as 3
	verdict(in_session(file_tool("read_file", "read", ["/w/k.txt"]), 3, 1)) == "ALLOW" with data.toolbus.session.call_budget as 3
}

# A call shown no counts (a policy replayed on a record from before they
# were counted) is judged without the loop guards.
test_no_counts_no_loop_guard if {
	verdict(write_k_remembered) == "ALLOW"
	verdict(file_tool("read_file", "read", ["/w/k.txt"])) == "ALLOW"
}

# A caller that names no session is counted all the same: its fifth
# repeat asks, and its calls without a session have a budget of their
# own, far above a session's.
test_a_call_without_a_session_is_guarded if {
	verdict(in_no_session(write_k_remembered, 10, 4)) == "ALLOW"
	d := toolbus.decision with input as in_no_session(write_k_remembered, 10, 5)
	d.verdict == "ASK_USER"
	contains(d.reason, "made this same call 5 times")
	verdict(in_no_session(file_tool("read_file", "read", ["/w/k.txt"]), 100000, 1)) == "ALLOW"
	past := toolbus.decision with input as in_no_session(file_tool("read_file", "read", ["/w/k.txt"]), 100001, 1)
	past.verdict == "DENY"
	contains(past.reason, "made 100001 calls without naming a session, past the budget of 100000")
}

# Each budget is its own: a session's does not apply to calls without
# one, nor theirs to a session's.
test_the_budgets_apart if {
	verdict(in_no_session(file_tool("read_file", "read", ["/w/k.txt"]), 2001, 1)) == "ALLOW"
	verdict(in_session(file_tool("read_file", "read", ["/w/k.txt"]), 2001, 1)) == "DENY"
	verdict(in_no_session(file_tool("read_file", "read", ["/w/k.txt"]), 4, 1)) == "DENY" with data.toolbus.session.sessionless_call_budget as 3
	verdict(in_no_session(file_tool("read_file", "read", ["/w/k.txt"]), 3, 1)) == "ALLOW" with data.toolbus.session.sessionless_call_budget as 3
	verdict(in_session(file_tool("read_file", "read", ["/w/k.txt"]), 4, 1)) == "ALLOW" with data.toolbus.session.sessionless_call_budget as 3
}

# The person in front of the agent may confirm its edits through the
# agent's own client, but not a loop of them: that goes to the fleet's
# approvers.
test_a_loop_is_not_confirmed_through_the_agents_client if {
	inp := object.union(write_k, {"caller": {"id": "agent:test", "session": "s1"}})
	toolbus.elicitation_allowed with input as in_session(inp, 10, 4)
	not toolbus.elicitation_allowed with input as in_session(inp, 10, 5)
}
