package toolbus_test

import data.toolbus

idempotent(inp) := i if {
	i := toolbus.idempotent with input as inp
}

test_reads_searches_and_thinking_are_idempotent if {
	every k in ["read", "search", "think"] {
		idempotent(file_tool("t", k, []))
	}
}

test_mutators_fetch_and_other_kinds_are_not_idempotent if {
	every k in ["edit", "delete", "move", "execute", "fetch", "other", "composite", "prompt", "resource"] {
		idempotent(file_tool("t", k, [])) == false
	}
}

test_a_shell_line_is_not_idempotent if {
	idempotent(shell([cmd("ls", [])])) == false
}

test_a_trusted_mcp_servers_read_is_idempotent if idempotent(mcp(true, "read"))

test_an_untrusted_mcp_servers_read_is_not_idempotent if idempotent(mcp(false, "read")) == false

test_a_trusted_mcp_servers_other_tool_is_not_idempotent if idempotent(mcp(true, "other")) == false

test_a_discovered_read_is_not_idempotent if {
	inp := object.union(file_tool("t", "read", []), {"tool": {"name": "t", "kind": "read", "source": "discovered", "server": "", "trust": false}})
	idempotent(inp) == false
}

# Idempotent says nothing about whether a call runs: a sensitive read is
# still denied.
test_idempotence_does_not_allow if {
	inp := file_tool("read_file", "read", ["/w/.env"])
	idempotent(inp)
	verdict(inp) == "DENY"
}
