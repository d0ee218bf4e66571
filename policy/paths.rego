# Sensitive paths: files no call may touch, whatever the tool, its kind or
# the allowlist. The lists are data for a policy team to extend; matching
# ignores case, so .ENV and Id_Rsa count too.
package toolbus

# Files by their name, anywhere. * and ? are wildcards within the name;
# names hold letters, digits and . _ - otherwise.
sensitive_names := {
	# environment files with secrets, and tools' credential files
	".env", ".env.*", ".envrc", ".npmrc", ".yarnrc.yml", ".pypirc", ".netrc", "_netrc", ".git-credentials",
	".pgpass", ".my.cnf", ".vault-token", ".htpasswd", "kubeconfig", "*.kubeconfig",
	"application_default_credentials.json", "credentials.tfrc.json",
	# agents' MCP server configuration, which toolbus follows as it is saved:
	# an agent that could write it could start any program as a trusted
	# server, and its env and headers hold tokens
	".mcp.json",
	# private keys and key stores
	"id_*", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx", "*.ppk",
}

# Names that look sensitive and are not: templates of .env files, public
# keys.
sensitive_name_exceptions := {".env.example", ".env.sample", ".env.template", ".env.dist", "*.pub"}

# Directories whose every file is sensitive, by name, anywhere.
sensitive_dirs := {".ssh", ".gnupg", ".azure", ".password-store"}

# Files and directories by the end of their path: cloud CLI credentials
# and the like.
sensitive_path_ends := {
	".aws/credentials", ".aws/config", ".aws/sso/cache", ".config/gcloud", ".kube/config", ".docker/config.json",
	".config/gh/hosts.yml", ".config/hub", ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
	".composer/auth.json", ".m2/settings-security.xml", ".terraform.d/credentials.tfrc.json",
	".local/share/keyrings", ".config/op",
	# agents' settings (mcpServers, tools.core, tools.exclude), for the same
	# reason as .mcp.json
	".gemini/settings.json", ".claude/settings.json", ".claude/settings.local.json", ".cursor/mcp.json",
	# the agents' hook scripts, where both agents keep them: the executor
	# runs them around calls, and an agent that could rewrite one could
	# turn off the hook that guards it
	".claude/hooks", ".gemini/hooks",
}

# Files by their absolute path.
sensitive_files := {"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/passwd", "/etc/master.passwd", "/etc/security/opasswd"}

sensitive_dir_prefixes := {"/etc/sudoers.d"}

# --- rules --------------------------------------------------------------------

deny contains sprintf("sensitive path %s", [p]) if some p in denied_paths

# denied_paths are the paths of the call that no call may touch. Tools that
# choose their files themselves (search_file_content, read_many_files) ask
# this rule about each file they find and skip the ones in it.
denied_paths contains p if {
	some p in input.paths
	sensitive(p)
}

# sensitive_samples are file names that stand for the lists above (a
# pattern's wildcards made into x): the executor judges a shell glob
# (cat .en[v]) as the sensitive file it could match.
sensitive_samples := {replace(replace(n, "*", "x"), "?", "x") | some n in sensitive_names} | sensitive_dirs

# A path is sensitive when it is one of sensitive_files or under one of
# sensitive_dir_prefixes, or when its name is, or a directory or path end
# in it is, and its name is not an exception (.ssh/id_rsa.pub is not). The
# regular expressions are made in constants.rego, and so are the leads: a
# path none of whose components, forward or reversed, starts with one
# matches no expression (README.md in a workspace), and is told so with
# one look at its components instead of the expressions.
sensitive(p) if {
	lp := lower(p)
	r := strings.reverse(lp)
	strings.any_prefix_match(split(concat("/", [lp, r]), "/"), data.toolbus_constants.sensitive_leads)
	sensitive_matched(lp, r)
}

sensitive_matched(lp, _) if regex.match(data.toolbus_constants.path_pattern, lp)

sensitive_matched(_, r) if {
	regex.match(data.toolbus_constants.reversed_pattern, r)
	not regex.match(data.toolbus_constants.reversed_exception, r)
}
