# What an MCP server may ask the caller's own client while it serves a
# call. See README.md: "Output: data.toolbus.server_request_denied".
package toolbus

# A server's request (input.request.method: "sampling/createMessage" or
# "elicitation/create", input.request.params as the server sent them)
# reaches the caller's client only when no reason here refuses it; the
# executor asks with input.tool (the tool called), input.caller and
# input.request alone. A refused request is answered with an error at
# once, and the caller never sees it.

# An elicitation puts the server's own question to the person in front of
# the agent, in the agent's client, with nothing that says toolbus did not
# ask it: an untrusted server could ask them for a password or a token.
# Only a trusted server's questions reach them. Sampling asks the client's
# model, which the client shows and bounds itself.
server_request_denied contains sprintf("MCP server %q is not trusted, and only a trusted server may ask the agent's user a question (an untrusted one could ask for a secret)", [input.tool.server]) if {
	input.request.method == "elicitation/create"
	not input.tool.trust
}
