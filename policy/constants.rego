# Values the policy makes from its own data that no input changes. The
# executor evaluates this package once, when it loads the policy, and
# decides calls with the values instead of these rules, so that no call
# makes them again (opa test uses the rules as written). Rules here may
# read data.toolbus but never input.
package toolbus_constants

# Regular expressions for the lists of paths.rego. One is for whole paths:
# sensitive_files, and the files under sensitive_dir_prefixes. The other
# two are matched against the path reversed (/w/.env as vne./w/), so that
# a file's name comes first and its expression is anchored there: Go's
# regexp, scanning a long path for a name that may start at any slash,
# took several times longer. reversed_pattern holds the names, and the
# directories and path ends anywhere in the path; reversed_exception the
# names that are not sensitive wherever they are.
path_pattern := concat("", [
	`^(`, concat("|", {literal_regex(f) | some f in data.toolbus.sensitive_files}), `)$|^(`,
	concat("|", {literal_regex(d) | some d in data.toolbus.sensitive_dir_prefixes}), `)/`,
])

reversed_pattern := concat("", [
	`^(`, concat("|", {name_regex(strings.reverse(n)) | some n in data.toolbus.sensitive_names}), `)(/|$)|(^|/)(`,
	concat("|", {name_regex(strings.reverse(n)) | some n in data.toolbus.sensitive_dirs | data.toolbus.sensitive_path_ends}),
	`)(/|$)`,
])

reversed_exception := concat("", [
	`^(`, concat("|", {name_regex(strings.reverse(n)) | some n in data.toolbus.sensitive_name_exceptions}), `)(/|$)`,
])

name_regex(n) := replace(replace(replace(lower(n), ".", `\.`), "*", `[^/]*`), "?", `[^/]`)

# literal_regex matches s alone, without regard to case (paths are
# lowered before they are matched).
literal_regex(s) := regex.replace(lower(s), `[\\.+*?()|\[\]{}^$]`, `\$0`)
