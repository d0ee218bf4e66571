package toolbus_test

import data.toolbus

hook_script := {"path": "/w/scripts/lint.sh", "of": "/w/scripts", "by": "the PostToolUse hook \"./scripts/lint.sh\" of .claude/settings.json"}

protected_call(name, kind) := object.union(file_tool(name, kind, ["/w/scripts/lint.sh"]), {"protected": [hook_script]})

# Every kind that may change files asks, and says which code and why,
# also when an "always" covers the tool, and the answer is not remembered.
test_a_change_to_protected_code_asks_past_an_always if {
	every kind in ["edit", "delete", "move", "execute", "fetch", "other"] {
		inp := object.union(protected_call("t", kind), {"allowlist": [{"scope": "tool", "tool": "t"}]})
		verdict(object.union(inp, {"protected": []})) == "ALLOW"
		d := toolbus.decision with input as inp
		d.verdict == "ASK_USER"
		contains(d.reason, "/w/scripts/lint.sh is code toolbus runs (the PostToolUse hook")
		d.remember == false
	}
}

test_a_remembered_path_does_not_cover_protected_code if {
	inp := object.union(protected_call("write_file", "edit"), {"allowlist": [{"scope": "path", "tool": "write_file", "path": "/w/scripts/lint.sh"}]})
	verdict(object.union(inp, {"protected": []})) == "ALLOW"
	verdict(inp) == "ASK_USER"
}

test_a_remembered_command_does_not_cover_protected_code if {
	inp := object.union(shell([cmd("make", ["-f", "scripts/lint.sh"])]), {
		"allowlist": remember_entries([{"argv": ["make", "-f", "scripts/lint.sh"], "exact": true}]),
		"protected": [hook_script],
	})
	verdict(object.union(inp, {"protected": []})) == "ALLOW"
	verdict(inp) == "ASK_USER"
}

# Reading the code changes nothing; a trusted MCP server's read is a read.
test_reading_protected_code_is_a_read if {
	every kind in ["read", "search", "think"] {
		verdict(protected_call("t", kind)) == "ALLOW"
	}
	trusted := object.union(protected_call("t", "read"), {"tool": {"name": "t", "kind": "read", "source": "mcp", "server": "fs", "trust": true}})
	verdict(trusted) == "ALLOW"
}

# What toolbus cannot vouch for changes nothing is asked about, even a
# read: an untrusted MCP server's tool, the project's discovered code.
test_an_untrusted_read_of_protected_code_asks_always if {
	untrusted := object.union(protected_call("t", "read"), {"tool": {"name": "t", "kind": "read", "source": "mcp", "server": "fs", "trust": false}, "allowlist": [{"scope": "server", "server": "fs"}]})
	d := toolbus.decision with input as untrusted
	d.verdict == "ASK_USER"
	contains(d.reason, "is code toolbus runs")
	discovered_read := object.union(protected_call("t", "read"), {"tool": {"name": "t", "kind": "read", "source": "discovered"}})
	d2 := toolbus.decision with input as discovered_read
	d2.verdict == "ASK_USER"
	contains(d2.reason, "is code toolbus runs")
}

# The agent's own client may not answer: the agent would approve the
# change to the code that judges it.
test_the_agents_own_user_is_not_asked_about_protected_code if {
	toolbus.elicitation_allowed with input as agent_call("write_file", "edit")
	not toolbus.elicitation_allowed with input as object.union(agent_call("write_file", "edit"), {"protected": [hook_script]})
	toolbus.elicitation_allowed with input as object.union(agent_call("read_file", "read"), {"protected": [hook_script]})
}

# A sensitive path stays denied: protecting asks, it never allows.
test_protected_never_turns_a_deny_into_a_question if {
	inp := object.union(file_tool("write_file", "edit", ["/w/.env"]), {"protected": [{"path": "/w/.env", "of": "/w/.env", "by": "x"}]})
	verdict(inp) == "DENY"
}
