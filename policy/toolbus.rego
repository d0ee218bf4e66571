# The default toolbus policy. It mirrors Gemini CLI and Claude Code:
# reading, searching and thinking are allowed; edits, deletions, moves,
# commands and fetches ask the user; tools of a trusted MCP server are
# allowed; dangerous commands and sensitive paths are denied, whatever the
# kind, the trust or the allowlist says. See README.md for the input and
# output shapes.
package toolbus

# Kinds that run without asking (seed 003: no confirmation needed).
safe_kinds := {"read", "search", "think"}

# Kinds that ask the user: the mutators of seed 003, and fetch.
asking_kinds := {"edit", "delete", "move", "execute", "fetch"}

# Tools whose "always allow" answers may not be remembered: every call of
# them is asked about. Empty by default; a policy team adds names here.
never_remember := set()

# decision is what the executor enforces. Deny first, always.
default decision := {"verdict": "DENY", "reason": "the policy reached no decision", "remember": false}

decision := {"verdict": "DENY", "reason": concat("; ", sort(deny)), "remember": false} if {
	count(deny) > 0
} else := {"verdict": "ALLOW", "reason": sort(allow)[0], "remember": false} if {
	count(allow) > 0
} else := {"verdict": "ALLOW", "reason": sort(allowlisted)[0], "remember": false} if {
	count(allowlisted) > 0
} else := {"verdict": "ASK_USER", "reason": ask_reason, "remember": rememberable}

ask_reason := concat("; ", sort(ask)) if {
	count(ask) > 0
} else := concat("", [input.tool.kind, " tools ask the user"])

rememberable := false if {
	input.tool.name in never_remember
} else := true

untrusted_mcp if {
	input.tool.source == "mcp"
	not input.tool.trust
}

# --- allow -----------------------------------------------------------------

allow contains concat("", [input.tool.kind, " tools are allowed"]) if {
	input.tool.kind in safe_kinds
	not untrusted_mcp
}

allow contains sprintf("MCP server %q is trusted", [input.tool.server]) if {
	input.tool.source == "mcp"
	input.tool.trust
}

# --- ask -------------------------------------------------------------------

ask contains concat("", [input.tool.kind, " tools ask the user"]) if input.tool.kind in asking_kinds

ask contains sprintf("tools of MCP server %q ask the user: the server is not trusted", [input.tool.server]) if untrusted_mcp

# --- allowlist: turns ASK_USER into ALLOW, never DENY ----------------------

allowlisted contains sprintf("MCP server %q is on the allowlist", [input.tool.server]) if {
	some e in input.allowlist
	e.scope == "server"
	input.tool.source == "mcp"
	e.server == input.tool.server
}

allowlisted contains sprintf("%q is on the allowlist", [input.tool.name]) if {
	some e in input.allowlist
	e.scope == "tool"
	e.tool == input.tool.name
}

# A shell line is allowlisted only when every command in it is.
allowlisted contains sprintf("every command is on the allowlist for %q", [input.tool.name]) if {
	count(input.shell.commands) > 0
	not input.shell.parseError
	every c in input.shell.commands {
		some e in input.allowlist
		e.scope == "command"
		e.tool == input.tool.name
		command_has_prefix(c, e.prefix)
	}
}

# An edit is allowlisted when every path it touches is.
allowlisted contains sprintf("every path is on the allowlist for %q", [input.tool.name]) if {
	count(input.paths) > 0
	every p in input.paths {
		some e in input.allowlist
		e.scope == "path"
		e.tool == input.tool.name
		e.path == p
	}
}

command_has_prefix(c, prefix) if {
	c.literal
	words := split(prefix, " ")
	argv := array.concat([c.name], c.args)
	count(argv) >= count(words)
	array.slice(argv, 0, count(words)) == words
}

# --- deny: dangerous commands (seed 004) ------------------------------------

# The shell rules are looked at only for shell tools: one test for every
# other call, not one per rule.
deny contains reason if {
	input.shell
	some reason in shell_deny
}

shell_deny contains sprintf("the shell command cannot be parsed, so it cannot be judged: %s", [input.shell.parseError]) if {
	input.shell.parseError
}

shell_deny contains sprintf("dangerous command %q: recursive removal of %s", [c.text, t]) if {
	some c in input.shell.commands
	c.name == "rm"
	recursive(c.args)
	some t in c.args
	regex.match(`^(/[/.]*\*?|~|~/|~/\*|"?(\$HOME|\$\{HOME\})"?/?\*?"?|/(bin|boot|dev|etc|home|lib|lib32|lib64|opt|proc|root|sbin|srv|sys|usr|var)/?\*?)$`, t)
}

shell_deny contains sprintf("dangerous command %q: --no-preserve-root", [c.text]) if {
	some c in input.shell.commands
	"--no-preserve-root" in c.args
}

shell_deny contains sprintf("fork bomb: shell function %q calls itself", [f.name]) if {
	some f in input.shell.functions
	f.recursive
}

shell_deny contains sprintf("dangerous command %q: dd writes onto the disk %s", [c.text, dev]) if {
	some c in input.shell.commands
	c.name == "dd"
	some a in c.args
	startswith(a, "of=")
	dev := substring(a, 3, -1)
	disk_device(dev)
}

shell_deny contains sprintf("dangerous command %q: makes a file system on %s", [c.text, dev]) if {
	some c in input.shell.commands
	startswith(c.name, "mkfs")
	some dev in c.args
	disk_device(dev)
}

shell_deny contains sprintf("dangerous redirection: writes onto the disk %s", [r.target]) if {
	some r in input.shell.redirects
	r.op in {">", ">>", ">|", "&>", "&>>", "<>"}
	disk_device(r.target)
}

recursive(args) if {
	some a in args
	a in {"-r", "-R", "--recursive"}
}

recursive(args) if {
	some a in args
	regex.match(`^-[a-zA-Z]*[rR][a-zA-Z]*$`, a)
}

disk_device(p) if regex.match(`^/dev/(sd[a-z]+|hd[a-z]+|vd[a-z]+|xvd[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+|disk[0-9]+)`, p)

# --- deny: sensitive paths ---------------------------------------------------

deny contains sprintf("sensitive path %s", [p]) if some p in denied_paths

# denied_paths are the paths of the call that no call may touch. Tools that
# choose their files themselves (search_file_content, read_many_files) ask
# this rule about each file they find and skip the ones in it.
denied_paths contains p if {
	some p in input.paths
	sensitive(p)
}

sensitive_files := {"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/passwd", "/etc/master.passwd"}

# .env files hold secrets; their templates do not.
env_templates := {".env.example", ".env.sample", ".env.template", ".env.dist"}

# Two bodies in all, a set lookup and one cached regular expression:
# this runs for every path of every call, and each rule body costs.
sensitive(p) if p in sensitive_files

sensitive(p) if {
	regex.match(`^/etc/sudoers\.d/|(^|/)\.(ssh|gnupg|azure)(/|$)|/\.aws/(credentials|config)$|/\.kube/config$|/\.docker/config\.json$|/\.(netrc|git-credentials|pgpass)$|/\.config/gcloud(/|$)|/\.env(\.[A-Za-z0-9_-]+)?$`, p)
	not env_template(p)
}

env_template(p) if {
	some t in env_templates
	endswith(p, concat("", ["/", t]))
}
