package toolbus_test

import data.toolbus

proven_agent := {"id": "ada/session-7", "agent": "claude", "session": "s1", "proven": true}

claimed_agent := {"id": "ada/session-7", "agent": "claude", "session": "s1"}

limit_names(l) := {x.name | some x in l}

test_principal_is_the_proven_id_before_its_slash if {
	toolbus.principal == "ada" with input as {"caller": proven_agent}
}

# An input whose principal is empty (a replay of a decision recorded
# before the executor gave one) falls back to the proven id.
test_an_empty_principal_is_the_proven_id if {
	toolbus.principal == "ada" with input as {"caller": {"id": "ada/agent:x", "proven": true, "principal": ""}}
}

test_a_facade_client_is_a_principal_of_its_own if {
	toolbus.principal == "facade/alice" with input as {"caller": {"id": "facade/alice/agent:claude-code", "proven": true, "principal": "facade/alice"}}
	a := toolbus.limits with input as {"tool": {"kind": "execute"}, "caller": {"id": "facade/alice/agent:x", "proven": true, "principal": "facade/alice"}}
	b := toolbus.limits with input as {"tool": {"kind": "execute"}, "caller": {"id": "facade/bob/agent:x", "proven": true, "principal": "facade/bob"}}
	every x in a {
		x.key == ["facade/alice"]
	}
	every x in b {
		x.key == ["facade/bob"]
	}
}

test_a_claimed_principal_counts_for_nothing if {
	toolbus.principal == "_" with input as {"caller": {"id": "facade/alice", "principal": "facade/alice"}}
}

test_an_unproven_caller_is_one_principal if {
	toolbus.principal == "_" with input as {"caller": claimed_agent}
	toolbus.principal == "_" with input as {"caller": {"id": "mallory", "agent": "other"}}
}

test_read_calls_have_no_limits if {
	count(toolbus.limits) == 0 with input as {"tool": {"kind": "read", "source": "builtin"}, "caller": proven_agent}
}

test_execute_calls_are_limited_per_principal if {
	l := toolbus.limits with input as {"tool": {"kind": "execute", "source": "builtin"}, "caller": proven_agent}
	limit_names(l) == {"execute calls at once", "execute calls a minute"}
	every x in l {
		x.key == ["ada"]
	}
	some c in l
	c.concurrent == 4
	c.queue == {"max": 16, "wait": "2m"}
	some r in l
	r.calls == 60
	r.per == "1m"
}

test_agent_and_session_names_do_not_change_the_key if {
	a := toolbus.limits with input as {"tool": {"kind": "execute"}, "caller": {"id": "ada/x", "agent": "a", "session": "1", "proven": true}}
	b := toolbus.limits with input as {"tool": {"kind": "execute"}, "caller": {"id": "ada/y", "agent": "b", "session": "2", "proven": true}}
	a == b
}

test_untrusted_mcp_servers_are_limited_per_principal_and_server if {
	l := toolbus.limits with input as {"tool": {"kind": "other", "source": "mcp", "server": "wiki", "trust": false}, "caller": proven_agent}
	limit_names(l) == {
		"calls a minute to an untrusted MCP server",
		"argument bytes a minute to an untrusted MCP server",
		"calls at once to an untrusted MCP server",
	}
	every x in l {
		x.key == ["ada", "wiki"]
	}
	some c in l
	c.calls == 120
	c.per == "1m"
	some b in l
	b.bytes == 4194304
	b.per == "1m"
	some k in l
	k.concurrent == 8
	k.queue == {"max": 32, "wait": "1m"}
}

test_trusted_mcp_servers_have_no_limits if {
	count(toolbus.limits) == 0 with input as {"tool": {"kind": "other", "source": "mcp", "server": "wiki", "trust": true}, "caller": proven_agent}
}
