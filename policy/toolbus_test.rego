package toolbus_test

import data.toolbus

home := "/home/ada"

tool(name, kind) := {"name": name, "kind": kind, "source": "builtin", "server": "", "trust": false}

shell(commands) := {
	"tool": tool("run_shell_command", "execute"),
	"args": {},
	"caller": {"id": "agent:test"},
	"allowlist": [],
	"paths": [],
	"env": {"home": home, "workspace": "/w"},
	"shell": {"commands": commands, "redirects": [], "functions": [], "forkLoops": [], "opaque": []},
}

# cmd is a command as the analyser gives it, found by name, without
# wrappers.
cmd(name, args) := {
	"name": name, "args": args, "argv": array.concat([name], args), "words": array.concat([name], args), "wrappers": [],
	"text": concat(" ", array.concat([name], args)), "literal": true, "globs": false, "moreArgs": false, "stdin": false,
	"paths": [], "redirects": [],
}

file_tool(name, kind, paths) := {
	"tool": tool(name, kind),
	"args": {},
	"caller": {"id": "agent:test"},
	"allowlist": [],
	"paths": paths,
	"env": {"home": home, "workspace": "/w"},
}

verdict(inp) := v if {
	v := toolbus.decision.verdict with input as inp
}

# --- kinds ---------------------------------------------------------------

test_read_search_think_allowed if {
	every k in ["read", "search", "think"] {
		verdict(file_tool("t", k, [])) == "ALLOW"
	}
}

test_mutators_and_fetch_ask if {
	every k in ["edit", "delete", "move", "execute", "fetch"] {
		verdict(file_tool("t", k, [])) == "ASK_USER"
	}
}

test_other_kind_asks if verdict(file_tool("t", "other", [])) == "ASK_USER"

test_ask_reason_names_the_kind if {
	d := toolbus.decision with input as file_tool("write_file", "edit", ["/w/a.txt"])
	d.reason == "edit tools ask the user"
	d.remember == true
}

# --- MCP trust -----------------------------------------------------------

mcp(trust, kind) := object.union(file_tool("gh__issue", kind, []), {"tool": {"name": "gh__issue", "kind": kind, "source": "mcp", "server": "gh", "trust": trust}})

test_trusted_mcp_server_allowed if verdict(mcp(true, "other")) == "ALLOW"

test_trusted_mcp_server_allowed_even_for_edits if verdict(mcp(true, "edit")) == "ALLOW"

test_untrusted_mcp_asks_even_for_reads if verdict(mcp(false, "read")) == "ASK_USER"

# A prompt's get and a resource's read are judged as calls of their
# server: allowed when it is trusted, asked about when it is not.
test_prompts_and_resources_follow_their_servers_trust if {
	every k in ["prompt", "resource"] {
		verdict(mcp(true, k)) == "ALLOW"
		verdict(mcp(false, k)) == "ASK_USER"
	}
}

# A resource whose URI names a file is judged by the file's path, as a
# read_file of it is: a key file is denied, trusted server or not.
test_a_resource_naming_a_key_file_is_denied if {
	every trust in [true, false] {
		inp := object.union(mcp(trust, "resource"), {"args": {"uri": "file:///home/ada/.ssh/id_rsa"}, "paths": ["/home/ada/.ssh/id_rsa"]})
		verdict(inp) == "DENY"
	}
}

# --- allowlist ---------------------------------------------------------------

test_allowlisted_tool_allowed if {
	inp := object.union(file_tool("write_file", "edit", ["/w/a"]), {"allowlist": [{"scope": "tool", "tool": "write_file"}]})
	verdict(inp) == "ALLOW"
}

test_allowlist_never_overrides_deny if {
	inp := object.union(file_tool("read_file", "read", ["/etc/shadow"]), {"allowlist": [{"scope": "tool", "tool": "read_file"}]})
	verdict(inp) == "DENY"
	inp2 := object.union(shell([cmd("rm", ["-rf", "/"])]), {"allowlist": [{"scope": "tool", "tool": "run_shell_command"}]})
	verdict(inp2) == "DENY"
}

