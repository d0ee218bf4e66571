# Who may answer a confirmation request, and what an approver is pointed
# at. See README.md: "Output: data.toolbus.approver_allowed" and
# "Output: data.toolbus.flagged".
package toolbus

# --- approvers: data a policy team edits ---------------------------------------

# Groups of approvers, by the id their answers carry. A group left empty
# takes no part in the rules below: the default policy ships the rule, a
# policy team names the people.
approver_groups := {"security": set()}

# --- approver_allowed ------------------------------------------------------------

# The executor asks about every answer, with the call's input plus
# input.approver (the identity the answer names) and input.answer.outcome.
# Any reason in approver_denied refuses it: the answer is ignored, recorded
# on tool.confirm.rejected, and the approver is told the reasons.
default approver_allowed := false

approver_allowed if count(approver_denied) == 0

# Answering is the approver role's, and the agent user's where the rules
# below let them: an agent or an executor naming itself is not a person
# deciding.
approver_denied contains sprintf("%q answers as %q; only the approver role may answer", [approver.id, approver.role]) if {
	not approver.role in {"approver", "agent-user"}
}

approver_denied contains "the answer names no approver" if approver.id == ""

# approver is input.approver with every field there: the answering
# identity (id, role, session), and the person behind it: person (their
# email or name, or the member's id), groups (from their OpenID provider,
# only when proven), proven (the bus proved the approver, and the approver
# proved the person: an OpenID sign-in, or an identity of their own) and
# via (console, terminal, agent-user).
approver := {
	"id": object.get(approver_input, "id", ""),
	"role": object.get(approver_input, "role", ""),
	"session": object.get(approver_input, "session", ""),
	"person": object.get(approver_input, "person", ""),
	"groups": object.get(approver_input, "groups", []),
	"proven": object.get(approver_input, "proven", false),
	"via": object.get(approver_input, "via", ""),
}

# approver_input is input.approver, or nothing for an answer that names
# none. Read by its name, not as object.get(input, ...): a policy that
# reads the input whole might read input.session, and a call is then
# counted for it and its decision never cached (policy.ReadsSession).
default approver_input := {}

approver_input := input.approver

# Nobody approves a call they made: an agent that answers its own request
# would approve whatever it was talked into.
approver_denied contains sprintf("%s made this call, and nobody may approve a call they made", [approver.id]) if {
	approver.id == input.caller.id
}

# A shell line that reaches outside the workspace is the security group's
# to approve, once the group has members.
approver_denied contains sprintf("only the security group may approve %s outside the workspace (%s)", [input.tool.name, outside_workspace[0]]) if {
	input.shell
	count(outside_workspace) > 0
	count(approver_groups.security) > 0
	not approver.id in approver_groups.security
}

outside_workspace := sort([p | some p in input.paths; not in_workspace_or_harmless(p)])

# --- the agent user: the person in front of the calling agent -------------------

# The executor may put a confirmation request to the person in front of the
# agent that made the call, through the agent's own client (an MCP
# elicitation), when the caller says it can. This says for which calls.
# Off for the kinds that destroy or run things: those go to the fleet's
# approvers, whom a prompt-injected agent cannot reach through its own
# client (some clients answer elicitations without asking anyone). An edit
# is shown to that person as its diff. Off too for discovered tools (the
# project's own code, run with the agent's arguments) and for a call a
# user's hook asked a person about: the hook asked for a person, and the
# agent's client may be no person at all; and for a call repeated in a
# loop (loops.rego), which a looping agent's client could go on answering.
elicitation_off_kinds := {"delete", "move", "execute"}

default elicitation_allowed := false

elicitation_allowed if {
	not input.tool.kind in elicitation_off_kinds
	not input.shell
	input.tool.source != "discovered"
	not input.hookAsked
	not data.toolbus.session.looping
	not changes_protected
}

# An agent user answers for the calls of the agent and session they are in
# front of, and nothing else.
approver_denied contains "the policy does not let the agent's own user confirm this call" if {
	approver.role == "agent-user"
	not elicitation_allowed
}

approver_denied contains sprintf("%s answers only for the calls of the agent it is in front of, and this is %s's", [approver.id, input.caller.id]) if {
	approver.role == "agent-user"
	approver.id != concat("", ["user-of:", input.caller.id])
}

approver_denied contains sprintf("%s answers only for the calls of its own session", [approver.id]) if {
	approver.role == "agent-user"
	approver.session != object.get(input.caller, "session", "")
}

# Remembering an approval changes what the whole fleet may run, and an
# edited call is a new call: both are the fleet's approvers' to give.
approver_denied contains sprintf("the agent's own user may allow a call once or cancel it, not %s", [input.answer.outcome]) if {
	approver.role == "agent-user"
	not input.answer.outcome in {"proceed_once", "cancel"}
}

# --- flagged: the parts of a call an approver is pointed at ----------------------

# Shown beside a confirmation request, highlighted in the command line.
# Each is {"text": what to highlight, "why": a few words}.
flagged contains {"text": c.text, "why": "not on the allowlist"} if {
	input.shell
	some c in input.shell.commands
	not c.name in remember_never
	not remembered_command(c)
}

flagged contains {"text": c.text, "why": "runs code or commands it is given; never remembered"} if {
	input.shell
	some c in input.shell.commands
	c.name in remember_never
}

flagged contains {"text": c.text, "why": sprintf("run through %s", [w])} if {
	input.shell
	some c in input.shell.commands
	some w in c.wrappers
	w in privileged_wrappers
}

flagged contains {"text": p, "why": "outside the workspace"} if {
	input.shell
	some p in outside_workspace
}

flagged contains {"text": r.target, "why": "output written to a file"} if {
	input.shell
	some r in shell_redirects
	not write_allowed_alone(r)
}

flagged contains {"text": o, "why": "not understood by the analyser"} if {
	input.shell
	some o in input.shell.opaque
}

shell_redirects contains r if some r in input.shell.redirects

shell_redirects contains r if {
	some c in input.shell.commands
	some r in c.redirects
}
