# Fixed tables: the answers the default policy must give, written out here
# and never read from the lists they check, one case per entry of each
# list, per deny class and per remember rule. A list entry deleted, or a
# pattern weakened, fails a case below (internal/policy/mutant deletes
# each in turn and requires that).
package toolbus_test

import data.toolbus

# denied_paths(paths) are those of paths no call may touch, judged in one
# query: the patterns are made once, not once a path. Each of them is a
# DENY of the call that names it (test_sensitive_paths_denied and
# test_denied_paths_names_each_sensitive_file hold the two together).
denied_paths(paths) := d if {
	d := toolbus.denied_paths with input as file_tool("read_many_files", "read", paths)
}

every_path_denied(paths) if denied_paths(paths) == {p | some p in paths}

# --- sensitive paths, one per list entry ---------------------------------------

# Each path is matched by its entry alone, so that deleting that entry
# turns it ALLOW.
test_each_sensitive_name_is_denied if {
	every_path_denied([
		"/w/.env", "/w/.env.local", "/w/.envrc", "/w/.npmrc", "/w/.yarnrc.yml", "/w/.pypirc", "/home/ada/.netrc",
		"/home/ada/_netrc", "/home/ada/.git-credentials", "/home/ada/.pgpass", "/home/ada/.my.cnf",
		"/home/ada/.vault-token", "/w/.htpasswd", "/w/kubeconfig", "/w/prod.kubeconfig",
		"/w/application_default_credentials.json", "/w/credentials.tfrc.json", "/w/.mcp.json",
		"/w/id_ed25519", "/w/tls.pem", "/w/tls.key", "/w/cert.p12", "/w/cert.pfx", "/w/store.jks",
		"/w/release.keystore", "/w/vault.kdbx", "/w/putty.ppk",
	])
}

test_each_sensitive_directory_is_denied if {
	every_path_denied([
		"/home/ada/.ssh/known_hosts", "/home/ada/.gnupg/pubring.kbx", "/home/ada/.azure/msal_token_cache.json",
		"/home/ada/.password-store/bank.gpg",
	])
}

test_each_sensitive_path_end_is_denied if {
	every_path_denied([
		"/home/ada/.aws/credentials", "/home/ada/.aws/config", "/home/ada/.aws/sso/cache/token.json",
		"/home/ada/.config/gcloud/configurations/config_default", "/home/ada/.kube/config",
		"/home/ada/.docker/config.json", "/home/ada/.config/gh/hosts.yml", "/home/ada/.config/hub",
		"/home/ada/.cargo/credentials", "/home/ada/.cargo/credentials.toml", "/home/ada/.gem/credentials",
		"/home/ada/.composer/auth.json", "/home/ada/.m2/settings-security.xml",
		"/home/ada/.local/share/keyrings/login.keyring", "/home/ada/.config/op/config",
		"/w/.gemini/settings.json", "/w/.claude/settings.json", "/w/.claude/settings.local.json",
		"/w/.cursor/mcp.json", "/w/.claude/hooks/guard.sh", "/w/.gemini/hooks/guard.js",
	])
}

test_each_sensitive_file_is_denied if {
	every_path_denied([
		"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/passwd", "/etc/master.passwd",
		"/etc/security/opasswd", "/etc/sudoers.d/ada",
	])
}

test_each_sensitive_name_exception_is_allowed if {
	count(denied_paths(["/w/.env.example", "/w/.env.sample", "/w/.env.template", "/w/.env.dist", "/w/id_rsa.pub"])) == 0
}

# --- deny classes ---------------------------------------------------------------

# denied_each holds when each command of commands, all in one line, is
# denied on its own account: one reason each (the reasons quote the
# command). One query for the whole table.
denied_each(commands) if {
	reasons := toolbus.deny with input as shell(commands)
	count(reasons) == count(commands)
}

