package toolbus_test

import data.toolbus

# with_shell sets fields of the shell analysis.
with_shell(inp, fields) := object.union(inp, {"shell": object.union(inp.shell, fields)})

remember_entries(entries) := [object.union({"scope": "command", "tool": "run_shell_command"}, e) | some e in entries]

# --- dangerous commands ---------------------------------------------------

test_plain_command_asks if verdict(shell([cmd("ls", ["-la"])])) == "ASK_USER"

test_rm_rf_root_denied if verdict(shell([cmd("rm", ["-rf", "/"])])) == "DENY"

test_rm_variants_denied if {
	every args in [
		["-fr", "/"], ["-r", "-f", "/*"], ["-Rf", "~"], ["--recursive", "/etc"], ["-rf", "$HOME"], ["-rf", "/usr/"],
		["-rf", "//"], ["-rf", "/./"], ["-rf", "/.."], ["-rf", "\"$HOME\""], ["-rf", "\"${HOME}\"/*"], ["-rf", "\"$HOME/\""],
		["-rf", "/*/"], ["-rf", "/*/*"], ["-rf", "/.*"], ["-rf", "~/*"], ["-rf", "/usr/*"], ["-rf", "--", "/"],
	] {
		verdict(shell([cmd("rm", args)])) == "DENY"
	}
}

test_rm_by_resolved_path_denied if {
	# `cd / && rm -rf *`: the analyser resolves * in every directory the
	# line may be in.
	c := object.union(cmd("rm", ["-rf", "*"]), {"paths": ["/w/*", "/*"]})
	verdict(shell([cmd("cd", ["/"]), c])) == "DENY"
	h := object.union(cmd("rm", ["-rf", "*"]), {"paths": ["/home/ada/*"]})
	verdict(shell([h])) == "DENY"
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
	verdict(with_shell(shell([cmd(":", [])]), {"functions": [{"name": ":", "recursive": true}]})) == "DENY"
	verdict(with_shell(shell([cmd("sleep", ["1"])]), {"forkLoops": ["while :; do sleep 1 & done"]})) == "DENY"
}

test_device_writers_denied if {
	every c in [
		cmd("dd", ["if=/dev/zero", "of=/dev/sda", "bs=1M"]), cmd("dd", ["if=/dev/zero", "of=/dev/nvme0n1"]),
		cmd("dd", ["of=/dev/mapper/vg0-root"]), cmd("dd", ["of=/dev/disk/by-id/ata-X"]), cmd("dd", ["of=/dev/dm-0"]),
		cmd("shred", ["-n", "1", "/dev/sdb"]), cmd("wipefs", ["-a", "/dev/sdc1"]), cmd("mkfs.ext4", ["/dev/sdb1"]),
		cmd("mkfs", ["-t", "xfs", "/dev/md0"]), cmd("blkdiscard", ["/dev/nvme1n1"]), cmd("tee", ["/dev/vda"]),
	] {
		verdict(shell([c])) == "DENY"
	}
	verdict(shell([cmd("dd", ["if=/dev/zero", "of=disk.img"])])) == "ASK_USER"
	verdict(shell([cmd("shred", ["secrets.txt"])])) == "ASK_USER"
}

test_redirect_onto_disk_denied if {
	verdict(with_shell(shell([cmd("echo", ["x"])]), {"redirects": [{"op": ">", "target": "/dev/sda", "literal": true}]})) == "DENY"
}

test_unparseable_shell_denied if {
	d := toolbus.decision with input as with_shell(shell([]), {"parseError": "1:5: unclosed quote"})
	d.verdict == "DENY"
	contains(d.reason, "cannot be parsed")
}

# --- remembered commands -------------------------------------------------------

test_a_command_by_name_covers_it_with_any_arguments if {
	entries := remember_entries([{"argv": ["ls"]}, {"argv": ["cat"]}])
	verdict(object.union(shell([cmd("ls", ["-la", "src"])]), {"allowlist": entries})) == "ALLOW"
	verdict(object.union(shell([cmd("ls", []), cmd("cat", ["a"])]), {"allowlist": entries})) == "ALLOW"
	verdict(object.union(shell([cmd("ls", []), cmd("touch", ["P"])]), {"allowlist": entries})) == "ASK_USER"
}

test_an_exact_command_covers_only_itself if {
	entries := remember_entries([{"argv": ["git", "status"], "exact": true}])
	verdict(object.union(shell([cmd("git", ["status"])]), {"allowlist": entries})) == "ALLOW"
	every args in [["status", "-s"], ["-c", "alias.x=!touch P", "x"], ["push"], []] {
		verdict(object.union(shell([cmd("git", args)]), {"allowlist": entries})) == "ASK_USER"
	}
}

