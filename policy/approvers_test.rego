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

# --- the agent user ---------------------------------------------------------------

agent_call(name, kind) := object.union(file_tool(name, kind, ["/w/a.txt"]), {"caller": {"id": "agent:gemini", "role": "agent", "session": "s1"}})

agent_user := {"id": "user-of:agent:gemini", "role": "agent-user", "session": "s1"}

answered(inp, who, outcome) := object.union(inp, {"approver": who, "answer": {"outcome": outcome}})

test_elicitation_is_allowed_for_edits_and_fetches_not_for_destructive_kinds if {
	toolbus.elicitation_allowed with input as agent_call("write_file", "edit")
	toolbus.elicitation_allowed with input as agent_call("web_fetch", "fetch")
	toolbus.elicitation_allowed with input as agent_call("some_mcp_tool", "other")
	not toolbus.elicitation_allowed with input as agent_call("delete_file", "delete")
	not toolbus.elicitation_allowed with input as agent_call("move_file", "move")
	not toolbus.elicitation_allowed with input as agent_call("run_tests", "execute")
	not toolbus.elicitation_allowed with input as shell_call(["/w"])
}

# Fixed answers: a discovered tool of a kind that is otherwise open to the
# agent's user, and an edit a hook asked about, are the fleet's approvers'.
test_elicitation_is_off_for_discovered_tools if {
	toolbus.elicitation_allowed with input as object.union(agent_call("lint", "other"), {"tool": {"name": "lint", "kind": "other", "source": "builtin"}})
	not toolbus.elicitation_allowed with input as object.union(agent_call("lint", "other"), {"tool": {"name": "lint", "kind": "other", "source": "discovered"}})
	not toolbus.elicitation_allowed with input as object.union(agent_call("lint", "read"), {"tool": {"name": "lint", "kind": "read", "source": "discovered"}})
}

test_elicitation_is_off_for_calls_a_hook_asked_about if {
	toolbus.elicitation_allowed with input as object.union(agent_call("write_file", "edit"), {"hookAsked": false})
	not toolbus.elicitation_allowed with input as object.union(agent_call("write_file", "edit"), {"hookAsked": true})
	inp := object.union(agent_call("write_file", "edit"), {"hookAsked": true})
	not toolbus.approver_allowed with input as answered(inp, agent_user, "proceed_once")
}

test_the_agent_user_may_allow_once_or_cancel_their_agents_call if {
	inp := agent_call("write_file", "edit")
	toolbus.approver_allowed with input as answered(inp, agent_user, "proceed_once")
	toolbus.approver_allowed with input as answered(inp, agent_user, "cancel")
}

test_the_agent_user_may_not_remember_or_edit if {
	inp := agent_call("write_file", "edit")
	every outcome in ["proceed_always", "proceed_always_tool", "proceed_always_server", "modify_with_editor"] {
		not toolbus.approver_allowed with input as answered(inp, agent_user, outcome)
	}
}

test_the_agent_user_answers_for_no_other_agent_or_session if {
	inp := agent_call("write_file", "edit")
	other_agent := object.union(agent_user, {"id": "user-of:agent:claude"})
	not toolbus.approver_allowed with input as answered(inp, other_agent, "proceed_once")
	some reason in toolbus.approver_denied with input as answered(inp, other_agent, "proceed_once")
	contains(reason, "answers only for the calls of the agent it is in front of")
	other_session := object.union(agent_user, {"session": "s2"})
	not toolbus.approver_allowed with input as answered(inp, other_session, "proceed_once")
	no_session := {"id": "user-of:agent:gemini", "role": "agent-user"}
	not toolbus.approver_allowed with input as answered(inp, no_session, "proceed_once")
}

test_the_agent_user_may_not_answer_where_elicitation_is_off if {
	inp := object.union(agent_call("delete_file", "delete"), {"caller": {"id": "agent:gemini", "role": "agent", "session": "s1"}})
	not toolbus.approver_allowed with input as answered(inp, agent_user, "proceed_once")
	some reason in toolbus.approver_denied with input as answered(inp, agent_user, "proceed_once")
	contains(reason, "does not let the agent's own user confirm this call")

	# A fleet approver still may.
	toolbus.approver_allowed with input as answered(inp, approver("approver:ada@dev-1"), "proceed_once")
}

test_an_agent_naming_itself_agent_user_of_itself_is_still_its_own_caller if {
	# The agent's own id, with the agent-user role: the self-approval rule
	# holds whatever the role says.
	inp := agent_call("write_file", "edit")
	not toolbus.approver_allowed with input as answered(inp, {"id": "agent:gemini", "role": "agent-user", "session": "s1"}, "proceed_once")
}