test_each_system_directory_removal_is_denied if {
	targets := [
		"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
		"/sbin", "/srv", "/sys", "/usr", "/var", "/boot/", "//var/*",
	]
	denied_each([cmd("rm", ["-rf", t]) | some t in targets])
}

test_each_home_removal_is_denied if {
	targets := ["/home/ada", "/home/ada/*", "/home/ada/.c*", "~", "~/", "~/*", "~//x*", "$HOME", "${HOME}", "\"$HOME\"/*"]
	denied_each([cmd("rm", ["-rf", t]) | some t in targets])
}

test_removals_that_are_not_root_like_ask if {
	every t in ["/home/ada/project", "/home/adax*", "/w/aaaaaa/*", "/w/build", "/tmp/x"] {
		verdict(shell([cmd("rm", ["-rf", t])])) == "ASK_USER"
	}

	# Not recursive, or not rm.
	verdict(shell([cmd("rm", ["/"])])) == "ASK_USER"
	verdict(shell([cmd("rm", ["-f", "/"])])) == "ASK_USER"
	verdict(shell([cmd("ls", ["-R", "/"])])) == "ASK_USER"

	# With no home directory known, an empty argument is no home.
	verdict(object.union(shell([cmd("rm", ["-rf", ""])]), {"env": {"home": "", "workspace": "/w"}})) == "ASK_USER"
}

test_recursive_removal_by_long_option_is_denied if verdict(shell([cmd("rm", ["--recursive", "/usr"])])) == "DENY"

test_removal_of_several_root_like_targets_is_denied if {
	d := toolbus.decision with input as shell([cmd("rm", ["-rf", "/etc", "/usr"])])
	d.verdict == "DENY"
	d.reason == "dangerous command \"rm -rf /etc /usr\": recursive removal of /etc and 1 more"
	d1 := toolbus.decision with input as shell([cmd("rm", ["-rf", "/"])])
	d1.reason == "dangerous command \"rm -rf /\": recursive removal of /"
}

test_each_device_writer_on_a_disk_is_denied if {
	names := [
		"dd", "shred", "wipefs", "blkdiscard", "mkswap", "mke2fs", "mkdosfs", "mkntfs", "fdisk", "sfdisk",
		"sgdisk", "gdisk", "cfdisk", "parted", "cp", "tee", "pv", "badblocks", "hdparm", "zpool", "cryptsetup",
		"pvcreate", "vgcreate", "lvcreate", "mdadm",
	]
	denied_each([cmd(name, ["/dev/zero", "/dev/sda"]) | some name in names])
	verdict(shell([cmd("cp", ["/dev/zero", "/dev/sda"])])) == "DENY"
	verdict(shell([cmd("mkfs.xfs", ["/dev/sdb1"])])) == "DENY"
}

test_each_kind_of_disk_is_denied if {
	disks := [
		"/dev/sda", "/dev/hdb", "/dev/vdc", "/dev/xvda", "/dev/nvme0n1", "/dev/mmcblk0", "/dev/disk2",
		"/dev/mapper/crypt", "/dev/disk/by-uuid/1234", "/dev/dm-1", "/dev/md127", "/dev/loop3", "/dev/nbd0",
		"/dev/rbd1", "/dev/zd16", "/dev/bcache0", "/dev/sr0", "/dev/root", "/dev/datavg/lv0",
	]
	denied_each([cmd("dd", ["if=/dev/zero", concat("", ["of=", dev])]) | some dev in disks])
}

test_disks_read_or_named_by_others_ask if {
	# Only a device writer, or a mkfs, on a disk.
	verdict(shell([cmd("ls", ["/dev/sda"])])) == "ASK_USER"
	verdict(shell([cmd("mkfs.ext4", ["disk.img"])])) == "ASK_USER"
}

test_each_redirection_onto_a_disk_is_denied if {
	every op in [">", ">>", ">|", "&>", "&>>", "<>"] {
		verdict(with_shell(shell([cmd("echo", ["x"])]), {"redirects": [{"op": op, "target": "/dev/sda", "literal": true}]})) == "DENY"
	}

	# Reading a disk is not writing onto it.
	verdict(with_shell(shell([cmd("cat", [])]), {"redirects": [{"op": "<", "target": "/dev/sda", "literal": true}]})) == "ASK_USER"
}

