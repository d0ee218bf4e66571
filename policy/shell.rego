# Shell lines: the dangerous commands that are denied wherever they hide,
# and what a remembered approval of a command covers. input.shell is the
# analysis of the line (README.md: Input).
package toolbus

# --- remembered commands: data a policy team edits ----------------------------

# Commands that only read and print, whatever their arguments: an "always"
# for one of them remembers the command by its name and covers it with any
# arguments (the files it names are still judged, and must be in the
# workspace). Every other command is remembered only as the exact command
# line that was approved.
remember_any_args := {
	"ls", "cat", "tac", "head", "tail", "wc", "grep", "egrep", "fgrep", "echo", "pwd", "diff", "cmp",
	"stat", "du", "df", "which", "whoami", "id", "uname", "printenv", "basename", "dirname", "realpath",
	"readlink", "nl", "cut", "tr", "rev", "seq", "true", "false", "column", "expand", "unexpand", "fold",
	"fmt", "paste", "join", "comm", "od", "hexdump", "strings", "md5sum", "sha1sum", "sha256sum",
	"sha512sum", "b2sum", "cksum", "ps", "pgrep", "uptime", "free", "nproc", "groups", "locale", "jq",
}

# Commands that run code given in their arguments, in files or on their
# standard input, or that run commands as another user: an "always" for
# one of them is never remembered, and no remembered entry covers one.
remember_never := {
	"sh", "bash", "rbash", "dash", "ash", "ksh", "mksh", "zsh", "yash", "posh", "fish", "csh", "tcsh",
	"eval", "source", ".", "exec", "trap", "enable", "alias", "bind", "complete", "compgen", "fc",
	"command", "builtin", "coproc", "busybox", "env", "xargs", "nohup", "nice", "timeout", "stdbuf",
	"sudo", "doas", "su", "pkexec", "runuser", "setpriv", "chroot", "nsenter", "unshare", "systemd-run",
	"ssh", "watch", "script", "expect", "parallel", "gdb", "strace", "ltrace", "valgrind",
	"python", "python2", "python3", "pypy", "pypy3", "node", "nodejs", "deno", "bun", "perl", "ruby",
	"irb", "php", "lua", "luajit", "tclsh", "wish", "Rscript", "julia", "pwsh", "powershell",
	"osascript", "jshell", "groovy", "scala", "elixir", "erl", "ghci", "runghc", "awk", "gawk", "mawk", "nawk",
}

# Wrappers that change who runs the command: a command run through one is
# never covered by a remembered approval.
privileged_wrappers := {"sudo", "doas"}

