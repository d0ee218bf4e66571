# Code toolbus runs on its settings' owner's account: the scripts of the
# hooks, of the discovery and call commands and of the stdio MCP servers.
# The executor derives them from the settings (internal/protect) and shows
# the policy which of a call's paths are among them (input.protected, see
# README.md). Such code keeps the rights its owner gave it (a hook's
# verdict counts, a discovered tool's declaration is believed), so a change
# to it is a change to the policy: a person confirms every one, a
# remembered approval does not cover it, and the answer is not remembered.
# Nor is the agent's own client asked (approvers.rego,
# elicitation_allowed): the agent that would change the code would answer.
package toolbus

# protected_changes are the protected paths of a call that may change
# files: anything but reading, searching and thinking with a tool that
# toolbus knows to change nothing (not an untrusted MCP server's, not the
# project's own discovered code, which may do what they like).
protected_changes contains p if {
	not changes_nothing
	some p in input.protected
}

changes_nothing if {
	input.tool.kind in safe_kinds
	not untrusted_mcp
	not discovered
}

changes_protected if count(protected_changes) > 0

ask_always contains sprintf("%s is code toolbus runs (%s): a person confirms every change to it", [p.path, p.by]) if {
	some p in protected_changes
}