test_a_function_that_does_not_reach_itself_asks if {
	verdict(with_shell(shell([cmd("f", [])]), {"functions": [{"name": "f", "recursive": false}]})) == "ASK_USER"
}

# --- what "always" remembers, per command list ----------------------------------

test_each_command_harmless_with_any_arguments_is_remembered_by_name if {
	names := [
		"ls", "cat", "tac", "head", "tail", "wc", "grep", "egrep", "fgrep", "echo", "pwd", "diff", "cmp",
		"stat", "du", "df", "which", "whoami", "id", "uname", "printenv", "basename", "dirname", "realpath",
		"readlink", "nl", "cut", "tr", "rev", "seq", "true", "false", "column", "expand", "unexpand", "fold",
		"fmt", "paste", "join", "comm", "od", "hexdump", "strings", "md5sum", "sha1sum", "sha256sum",
		"sha512sum", "b2sum", "cksum", "ps", "pgrep", "uptime", "free", "nproc", "groups", "locale", "jq",
	]
	line := shell([cmd(name, ["-x", "a"]) | some name in names])
	remembered(line, "proceed_always") == {{"scope": "command", "tool": "run_shell_command", "argv": [name], "exact": false} | some name in names}
}

# Commands that write files, run code or reach the network are remembered
# as their exact command line, never by name.
test_commands_that_can_write_or_run_code_are_remembered_exactly if {
	names := ["tee", "sed", "find", "git", "sort", "make", "rg", "cp", "mv", "touch", "curl", "npm", "go", "xxd"]
	line := shell([cmd(name, ["a"]) | some name in names])
	remembered(line, "proceed_always") == {{"scope": "command", "tool": "run_shell_command", "argv": [name, "a"], "exact": true} | some name in names}
}

test_each_command_that_runs_code_is_never_remembered if {
	names := [
		"sh", "bash", "rbash", "dash", "ash", "ksh", "mksh", "zsh", "yash", "posh", "fish", "csh", "tcsh",
		"eval", "source", ".", "exec", "trap", "enable", "alias", "bind", "complete", "compgen", "fc",
		"command", "builtin", "coproc", "busybox", "env", "xargs", "nohup", "nice", "timeout", "stdbuf",
		"sudo", "doas", "su", "pkexec", "runuser", "setpriv", "chroot", "nsenter", "unshare", "systemd-run",
		"ssh", "watch", "script", "expect", "parallel", "gdb", "strace", "ltrace", "valgrind",
		"python", "python2", "python3", "pypy", "pypy3", "node", "nodejs", "deno", "bun", "perl", "ruby",
		"irb", "php", "lua", "luajit", "tclsh", "wish", "Rscript", "julia", "pwsh", "powershell",
		"osascript", "jshell", "groovy", "scala", "elixir", "erl", "ghci", "runghc", "awk", "gawk", "mawk", "nawk",
	]
	remembered(shell([cmd(name, ["x"]) | some name in names]), "proceed_always") == set()

	# nor covered by exact entries kept before
	inp := object.union(shell([cmd(name, ["x"]) | some name in names]), {"allowlist": remember_entries([{"argv": [name, "x"], "exact": true} | some name in names])})
	verdict(inp) == "ASK_USER"
}

test_nothing_of_a_line_not_understood_is_remembered if {
	inp := shell([cmd("git", ["status"]), object.union(cmd("ls", ["$X"]), {"literal": false})])
	remembered(inp, "proceed_always") == set()
	remembered(with_shell(shell([cmd("git", ["status"])]), {"parseError": "1:1: x"}), "proceed_always") == set()
}