# Where an output redirection may write without being asked about.
harmless_write_targets := {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"}

# --- remembered lines ---------------------------------------------------------

# A line is covered by remembered approvals only when the analyser
# understood all of it (nothing opaque), every command is covered, every
# output redirection writes somewhere harmless, and every file it names is
# in the workspace.
remembered_line if {
	input.shell
	count(input.shell.commands) > 0
	not input.shell.parseError
	count(input.shell.opaque) == 0
	every c in input.shell.commands {
		remembered_command(c)
	}
	every r in input.shell.redirects {
		write_allowed_alone(r)
	}
	every p in input.paths {
		in_workspace_or_harmless(p)
	}
}

remembered_command(c) if {
	c.literal
	c.argv[0] == c.name
	not c.name in remember_never
	not privileged(c)
	some e in input.allowlist
	e.scope == "command"
	e.tool == input.tool.name
	argv_covered(c, e)
}

privileged(c) if {
	some w in c.wrappers
	w in privileged_wrappers
}

# An exact entry covers the same command line only: no glob that could
# now expand to other names, no arguments xargs adds.
argv_covered(c, e) if {
	e.exact
	not c.globs
	not c.moreArgs
	c.argv == e.argv
}

# An entry by name covers the command with any arguments, for the
# commands deemed harmless with any.
argv_covered(c, e) if {
	not e.exact
	c.name in remember_any_args
	count(c.argv) >= count(e.argv)
	array.slice(c.argv, 0, count(e.argv)) == e.argv
}

write_allowed_alone(r) if not r.op in output_ops

write_allowed_alone(r) if {
	r.op in {">&", "<&"}
	regex.match(`^([0-9]+-?|-)$`, r.target)
}

write_allowed_alone(r) if {
	r.literal
	r.target in harmless_write_targets
}

output_ops := {">", ">>", ">|", "&>", "&>>", "<>", ">&", "<&"}

in_workspace_or_harmless(p) if p in harmless_write_targets

in_workspace_or_harmless(p) if p == input.env.workspace

in_workspace_or_harmless(p) if startswith(p, concat("", [input.env.workspace, "/"]))

# What an "always" answer to a shell line remembers: nothing when the line
# is not fully understood; else each command that may be remembered, by
# name for the harmless ones (remember_any_args), else as its exact
# command line.
shell_remember := set() if {
	not shell_understood
} else := {shell_entry(c) | some c in input.shell.commands; rememberable_command(c)}

shell_understood if {
	not input.shell.parseError
	count(input.shell.opaque) == 0
	every c in input.shell.commands {
		c.literal
	}
}

# Only commands found by name (not ./ls, not /tmp/ls) are remembered: a
# program given by its path is whatever that file holds at the time.
rememberable_command(c) if {
	c.argv[0] == c.name
	not c.name in remember_never
	not privileged(c)
	not c.moreArgs
	not c.globs
}

rememberable_command(c) if {
	c.argv[0] == c.name
	c.name in remember_any_args
	not privileged(c)
}

shell_entry(c) := {"scope": "command", "tool": input.tool.name, "argv": [c.argv[0]], "exact": false} if {
	c.name in remember_any_args
} else := {"scope": "command", "tool": input.tool.name, "argv": c.argv, "exact": true}

# Lines the allowlist must never cover, asked about even when the kind
# would allow them: none by default beyond those above.
shell_ask_always := set()

# --- deny: dangerous commands (seed 004) --------------------------------------

# The shell rules are looked at only for shell tools: one test for every
# other call, not one per rule.
deny contains reason if {
	input.shell
	some reason in shell_deny
}

shell_deny contains sprintf("the shell command cannot be parsed, so it cannot be judged: %s", [input.shell.parseError]) if {
	input.shell.parseError
}

shell_deny contains sprintf("dangerous command %q: recursive removal of %s", [c.text, first_of(targets)]) if {
	some c in input.shell.commands
	c.name == "rm"
	recursive(c.args)
	targets := {t | some t in array.concat(c.args, object.get(c, "paths", [])); root_like(t)}
	count(targets) > 0
}

first_of(s) := sort(s)[0] if {
	count(s) == 1
} else := sprintf("%s and %d more", [sort(s)[0], count(s) - 1])

shell_deny contains sprintf("dangerous command %q: --no-preserve-root", [c.text]) if {
	some c in input.shell.commands
	"--no-preserve-root" in c.args
}

shell_deny contains sprintf("fork bomb: shell function %q calls itself", [f.name]) if {
	some f in input.shell.functions
	f.recursive
}

shell_deny contains sprintf("fork bomb: an endless loop starts background processes: %s", [l]) if {
	some l in input.shell.forkLoops
}

shell_deny contains sprintf("dangerous command %q: %s writes onto the disk %s", [c.text, c.name, dev]) if {
	some c in input.shell.commands
	c.name in device_writers
	some dev in device_args(c)
	disk_device(dev)
}

shell_deny contains sprintf("dangerous command %q: makes a file system on %s", [c.text, dev]) if {
	some c in input.shell.commands
	startswith(c.name, "mkfs")
	some dev in device_args(c)
	disk_device(dev)
}

shell_deny contains sprintf("dangerous redirection: writes onto the disk %s", [r.target]) if {
	some r in input.shell.redirects
	r.op in {">", ">>", ">|", "&>", "&>>", "<>"}
	disk_device(r.target)
}

# Commands that destroy what is on a device they are given.
device_writers := {
	"dd", "shred", "wipefs", "blkdiscard", "mkswap", "mke2fs", "mkdosfs", "mkntfs", "mke2fs", "fdisk",
	"sfdisk", "sgdisk", "gdisk", "cfdisk", "parted", "cp", "tee", "pv", "badblocks", "hdparm", "zpool",
	"cryptsetup", "pvcreate", "vgcreate", "lvcreate", "mdadm",
}

# The arguments of c that may name a device: each argument, the value of
# --opt=value and of= / if=.
device_args(c) := {v |
	some a in c.args
	some v in [a, substring(a, indexof(a, "=") + 1, -1)]
}

recursive(args) if {
	some a in args
	a in {"-r", "-R", "--recursive"}
}

recursive(args) if {
	some a in args
	regex.match(`^-[a-zA-Z]*[rR][a-zA-Z]*$`, a)
}

# root_like is a target whose removal takes the system or the home
# directory: /, a glob at the top level (/*, /*/), a top-level system
# directory, ~ and $HOME and globs right under them.
root_like(t) if regex.match(`^(/[/.]*|/+[^/]*[*?\[][^/]*(/.*)?|/+(bin|boot|dev|etc|home|lib|lib32|lib64|opt|proc|root|sbin|srv|sys|usr|var)(/+\*?)?/*|~/*|~/+[^/]*[*?\[].*|"?\$(HOME|\{HOME\})"?/*"?([^/"]*[*?\[][^/"]*"?)?)$`, t)

root_like(t) if {
	input.env.home != ""
	t == input.env.home
}

root_like(t) if {
	input.env.home != ""
	startswith(t, concat("", [input.env.home, "/"]))
	rest := substring(t, count(input.env.home) + 1, -1)
	regex.match(`^[^/]*[*?\[]`, rest)
}

disk_device(p) if regex.match(disk_device_pattern, p)

# Block devices: whole disks, partitions, device-mapper, LVM, RAID, loop,
# network and by-id names.
disk_device_pattern := `^/dev/((sd|hd|vd|xvd)[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+|disk[0-9]+|mapper/.+|disk/by-[^/]+/.+|dm-[0-9]+|md[0-9]+|loop[0-9]+|nbd[0-9]+|rbd[0-9]+|zd[0-9]+|bcache[0-9]+|sr[0-9]+|root$|[a-z0-9_-]+vg/.+)`
