# The default toolbus policy. It mirrors Gemini CLI and Claude Code:
# reading, searching and thinking are allowed; edits, deletions, moves,
# commands and fetches ask the user; tools of a trusted MCP server are
# allowed; dangerous commands and sensitive paths are denied, whatever the
# kind, the trust or the allowlist says. Tools found by a project's
# discovery command ask, whatever they call themselves, and an "always"
# for one holds in its executor's workspace only. See README.md for the input and
# output shapes. shell.rego holds the rules about shell lines, paths.rego
# those about sensitive files.
package toolbus

# Kinds that run without asking (seed 003: no confirmation needed).
safe_kinds := {"read", "search", "think"}

# Kinds that ask the user: the mutators of seed 003, and fetch.
asking_kinds := {"edit", "delete", "move", "execute", "fetch"}

# Tools whose "always allow" answers may not be remembered: every call of
# them is asked about. Empty by default; a policy team adds names here.
never_remember := set()

# decision is what the executor enforces. Deny first, always; then what
# must be asked about whatever else says (ask_always); then what is
# allowed, by rule or by a remembered approval; else ask.
default decision := {"verdict": "DENY", "reason": "the policy reached no decision", "remember": false}

decision := {"verdict": "DENY", "reason": concat("; ", sort(deny)), "remember": false} if {
	deny != set()
} else := {"verdict": "ASK_USER", "reason": concat("; ", sort(ask_always)), "remember": false} if {
	ask_always != set()
} else := {"verdict": "ALLOW", "reason": min(allow), "remember": false} if {
	allow != set()
} else := {"verdict": "ALLOW", "reason": min(allowlisted), "remember": false} if {
	allowlisted != set()
} else := {"verdict": "ASK_USER", "reason": ask_reason, "remember": rememberable}

ask_reason := concat("; ", sort(ask)) if {
	count(ask) > 0
} else := concat("", [input.tool.kind, " tools ask the user"])

# An "always" answer is offered only when it would remember something.
rememberable if count(remember_entries("proceed_always")) > 0

default rememberable := false

untrusted_mcp if {
	input.tool.source == "mcp"
	not input.tool.trust
}

# A tool of a project's discovery command runs the project's own code. Its
# executor declares it of kind other whatever the declaration says; this
# keeps it asking even if a kind it should not have reached the input.
discovered if input.tool.source == "discovered"

# --- allow -----------------------------------------------------------------

allow contains concat("", [input.tool.kind, " tools are allowed"]) if {
	input.tool.kind in safe_kinds
	not untrusted_mcp
	not discovered
}

allow contains sprintf("MCP server %q is trusted", [input.tool.server]) if {
	input.tool.source == "mcp"
	input.tool.trust
}

# A composite tool (defined in the settings an executor reads) is a name
# for steps, each a call of its own that this policy judges as if the
# caller had made it, denials and questions included: allowing the
# composite itself widens nothing, and asking about it too would ask
# twice. Deny rules (caller_denied_tools) still apply to it.
allow contains "composite tools are allowed: each of their steps is judged on its own" if {
	input.tool.kind == "composite"
	input.tool.source == "composite"
}

# --- ask -------------------------------------------------------------------

ask contains concat("", [input.tool.kind, " tools ask the user"]) if input.tool.kind in asking_kinds

ask contains sprintf("tools of MCP server %q ask the user: the server is not trusted", [input.tool.server]) if untrusted_mcp

ask contains "discovered tools ask the user: they run the project's own call command" if discovered

# ask_always holds reasons to ask that neither the kind nor a remembered
# approval can turn into ALLOW. Other files of the set add to it.
ask_always contains reason if {
	some reason in shell_ask_always
}

# The loop guards' questions and denials (loops.rego).
ask_always contains reason if {
	some reason in data.toolbus.session.ask
}

deny contains reason if {
	some reason in data.toolbus.session.deny
}

# --- allowlist: turns ASK_USER into ALLOW, never DENY ----------------------

allowlisted contains sprintf("MCP server %q is on the allowlist", [input.tool.server]) if {
	some e in input.allowlist
	e.scope == "server"
	input.tool.source == "mcp"
	e.server == input.tool.server
}

# A whole tool, but never a shell tool: those are remembered command by
# command (shell.rego); nor a discovered tool, nor by an entry kept for a
# discovered tool (one with a path).
allowlisted contains sprintf("%q is on the allowlist", [input.tool.name]) if {
	not input.shell
	not discovered
	some e in input.allowlist
	e.scope == "tool"
	e.tool == input.tool.name
	object.get(e, "path", "") == ""
}

# A discovered tool, by an entry kept for the tool of that name in the
# same workspace: another executor's discovery command may give the name to
# other code, and so may an MCP server.
allowlisted contains sprintf("%q is on the allowlist for the workspace %s", [input.tool.name, input.env.workspace]) if {
	discovered
	input.env.workspace != ""
	some e in input.allowlist
	e.scope == "tool"
	e.tool == input.tool.name
	e.path == input.env.workspace
}

# A shell line: every command on the allowlist, and nothing else in the
# line (shell.rego).
allowlisted contains sprintf("every command is on the allowlist for %q", [input.tool.name]) if {
	remembered_line
}

# An edit is allowlisted when every path it touches is.
allowlisted contains sprintf("every path is on the allowlist for %q", [input.tool.name]) if {
	not input.shell
	count(input.paths) > 0
	every p in input.paths {
		some e in input.allowlist
		e.scope == "path"
		e.tool == input.tool.name
		e.path == p
	}
}

# --- what an "always" answer remembers ---------------------------------------

# remember is what the executor stores when an approver answers "always"
# (input.answer.outcome): the entries the allowlist rules above match.
# Empty when the tool is in never_remember or nothing can be remembered.
remember := remember_entries(input.answer.outcome)

remember_entries(outcome) := set() if {
	input.tool.name in never_remember
} else := {{"scope": "server", "server": input.tool.server}} if {
	outcome == "proceed_always_server"
	input.tool.source == "mcp"
} else := shell_remember if {
	input.shell
} else := {{"scope": "tool", "tool": input.tool.name, "path": input.env.workspace} | input.env.workspace != ""} if {
	discovered
} else := {{"scope": "path", "tool": input.tool.name, "path": p} | some p in input.paths} if {
	input.tool.kind in {"edit", "delete", "move"}
	count(input.paths) > 0
} else := {{"scope": "tool", "tool": input.tool.name, "server": input.tool.server}}

# --- tools a caller may not call at all ----------------------------------------

# Tools a caller may not call, whatever the arguments: a caller's agent
# (input.caller.agent; "*" for every caller) to the tool names. Data a
# policy team edits; empty by default.
caller_denied_tools := {}

# tool_denied is asked with input.tool and input.caller alone: the MCP
# facade leaves a tool it names out of that caller's tool list. The
# decision denies such calls too, so the list and the decision agree.
tool_denied contains sprintf("%s is not available to %s", [input.tool.name, input.caller.id]) if {
	some agent, names in caller_denied_tools
	agent in {"*", object.get(input.caller, "agent", "")}
	input.tool.name in names
}

deny contains reason if some reason in tool_denied