test_privileged_globbed_or_fed_commands_are_not_remembered if {
	sudo_git := object.union(cmd("git", ["status"]), {"wrappers": ["sudo"]})
	doas_ls := object.union(cmd("ls", []), {"wrappers": ["doas"]})
	every c in [sudo_git, doas_ls, object.union(cmd("git", ["add", "*.go"]), {"globs": true}), object.union(cmd("git", ["add"]), {"moreArgs": true})] {
		remembered(shell([c]), "proceed_always") == set()
	}

	# A harmless command is remembered by name with globs and arguments
	# from xargs, as they are any arguments.
	remembered(shell([object.union(cmd("ls", ["*.go"]), {"globs": true, "moreArgs": true})]), "proceed_always") == {{"scope": "command", "tool": "run_shell_command", "argv": ["ls"], "exact": false}}
}

# --- what a remembered entry covers ----------------------------------------------

ls_allowed := remember_entries([{"argv": ["ls"]}])

test_each_output_redirection_to_a_file_is_not_covered if {
	every op in [">", ">>", ">|", "&>", "&>>", "<>", ">&", "<&"] {
		verdict(with_shell(object.union(shell([cmd("ls", [])]), {"allowlist": ls_allowed}), {"redirects": [{"op": op, "target": "out.txt", "literal": true}]})) == "ASK_USER"
	}
}

test_each_harmless_redirection_is_covered if {
	every r in [
		{"op": ">", "target": "/dev/null", "literal": true}, {"op": ">", "target": "/dev/stdout", "literal": true},
		{"op": ">", "target": "/dev/stderr", "literal": true}, {"op": ">", "target": "/dev/tty", "literal": true},
		{"op": ">&", "target": "2", "literal": true}, {"op": "<&", "target": "0", "literal": true},
		{"op": ">&", "target": "3-", "literal": true}, {"op": ">&", "target": "-", "literal": true},
		{"op": "<", "target": "in.txt", "literal": true},
	] {
		inp := object.union(shell([cmd("ls", [])]), {"allowlist": ls_allowed, "paths": ["/w"]})
		verdict(with_shell(inp, {"redirects": [r]})) == "ALLOW"
	}
}

test_redirections_that_only_look_harmless_are_not_covered if {
	every r in [
		{"op": ">", "target": "/dev/null", "literal": false}, {"op": ">", "target": "1", "literal": true},
		{"op": ">&", "target": "1x", "literal": true},
	] {
		verdict(with_shell(object.union(shell([cmd("ls", [])]), {"allowlist": ls_allowed}), {"redirects": [r]})) == "ASK_USER"
	}
}

test_workspace_prefix_is_a_whole_directory if {
	inp := object.union(shell([cmd("ls", [])]), {"allowlist": ls_allowed})
	verdict(object.union(inp, {"paths": ["/w", "/w/src/a.go"]})) == "ALLOW"
	every p in ["/w-old", "/w-old/a.go", "/wx"] {
		verdict(object.union(inp, {"paths": [p]})) == "ASK_USER"
	}
}

test_an_empty_line_is_not_covered if {
	verdict(object.union(shell([]), {"allowlist": ls_allowed})) == "ASK_USER"
}

