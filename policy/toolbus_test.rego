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
	"env": {"home": home},
	"shell": {"commands": commands, "redirects": [], "functions": []},
}

cmd(name, args) := {"name": name, "args": args, "argv": array.concat([name], args), "text": concat(" ", array.concat([name], args)), "literal": true, "redirects": []}

file_tool(name, kind, paths) := {
	"tool": tool(name, kind),
	"args": {},
	"caller": {"id": "agent:test"},
	"allowlist": [],
	"paths": paths,
	"env": {"home": home},
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

# --- dangerous commands ---------------------------------------------------

test_plain_command_asks if verdict(shell([cmd("ls", ["-la"])])) == "ASK_USER"

test_rm_rf_root_denied if verdict(shell([cmd("rm", ["-rf", "/"])])) == "DENY"

test_rm_variants_denied if {
	every args in [
		["-fr", "/"], ["-r", "-f", "/*"], ["-Rf", "~"], ["--recursive", "/etc"], ["-rf", "$HOME"], ["-rf", "/usr/"],
		["-rf", "//"], ["-rf", "/./"], ["-rf", "/.."], ["-rf", "\"$HOME\""], ["-rf", "\"${HOME}\"/*"], ["-rf", "\"$HOME/\""],
	] {
		verdict(shell([cmd("rm", args)])) == "DENY"
	}
}

test_rm_in_project_asks if {
	every args in [["-rf", "build/"], ["-rf", "./build"], ["-rf", "\"$HOME/project/build\""], ["-rf", "/tmp/x"]] {
		verdict(shell([cmd("rm", args)])) == "ASK_USER"
	}
}

test_no_preserve_root_denied if verdict(shell([cmd("chmod", ["-R", "--no-preserve-root", "777", "x"])])) == "DENY"

test_dangerous_second_command_denied if {
	verdict(shell([cmd("ls", []), cmd("rm", ["-rf", "/"])])) == "DENY"
}

test_fork_bomb_denied if {
	inp := object.union(shell([cmd(":", [])]), {"shell": {"commands": [cmd(":", [])], "redirects": [], "functions": [{"name": ":", "recursive": true}]}})
	verdict(inp) == "DENY"
}

test_dd_onto_disk_denied if {
	verdict(shell([cmd("dd", ["if=/dev/zero", "of=/dev/sda", "bs=1M"])])) == "DENY"
	verdict(shell([cmd("dd", ["if=/dev/zero", "of=/dev/nvme0n1"])])) == "DENY"
	verdict(shell([cmd("dd", ["if=/dev/zero", "of=disk.img"])])) == "ASK_USER"
}

test_mkfs_on_disk_denied if verdict(shell([cmd("mkfs.ext4", ["/dev/sdb1"])])) == "DENY"

test_redirect_onto_disk_denied if {
	inp := object.union(shell([cmd("echo", ["x"])]), {"shell": {"commands": [cmd("echo", ["x"])], "redirects": [{"op": ">", "target": "/dev/sda"}], "functions": []}})
	verdict(inp) == "DENY"
}

test_unparseable_shell_denied if {
	inp := object.union(shell([]), {"shell": {"commands": [], "redirects": [], "functions": [], "parseError": "1:5: unclosed quote"}})
	d := toolbus.decision with input as inp
	d.verdict == "DENY"
	contains(d.reason, "cannot be parsed")
}

# --- sensitive paths -------------------------------------------------------

test_sensitive_paths_denied if {
	every p in [
		"/etc/shadow", "/etc/passwd", "/home/ada/.ssh/id_rsa", "/root/.ssh/authorized_keys", "/home/ada/.aws/credentials",
		"/home/ada/.config/gcloud/application_default_credentials.json", "/w/.env", "/w/app/.env.production", "/home/ada/.netrc",
	] {
		verdict(file_tool("read_file", "read", [p])) == "DENY"
	}
}

test_ordinary_paths_allowed if {
	every p in ["/w/README.md", "/w/.env.example", "/w/env/config.go", "/w/.envrc.md"] {
		verdict(file_tool("read_file", "read", [p])) == "ALLOW"
	}
}

test_denied_paths_names_each_sensitive_file if {
	inp := file_tool("search_file_content", "search", ["/w/.env", "/w/app/main.go", "/w/app/.env.production", "/w/app/.env.example"])
	toolbus.denied_paths == {"/w/.env", "/w/app/.env.production"} with input as inp
}

test_denied_paths_empty_for_ordinary_files if {
	count(toolbus.denied_paths) == 0 with input as file_tool("read_many_files", "read", ["/w/README.md", "/w/go.mod"])
}

test_sensitive_path_in_shell_denied if {
	inp := object.union(shell([cmd("cat", ["/etc/shadow"])]), {"paths": ["/etc/shadow"]})
	verdict(inp) == "DENY"
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

test_command_prefix_covers_every_command if {
	entries := [{"scope": "command", "tool": "run_shell_command", "prefix": "git status"}, {"scope": "command", "tool": "run_shell_command", "prefix": "ls"}]
	verdict(object.union(shell([cmd("git", ["status", "-s"])]), {"allowlist": entries})) == "ALLOW"
	verdict(object.union(shell([cmd("git", ["status"]), cmd("ls", ["-l"])]), {"allowlist": entries})) == "ALLOW"
	verdict(object.union(shell([cmd("git", ["status"]), cmd("curl", ["x"])]), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(shell([cmd("git", ["push"])]), {"allowlist": entries})) == "ASK_USER"
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
