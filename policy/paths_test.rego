package toolbus_test

import data.toolbus

test_sensitive_paths_denied if {
	every p in [
		"/etc/shadow", "/etc/passwd", "/etc/sudoers.d/x", "/home/ada/.ssh/id_rsa", "/root/.ssh/authorized_keys",
		"/home/ada/.aws/credentials", "/home/ada/.config/gcloud/application_default_credentials.json",
		"/home/ada/.azure/accessTokens.json", "/home/ada/.kube/config", "/home/ada/.docker/config.json",
		"/w/.env", "/w/app/.env.production", "/w/.env.production.local", "/home/ada/.netrc", "/w/.envrc", "/w/.npmrc",
		"/home/ada/.pypirc", "/home/ada/.git-credentials", "/w/deploy/id_ed25519", "/w/certs/server.pem",
		"/w/certs/server.key", "/w/ci.kubeconfig", "/home/ada/.gnupg/secring.gpg",
		# the agents' MCP configuration and settings, which toolbus follows
		"/w/.mcp.json", "/w/.gemini/settings.json", "/home/ada/.gemini/settings.json", "/w/.claude/settings.local.json",
		# and their hook scripts, which the executor runs
		"/w/.claude/hooks/no-curl.sh", "/w/.gemini/hooks/check.js", "/home/ada/.claude/hooks",
		# case does not matter
		"/w/.ENV", "/w/Id_Rsa", "/home/ada/.SSH/config", "/w/CERT.PEM", "/ETC/SHADOW",
	] {
		verdict(file_tool("read_file", "read", [p])) == "DENY"
	}
}

test_ordinary_paths_allowed if {
	every p in [
		"/w/README.md", "/w/.env.example", "/w/.env.sample", "/w/env/config.go", "/w/.envrc.md", "/w/keys.go",
		"/home/ada/.ssh/id_rsa.pub", "/w/identity.go", "/w/monkey.txt", "/w/pem/README",
		"/w/docs/mcp.json.md", "/w/.gemini/GEMINI.md", "/w/src/hooks/useState.ts", "/w/.claude/agents/review.md",
	] {
		verdict(file_tool("read_file", "read", [p])) == "ALLOW"
	}
}

test_a_policy_team_extends_the_lists if {
	verdict(file_tool("read_file", "read", ["/w/secrets.yaml"])) == "ALLOW"
	verdict(file_tool("read_file", "read", ["/w/secrets.yaml"])) == "DENY" with toolbus.sensitive_names as {"secrets.yaml"}
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

test_samples_stand_for_the_patterns if {
	".env" in toolbus.sensitive_samples
	"id_x" in toolbus.sensitive_samples
	"x.pem" in toolbus.sensitive_samples
	".ssh" in toolbus.sensitive_samples
}

# The leads (constants.rego) spare an ordinary path the regular
# expressions: none is "", which every component starts with, while the
# lists have entries.
test_leads_pass_ordinary_paths if {
	not "" in data.toolbus_constants.sensitive_leads
}

# An empty list's expression matches what no entry would: with no names,
# a path that ends with / (its name is empty); with no directories and
# path ends, any path with a /; with no files, the empty path; with no
# directory prefixes, any absolute path. The leads let those paths through.
test_an_empty_list_matches_as_its_expression if {
	toolbus.sensitive("/w/src/") with toolbus.sensitive_names as set()
	not toolbus.sensitive("/w/src/")
	toolbus.sensitive("/w/README.md") with toolbus.sensitive_dirs as set() with toolbus.sensitive_path_ends as set()
	toolbus.sensitive("") with toolbus.sensitive_files as set()
	not toolbus.sensitive("")
	toolbus.sensitive("/w/README.md") with toolbus.sensitive_dir_prefixes as set()
}
