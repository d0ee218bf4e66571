package toolbus_test

import data.toolbus

server_request(method, trusted) := {
	"tool": {"name": "create_issue", "kind": "other", "source": "mcp", "server": "github", "trust": trusted},
	"caller": {"id": "facade/agent:claude-code", "role": "agent", "session": "s-1"},
	"request": {"method": method, "params": {"message": "Which repository?"}},
}

test_a_trusted_server_may_ask_the_client if {
	count(toolbus.server_request_denied) == 0 with input as server_request("elicitation/create", true)
	count(toolbus.server_request_denied) == 0 with input as server_request("sampling/createMessage", true)
}

test_an_untrusted_server_may_not_ask_the_user if {
	some reason in toolbus.server_request_denied with input as server_request("elicitation/create", false)
	contains(reason, `MCP server "github" is not trusted`)
}

test_an_untrusted_server_may_sample if {
	count(toolbus.server_request_denied) == 0 with input as server_request("sampling/createMessage", false)
}