test_an_entry_covers_only_its_command_and_tool if {
	ls := shell([cmd("ls", ["-la"])])

	# an exact entry of ls alone covers ls alone
	verdict(object.union(ls, {"allowlist": remember_entries([{"argv": ["ls"], "exact": true}])})) == "ASK_USER"

	# an exact entry of a program given by path does not cover it either
	dot_ls := object.union(cmd("ls", []), {"argv": ["./ls"]})
	verdict(object.union(shell([dot_ls]), {"allowlist": remember_entries([{"argv": ["./ls"], "exact": true}])})) == "ASK_USER"

	# an entry by name covers only the harmless commands, and only from
	# the start of the line it names
	verdict(object.union(shell([cmd("git", ["status"])]), {"allowlist": remember_entries([{"argv": ["git", "status"]}])})) == "ASK_USER"
	verdict(object.union(shell([cmd("cat", ["b"])]), {"allowlist": remember_entries([{"argv": ["cat", "a"]}])})) == "ASK_USER"

	# an entry of another scope or for another tool covers nothing
	verdict(object.union(ls, {"allowlist": [{"scope": "tool", "tool": "run_shell_command", "argv": ["ls"]}]})) == "ASK_USER"
	verdict(object.union(ls, {"allowlist": [{"scope": "command", "tool": "run_background_shell", "argv": ["ls"]}]})) == "ASK_USER"

	# a wrapper that does not change the user is looked through
	nice_ls := object.union(cmd("ls", []), {"wrappers": ["nice"]})
	verdict(object.union(shell([nice_ls]), {"allowlist": ls_allowed})) == "ALLOW"
	doas_ls := object.union(cmd("ls", []), {"wrappers": ["doas"]})
	verdict(object.union(shell([doas_ls]), {"allowlist": ls_allowed})) == "ASK_USER"
}

# --- tools, servers and paths on the allowlist -----------------------------------

