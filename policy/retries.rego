# Which calls may be retried. A call lost with its executor, or with the
# MCP server it ran on, is tried once more under its id only when this
# says running it a second time does no harm; the retry is judged again
# like any call. See README.md, data.toolbus.idempotent.
package toolbus

# Kinds whose calls may run twice: they look and change nothing. Never the
# mutators (edit, delete, move, execute), nor fetch (a request may change
# what it reaches), nor other kinds a tool may be declared with.
idempotent_kinds := {"read", "search", "think"}

default idempotent := false

# A tool's kind is its host's word; an untrusted MCP server's tools and a
# project's discovered tools run code nobody vouched for, whatever kind
# they claim, and are never retried.
idempotent if {
	input.tool.kind in idempotent_kinds
	not untrusted_mcp
	not discovered
}
