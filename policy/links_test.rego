package toolbus_test

import data.toolbus

linked(inp, files) := object.union(inp, {"hardLinks": files})

cat_k := object.union(shell([object.union(cmd("cat", ["k.txt"]), {"paths": ["/w/k.txt"]})]), {"paths": ["/w/k.txt"]})

test_hard_link_read_asks if {
	d := toolbus.decision with input as linked(file_tool("read_file", "read", ["/w/k.txt"]), ["/w/k.txt"])
	d.verdict == "ASK_USER"
	contains(d.reason, "/w/k.txt has other names")
	d.remember == false
}

test_single_name_read_allowed if verdict(linked(file_tool("read_file", "read", ["/w/k.txt"]), [])) == "ALLOW"

test_hard_link_in_shell_line_asks if {
	d := toolbus.decision with input as linked(cat_k, ["/w/k.txt"])
	d.verdict == "ASK_USER"
	contains(d.reason, "/w/k.txt has other names")
	d.remember == false
}

# A remembered approval of the tool, the path or the command covers the
# call with one name (the control) and not with other names.
test_allowlist_does_not_cover_a_hard_link if {
	read := object.union(file_tool("read_file", "read", ["/w/k.txt"]), {"allowlist": [{"scope": "tool", "tool": "read_file"}]})
	write := object.union(file_tool("write_file", "edit", ["/w/k.txt"]), {"allowlist": [{"scope": "path", "tool": "write_file", "path": "/w/k.txt"}]})
	cat := object.union(cat_k, {"allowlist": remember_entries([{"argv": ["cat"]}])})
	mcp_read := object.union(mcp(false, "read"), {"allowlist": [{"scope": "server", "server": "gh"}]})
	every inp in [read, write, cat, mcp_read] {
		verdict(inp) == "ALLOW"
		verdict(linked(inp, ["/w/k.txt"])) == "ASK_USER"
	}
}

test_trusted_mcp_server_asks_about_a_hard_link if {
	verdict(mcp(true, "read")) == "ALLOW"
	verdict(linked(mcp(true, "read"), ["/w/k.txt"])) == "ASK_USER"
}

# DENY still comes first.
test_sensitive_hard_link_denied if {
	verdict(linked(file_tool("read_file", "read", ["/w/.env"]), ["/w/.env"])) == "DENY"
}
