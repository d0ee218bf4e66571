# Values the policy makes from its own data that no input changes. The
# executor evaluates this package once, when it loads the policy, and
# decides calls with the values instead of these rules, so that no call
# makes them again (opa test uses the rules as written). Rules here may
# read data.toolbus but never input.
package toolbus_constants

# Regular expressions for the lists of paths.rego: one for whole paths
# (sensitive_files, and the files under sensitive_dir_prefixes), one for a
# file's name
# alone (matched against the last component of a path: a pattern that may
# start anywhere in a long path costs several times more), one for
# sensitive directories and path ends anywhere in a path, and one for the
# exceptions, which are names too.
path_pattern := concat("", [
	`^(`, concat("|", {literal_regex(f) | some f in data.toolbus.sensitive_files}), `)$|^(`,
	concat("|", {literal_regex(d) | some d in data.toolbus.sensitive_dir_prefixes}), `)/`,
])

name_pattern := concat("", [`^(`, concat("|", {name_regex(n) | some n in data.toolbus.sensitive_names}), `)$`])

dir_pattern := concat("", [
	`(^|/)(`,
	concat("|", {name_regex(n) | some n in data.toolbus.sensitive_dirs | data.toolbus.sensitive_path_ends}),
	`)(/|$)`,
])

exception_pattern := concat("", [`^(`, concat("|", {name_regex(n) | some n in data.toolbus.sensitive_name_exceptions}), `)$`])

name_regex(n) := replace(replace(replace(lower(n), ".", `\.`), "*", `[^/]*`), "?", `[^/]`)

# literal_regex matches s alone, without regard to case (paths are
# lowered before they are matched).
literal_regex(s) := regex.replace(lower(s), `[\\.+*?()|\[\]{}^$]`, `\$0`)