test_a_start_covers_nothing_that_is_not_harmless_with_any_arguments if {
	# An entry by name (not exact) for a command that can run code, as the
	# allowlist held them before, covers nothing: git, find, sed...
	entries := remember_entries([{"argv": ["git"]}, {"argv": ["find"]}, {"argv": ["sed"]}, {"argv": ["sort"]}])
	every c in [cmd("git", ["status"]), cmd("find", [".", "-exec", "touch", "P", ";"]), cmd("sed", ["e"]), cmd("sort", ["-o", "x"])] {
		verdict(object.union(shell([c]), {"allowlist": entries})) == "ASK_USER"
	}
}

test_the_program_must_match_exactly if {
	entries := remember_entries([{"argv": ["ls"]}])
	every c in [
		object.union(cmd("ls", []), {"argv": ["./ls"]}), object.union(cmd("ls", []), {"argv": ["/x/ls"]}),
		object.union(cmd("ls", []), {"argv": ["/bin/ls"]}),
	] {
		verdict(object.union(shell([c]), {"allowlist": entries})) == "ASK_USER"
	}
}

test_nothing_opaque_is_covered if {
	entries := remember_entries([{"argv": ["ls"]}])
	inp := object.union(shell([cmd("ls", [])]), {"allowlist": entries})
	verdict(inp) == "ALLOW"
	verdict(with_shell(inp, {"opaque": ["an assignment"]})) == "ASK_USER"
	verdict(with_shell(inp, {"parseError": "x"})) == "DENY"
	verdict(object.union(shell([object.union(cmd("ls", []), {"literal": false})]), {"allowlist": entries})) == "ASK_USER"
}

test_privileged_and_code_running_commands_are_never_covered if {
	entries := remember_entries([{"argv": ["ls"]}, {"argv": ["bash"]}, {"argv": ["python3", "x.py"], "exact": true}])
	verdict(object.union(shell([object.union(cmd("ls", []), {"wrappers": ["sudo"]})]), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(shell([cmd("bash", [])]), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(shell([cmd("python3", ["x.py"])]), {"allowlist": entries})) == "ASK_USER"
}

test_exact_entries_and_globs_or_more_arguments if {
	entries := remember_entries([{"argv": ["make", "test"], "exact": true}, {"argv": ["ls"]}])
	verdict(object.union(shell([object.union(cmd("make", ["test"]), {"moreArgs": true})]), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(shell([object.union(cmd("make", ["test"]), {"globs": true})]), {"allowlist": entries})) == "ASK_USER"
	verdict(object.union(shell([object.union(cmd("ls", ["*.go"]), {"globs": true, "moreArgs": true})]), {"allowlist": entries})) == "ALLOW"
}

test_writes_and_files_outside_the_workspace_are_not_covered if {
	entries := remember_entries([{"argv": ["ls"]}])
	inp := object.union(shell([cmd("ls", [])]), {"allowlist": entries})
	verdict(with_shell(inp, {"redirects": [{"op": ">", "target": "/outside/file", "literal": true}]})) == "ASK_USER"
	verdict(with_shell(inp, {"redirects": [{"op": ">>", "target": "out.txt", "literal": true}]})) == "ASK_USER"
	verdict(with_shell(inp, {"redirects": [{"op": ">&", "target": "out.txt", "literal": true}]})) == "ASK_USER"
	verdict(object.union(inp, {"paths": ["/w", "/etc"]})) == "ASK_USER"
	every r in [{"op": ">", "target": "/dev/null", "literal": true}, {"op": ">&", "target": "1", "literal": true}, {"op": "<", "target": "in.txt", "literal": true}] {
		verdict(object.union(with_shell(inp, {"redirects": [r]}), {"paths": ["/w", "/w/in.txt", "/dev/null"]})) == "ALLOW"
	}
}

test_remember_a_shell_line if {
	inp := shell([cmd("ls", ["-la"]), cmd("git", ["status"]), cmd("bash", ["-c", "x"]), object.union(cmd("ls", []), {"argv": ["./ls"]})])
	remembered(inp, "proceed_always") == {
		{"scope": "command", "tool": "run_shell_command", "argv": ["ls"], "exact": false},
		{"scope": "command", "tool": "run_shell_command", "argv": ["git", "status"], "exact": true},
	}
	count(remembered(with_shell(inp, {"opaque": ["an assignment"]}), "proceed_always")) == 0
	# A line is never remembered as a whole tool.
	remembered(inp, "proceed_always_tool") == remembered(inp, "proceed_always")
}

test_always_is_offered_only_when_something_would_be_remembered if {
	d := toolbus.decision with input as shell([cmd("bash", ["-c", "x"])])
	d.verdict == "ASK_USER"
	d.remember == false
	d2 := toolbus.decision with input as shell([cmd("git", ["status"])])
	d2.remember == true
}
