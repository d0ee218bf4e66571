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

# sensitive_leads: what a path one of the expressions above matches
# shows at the start of one of its components, read forward (/w/id_rsa
# has the component id_rsa) or reversed (/w/x.pem reversed has mep.x),
# so that a path that shows none is not matched against them:
# - a name's text after its last wildcard (the whole name when it has
#   none) ends the path, so its last component reversed starts with it
#   reversed: *.pem gives mep.;
# - a name that ends with a wildcard, a directory and a path end start a
#   component with their text before the first wildcard, to its first /:
#   id_* gives id_, .aws/credentials gives .aws;
# - a file, and a directory of sensitive_dir_prefixes, has its last
#   component in the path: /etc/shadow gives shadow.
# A directory or path end that starts with a wildcard, and a name of
# wildcards alone, give "", which every component starts with, and so
# does an empty list, whose expression matches more than any pattern
# would.
sensitive_leads := {name_lead(n) | some n in data.toolbus.sensitive_names} | {first_text(d) |
	some d in data.toolbus.sensitive_dirs | data.toolbus.sensitive_path_ends
} | {last_component(lower(f)) | some f in data.toolbus.sensitive_files | data.toolbus.sensitive_dir_prefixes} | empty_list_leads

name_lead(n) := strings.reverse(last_component(t)) if {
	t := last_text(n)
	t != ""
} else := first_text(n)

empty_list_leads contains "" if count(data.toolbus.sensitive_names) == 0

empty_list_leads contains "" if count(data.toolbus.sensitive_dirs | data.toolbus.sensitive_path_ends) == 0

empty_list_leads contains "" if count(data.toolbus.sensitive_files) == 0

empty_list_leads contains "" if count(data.toolbus.sensitive_dir_prefixes) == 0

# The text of n after its last wildcard, and before its first to its
# first /, lowered; a wildcard-free n is its own last text.
last_text(n) := texts[count(texts) - 1] if texts := split(replace(lower(n), "?", "*"), "*")

first_text(n) := split(split(replace(lower(n), "?", "*"), "*")[0], "/")[0]

last_component(s) := parts[count(parts) - 1] if parts := split(s, "/")

name_regex(n) := replace(replace(replace(lower(n), ".", `\.`), "*", `[^/]*`), "?", `[^/]`)

# literal_regex matches s alone, without regard to case (paths are
# lowered before they are matched).
literal_regex(s) := regex.replace(lower(s), `[\\.+*?()|\[\]{}^$]`, `\$0`)