test_allowlisted_server_allowed if {
	inp := object.union(mcp(false, "other"), {"allowlist": [{"scope": "server", "server": "gh"}]})
	verdict(inp) == "ALLOW"
}

test_a_tool_entry_never_covers_a_shell_tool if {
	inp := object.union(shell([cmd("ls", [])]), {"allowlist": [{"scope": "tool", "tool": "run_shell_command"}]})
	verdict(inp) == "ASK_USER"
}

test_path_allowlist_covers_only_its_path if {
	entries := [{"scope": "path", "tool": "write_file", "path": "/w/notes.md"}]
	verdict(object.union(file_tool("write_file", "edit", ["/w/notes.md"]), {"allowlist": entries})) == "ALLOW"
	verdict(object.union(file_tool("write_file", "edit", ["/w/other.md"]), {"allowlist": entries})) == "ASK_USER"
}

test_never_remember if {
	d := toolbus.decision with input as file_tool("write_file", "edit", ["/w/a"]) with toolbus.never_remember as {"write_file"}
	d.verdict == "ASK_USER"
	d.remember == false
}

# --- what "always" remembers --------------------------------------------------

remembered(inp, outcome) := r if {
	r := toolbus.remember with input as object.union(inp, {"answer": {"outcome": outcome}})
}

test_remember_an_edit_by_its_paths if {
	remembered(file_tool("write_file", "edit", ["/w/a", "/w/b"]), "proceed_always") == {
		{"scope": "path", "tool": "write_file", "path": "/w/a"},
		{"scope": "path", "tool": "write_file", "path": "/w/b"},
	}
}

test_remember_an_mcp_server if {
	remembered(mcp(false, "other"), "proceed_always_server") == {{"scope": "server", "server": "gh"}}
	remembered(mcp(false, "other"), "proceed_always_tool") == {{"scope": "tool", "tool": "gh__issue", "server": "gh"}}
}

test_remember_nothing_of_a_never_remembered_tool if {
	count(remembered(file_tool("write_file", "edit", ["/w/a"]), "proceed_always")) == 0 with toolbus.never_remember as {"write_file"}
}

# --- tools a caller may not call ---------------------------------------------

test_tool_denied_for_one_agent if {
	inp := object.union(file_tool("read_file", "read", ["/w/a"]), {"caller": {"id": "agent:gemini", "agent": "gemini-cli"}})
	denied := {"gemini-cli": {"read_file"}}
	count(toolbus.tool_denied) > 0 with input as inp with toolbus.caller_denied_tools as denied
	verdict(inp) == "DENY" with toolbus.caller_denied_tools as denied
	other := object.union(inp, {"caller": {"id": "agent:claude", "agent": "claude-code"}})
	count(toolbus.tool_denied) == 0 with input as other with toolbus.caller_denied_tools as denied
	verdict(other) == "ALLOW" with toolbus.caller_denied_tools as denied
}

test_tool_denied_for_everyone if {
	inp := file_tool("read_file", "read", ["/w/a"])
	count(toolbus.tool_denied) > 0 with input as inp with toolbus.caller_denied_tools as {"*": {"read_file"}}
}

test_tool_denied_needs_no_arguments if {
	# As the facade asks: the tool and the caller, nothing else.
	inp := {"tool": tool("run_shell_command", "execute"), "caller": {"id": "agent:x", "agent": "x"}}
	count(toolbus.tool_denied) > 0 with input as inp with toolbus.caller_denied_tools as {"x": {"run_shell_command"}}
	count(toolbus.tool_denied) == 0 with input as inp
}

# --- discovered tools ------------------------------------------------------------

# discovered is a tool of a project's discovery command, hosted by the
# executor of workspace ws.
discovered(name, kind, ws) := {
	"tool": {"name": name, "kind": kind, "source": "discovered", "server": "", "trust": false},
	"args": {"expression": "1+2"},
	"caller": {"id": "agent:test"},
	"allowlist": [],
	"paths": [],
	"env": {"home": home, "workspace": ws},
}

