# Hard links. A regular file with more than one name could be any file:
# its other name may be a key anywhere on the same file system, and a hard
# link to ~/.ssh/id_rsa inside the workspace reads like any plain file
# there. The executor lists the files of a call that have other names in
# input.hardLinks (see README.md); the user is asked about them, and
# neither a kind the policy allows nor a remembered approval settles it.
package toolbus

# ask_always (toolbus.rego) is asked after the deny rules, before the allow
# rules and the allowlist, and its answers are not remembered.
ask_always contains sprintf("%s has other names (hard links), so it could be any file on its file system: the user is asked", [p]) if {
	some p in input.hardLinks
}
