package toolbus_test

import data.toolbus

approver(id) := {"id": id, "role": "approver", "user": "ada"}

shell_call(paths) := object.union(shell([cmd("ls", ["/etc"])]), {"paths": paths, "caller": {"id": "agent:gemini", "role": "agent", "user": "ada"}})

allowed(inp, who) if {
	toolbus.approver_allowed with input as object.union(inp, {"approver": who, "answer": {"outcome": "proceed_once"}})
}

denied(inp, who) := d if {
	d := toolbus.approver_denied with input as object.union(inp, {"approver": who, "answer": {"outcome": "proceed_once"}})
}

test_a_person_may_approve_an_agents_call if {
	allowed(shell_call(["/w"]), approver("approver:ada@dev-1"))
}

test_the_same_user_may_approve_the_agent_acting_for_them if {
	# The agent's user is ada; ada approving her agent's call is the point.
	allowed(file_tool("write_file", "edit", ["/w/a.txt"]), approver("approver:ada@dev-1"))
}

test_nobody_approves_their_own_call if {
	inp := shell_call(["/w"])
	not allowed(inp, {"id": "agent:gemini", "role": "approver"})
	some reason in denied(inp, {"id": "agent:gemini", "role": "approver"})
	contains(reason, "nobody may approve a call they made")
}

test_only_the_approver_role_answers if {
	not allowed(shell_call(["/w"]), {"id": "agent:other", "role": "agent"})
	not allowed(shell_call(["/w"]), {"id": "executor@dev-1", "role": "executor"})
	not allowed(shell_call(["/w"]), {"id": "someone"})
}

test_no_approver_is_refused if {
	not toolbus.approver_allowed with input as shell_call(["/w"])
}

test_security_group_empty_takes_no_part if {
	allowed(shell_call(["/w", "/etc"]), approver("approver:ada@dev-1"))
}

test_only_security_approves_shell_outside_the_workspace if {
	groups := {"security": {"approver:sam"}}
	outside := shell_call(["/w", "/etc"])
	not allowed(outside, approver("approver:ada@dev-1")) with toolbus.approver_groups as groups
	allowed(outside, approver("approver:sam")) with toolbus.approver_groups as groups
	some reason in denied(outside, approver("approver:ada@dev-1")) with toolbus.approver_groups as groups
	contains(reason, "only the security group may approve run_shell_command outside the workspace (/etc)")

	# Inside the workspace anyone with the role may.
	allowed(shell_call(["/w", "/w/src", "/dev/null"]), approver("approver:ada@dev-1")) with toolbus.approver_groups as groups

	# Not a shell line: the group rule does not apply.
	allowed(file_tool("write_file", "edit", ["/etc/x"]), approver("approver:ada@dev-1")) with toolbus.approver_groups as groups
}

test_security_member_still_cannot_approve_own_call if {
	groups := {"security": {"agent:gemini"}}
	not allowed(shell_call(["/etc"]), {"id": "agent:gemini", "role": "approver"}) with toolbus.approver_groups as groups
}

flags(inp) := f if {
	f := toolbus.flagged with input as inp
}

test_flagged_commands_not_on_the_allowlist if {
	inp := object.union(shell([cmd("git", ["status"]), cmd("make", ["test"])]), {"allowlist": [{"scope": "command", "tool": "run_shell_command", "argv": ["git", "status"], "exact": true}]})
	f := flags(inp)
	{"text": "make test", "why": "not on the allowlist"} in f
	not {"text": "git status", "why": "not on the allowlist"} in f
}

test_flagged_code_runners_paths_and_writes if {
	c := object.union(cmd("bash", ["-c", "x"]), {"wrappers": ["sudo"]})
	inp := object.union(shell([c]), {"paths": ["/w", "/etc/passwd"]})
	line := object.union(inp, {"shell": object.union(inp.shell, {"redirects": [{"op": ">", "target": "out.txt", "literal": true}, {"op": ">", "target": "/dev/null", "literal": true}], "opaque": ["a command substitution"]})})
	f := flags(line)
	{"text": "bash -c x", "why": "runs code or commands it is given; never remembered"} in f
	{"text": "bash -c x", "why": "run through sudo"} in f
	{"text": "/etc/passwd", "why": "outside the workspace"} in f
	{"text": "out.txt", "why": "output written to a file"} in f
	not {"text": "/dev/null", "why": "output written to a file"} in f
	{"text": "a command substitution", "why": "not understood by the analyser"} in f
}

test_nothing_flagged_for_other_tools if {
	count(flags(file_tool("write_file", "edit", ["/etc/x"]))) == 0
}