test_discovered_tool_asks if {
	d := toolbus.decision with input as discovered("calc", "other", "/w")
	d.verdict == "ASK_USER"
	d.reason == "discovered tools ask the user: they run the project's own call command"
	d.remember == true
}

test_discovered_tool_asks_whatever_its_kind if {
	# The executor declares every discovered tool of kind other; were a
	# read kind to reach the policy, it still asks.
	every k in ["read", "search", "think"] {
		verdict(discovered("calc", k, "/w")) == "ASK_USER"
	}
}

test_remember_a_discovered_tool_in_its_workspace if {
	remembered(discovered("calc", "other", "/w"), "proceed_always") == {{"scope": "tool", "tool": "calc", "path": "/w"}}
	remembered(discovered("calc", "other", "/w"), "proceed_always_tool") == {{"scope": "tool", "tool": "calc", "path": "/w"}}
	count(remembered(discovered("calc", "other", ""), "proceed_always")) == 0
}

test_discovered_allowlist_holds_in_its_workspace_only if {
	entries := [{"scope": "tool", "tool": "calc", "path": "/w"}]
	verdict(object.union(discovered("calc", "other", "/w"), {"allowlist": entries})) == "ALLOW"
	# Another executor's discovery command, in another workspace, may give
	# the name to other code.
	verdict(object.union(discovered("calc", "other", "/elsewhere"), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(discovered("calc2", "other", "/w"), {"allowlist": entries})) == "ASK_USER"
}

test_a_plain_tool_entry_does_not_cover_a_discovered_tool if {
	# Kept for an MCP tool or a built-in of the same name.
	entries := [{"scope": "tool", "tool": "calc", "server": "gh"}, {"scope": "tool", "tool": "calc"}]
	verdict(object.union(discovered("calc", "other", "/w"), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(discovered("calc", "other", ""), {"allowlist": entries})) == "ASK_USER"
}

test_a_discovered_entry_does_not_cover_another_tool_of_its_name if {
	entries := [{"scope": "tool", "tool": "gh__issue", "path": "/w"}]
	verdict(object.union(mcp(false, "other"), {"allowlist": entries})) == "ASK_USER"
	builtin_entries := [{"scope": "tool", "tool": "write_file", "path": "/w"}]
	verdict(object.union(file_tool("write_file", "edit", ["/w/a"]), {"allowlist": builtin_entries})) == "ASK_USER"
}

test_discovered_allowlist_never_overrides_deny if {
	inp := object.union(discovered("calc", "other", "/w"), {
		"allowlist": [{"scope": "tool", "tool": "calc", "path": "/w"}],
		"caller": {"id": "agent:gemini", "agent": "gemini-cli"},
	})
	verdict(inp) == "DENY" with toolbus.caller_denied_tools as {"gemini-cli": {"calc"}}
}

# --- composite tools --------------------------------------------------------

composite(kind, source) := object.union(file_tool("read_twice", kind, []), {"tool": {"name": "read_twice", "kind": kind, "source": source, "server": "", "trust": false}})

test_composite_is_allowed if {
	d := toolbus.decision with input as composite("composite", "composite")
	d.verdict == "ALLOW"
	d.reason == "composite tools are allowed: each of their steps is judged on its own"
}

# Only the executor's own composites: a tool of another source that
# calls itself a composite is judged as that source's tools are.
test_composite_kind_of_another_source_asks if {
	verdict(composite("composite", "builtin")) == "ASK_USER"
	verdict(composite("composite", "mcp")) == "ASK_USER"
}

# The source alone allows nothing: the kind must be composite.
test_composite_source_with_another_kind_asks if verdict(composite("edit", "composite")) == "ASK_USER"

# A composite a caller may not call is denied, as any tool.
test_composite_denied_to_a_caller if {
	inp := composite("composite", "composite")
	verdict(inp) == "DENY" with toolbus.caller_denied_tools as {"*": {"read_twice"}}
}