test_a_path_entry_covers_an_edit_only_when_every_path_is_on_it if {
	entries := [{"scope": "path", "tool": "move_file", "path": "/w/a"}]
	verdict(object.union(file_tool("move_file", "move", ["/w/a"]), {"allowlist": entries})) == "ALLOW"
	verdict(object.union(file_tool("move_file", "move", ["/w/a", "/w/b"]), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(file_tool("move_file", "move", ["/w/b", "/w/a"]), {"allowlist": entries})) == "ASK_USER"
}

test_a_path_entry_of_another_scope_or_tool_covers_nothing if {
	edit := file_tool("write_file", "edit", ["/w/a"])
	verdict(object.union(edit, {"allowlist": [{"scope": "path", "tool": "read_file", "path": "/w/a"}]})) == "ASK_USER"
	verdict(object.union(edit, {"allowlist": [{"scope": "tool", "tool": "write_file", "path": "/w/a"}]})) == "ASK_USER"
	verdict(object.union(edit, {"allowlist": [{"scope": "command", "tool": "write_file", "argv": ["x"]}]})) == "ASK_USER"
	verdict(object.union(edit, {"allowlist": [{"scope": "tool", "tool": "delete_file"}]})) == "ASK_USER"

	# a shell line is covered command by command, never by path
	sh := object.union(shell([cmd("touch", ["a"])]), {"paths": ["/w/a"]})
	verdict(object.union(sh, {"allowlist": [{"scope": "path", "tool": "run_shell_command", "path": "/w/a"}]})) == "ASK_USER"
}

test_a_server_entry_covers_its_own_servers_tools_only if {
	verdict(object.union(mcp(false, "other"), {"allowlist": [{"scope": "server", "server": "other"}]})) == "ASK_USER"

	# a tool of the server remembered covers that tool, not the server
	verdict(object.union(mcp(false, "other"), {"allowlist": [{"scope": "tool", "tool": "gh__other", "server": "gh"}]})) == "ASK_USER"

	# a built-in has no server
	verdict(object.union(file_tool("write_file", "edit", ["/w/a"]), {"allowlist": [{"scope": "server", "server": ""}]})) == "ASK_USER"
}

test_a_discovered_entry_needs_a_workspace_and_the_tool_scope if {
	verdict(object.union(discovered("calc", "other", ""), {"allowlist": [{"scope": "tool", "tool": "calc", "path": ""}]})) == "ASK_USER"
	verdict(object.union(discovered("calc", "other", "/w"), {"allowlist": [{"scope": "path", "tool": "calc", "path": "/w"}]})) == "ASK_USER"
}

test_only_an_mcp_server_is_trusted if {
	inp := discovered("calc", "other", "/w")
	verdict(object.union(inp, {"tool": object.union(inp.tool, {"trust": true})})) == "ASK_USER"
}

test_tool_denied_names_only_its_tools if {
	inp := object.union(file_tool("write_file", "edit", ["/w/a"]), {"caller": {"id": "agent:gemini", "agent": "gemini-cli"}})
	count(toolbus.tool_denied) == 0 with input as inp with toolbus.caller_denied_tools as {"gemini-cli": {"read_file"}}
}

# --- what "always" remembers, per tool kind ------------------------------------------

test_each_file_mutator_is_remembered_by_its_paths if {
	every t in [["write_file", "edit"], ["delete_file", "delete"], ["move_file", "move"]] {
		remembered(file_tool(t[0], t[1], ["/w/a", "/w/b"]), "proceed_always") == {
			{"scope": "path", "tool": t[0], "path": "/w/a"},
			{"scope": "path", "tool": t[0], "path": "/w/b"},
		}

		# never as a whole tool, whatever the answer asked for
		remembered(file_tool(t[0], t[1], ["/w/a"]), "proceed_always_tool") == {{"scope": "path", "tool": t[0], "path": "/w/a"}}
		remembered(file_tool(t[0], t[1], ["/w/a"]), "proceed_always_server") == {{"scope": "path", "tool": t[0], "path": "/w/a"}}
	}
}

test_other_tools_are_remembered_whole if {
	remembered(file_tool("make_thing", "other", ["/w/a"]), "proceed_always") == {{"scope": "tool", "tool": "make_thing", "server": ""}}
	remembered(file_tool("write_file", "edit", []), "proceed_always") == {{"scope": "tool", "tool": "write_file", "server": ""}}
}

# --- reasons ----------------------------------------------------------------------------

test_each_reason_names_the_kind_and_the_server if {
	every k in ["edit", "delete", "move", "execute", "fetch"] {
		d := toolbus.decision with input as mcp(false, k)
		d.reason == concat("", [k, " tools ask the user; tools of MCP server \"gh\" ask the user: the server is not trusted"])
	}
	d_other := toolbus.decision with input as mcp(false, "other")
	d_other.reason == "tools of MCP server \"gh\" ask the user: the server is not trusted"
	d_plain := toolbus.decision with input as file_tool("t", "other", [])
	d_plain.reason == "other tools ask the user"
	d_read := toolbus.decision with input as file_tool("read_file", "read", ["/w/a"])
	d_read.reason == "read tools are allowed"
}

# --- approvers ----------------------------------------------------------------------------

test_an_answer_with_an_empty_approver_id_is_refused if {
	not allowed(shell_call(["/w"]), {"id": "", "role": "approver"})
	"the answer names no approver" in denied(shell_call(["/w"]), {"id": "", "role": "approver"})
}

test_a_refusal_is_false_not_undefined if {
	inp := object.union(shell_call(["/w"]), {"approver": {"id": "agent:gemini", "role": "agent"}, "answer": {"outcome": "proceed_once"}})
	toolbus.approver_allowed == false with input as inp
	toolbus.elicitation_allowed == false with input as shell_call(["/w"])
}

test_an_approver_may_answer_always if {
	every outcome in ["proceed_always", "proceed_always_tool", "proceed_always_server"] {
		toolbus.approver_allowed with input as answered(shell_call(["/w"]), approver("approver:ada@dev-1"), outcome)
	}
}

test_no_elicitation_for_a_shell_line_whatever_its_kind if {
	inp := shell([cmd("ls", [])])
	not toolbus.elicitation_allowed with input as object.union(inp, {"tool": tool("run_shell_command", "other")})
}

test_flags_name_only_what_applies if {
	inp := shell([cmd("git", ["status"]), object.union(cmd("ls", []), {"wrappers": ["nice"]}), cmd("bash", ["-c", "x"])])
	f := flags(inp)
	{"text": "git status", "why": "not on the allowlist"} in f
	not {"text": "git status", "why": "runs code or commands it is given; never remembered"} in f
	not {"text": "bash -c x", "why": "not on the allowlist"} in f
	not {"text": "ls", "why": "run through nice"} in f
}
