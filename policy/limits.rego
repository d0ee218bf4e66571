# Limits: how many calls, how many bytes of arguments and how many calls
# at once a caller may have, counted across the fleet. The executor
# applies them once a call may run (ALLOW, or a person said yes): a call
# over one ends RATE_LIMITED or CONCURRENCY_LIMITED with a retry-after,
# or waits in a queue where the limit has one. README.md documents the
# shape and why these numbers.
#
# A rate (calls or bytes per interval) is counted by each executor,
# which tells the others: no round trip, and calls judged at the same
# moment on several executors may pass the limit by a few, at most the
# limit times the executors (docs/fleet.md). A rate that must hold to
# the call adds "exact": true, and each call is counted on the bus, at
# a round trip's cost. None of these needs it: they slow a loop, and a
# few calls more in a minute change nothing. Calls at once are exact
# always.
package toolbus

# principal is who the bus vouches sent the call: the executor's
# input.caller.principal, which for a client of the MCP facade is
# "facade/<client>" (each client its own principal, with limits of its
# own); the caller's proven id up to its first "/" where an input names
# no principal; or "_" for every caller the bus vouches for none of.
# Agent and session names are the caller's claims: a limit keyed on them
# alone is escaped by naming another, so every default limit is keyed on
# the principal.
principal := input.caller.principal if {
	input.caller.proven
	input.caller.principal != ""
} else := split(input.caller.id, "/")[0] if input.caller.proven

else := "_"

# Commands run on the executor's host: a few at a time per caller, the
# rest wait in line rather than fail, and a loop of them is slowed.
limits contains {
	"name": "execute calls at once",
	"key": [principal],
	"concurrent": 4,
	"queue": {"max": 16, "wait": "2m"},
} if input.tool.kind == "execute"

limits contains {
	"name": "execute calls a minute",
	"key": [principal],
	"calls": 60,
	"per": "1m",
} if input.tool.kind == "execute"

# An untrusted MCP server is someone else's service: a caller gets so
# many calls of it, so many bytes sent to it and so many calls at once,
# each server counted on its own.
limits contains {
	"name": "calls a minute to an untrusted MCP server",
	"key": [principal, input.tool.server],
	"calls": 120,
	"per": "1m",
} if untrusted_mcp

limits contains {
	"name": "argument bytes a minute to an untrusted MCP server",
	"key": [principal, input.tool.server],
	"bytes": 4194304,
	"per": "1m",
} if untrusted_mcp

limits contains {
	"name": "calls at once to an untrusted MCP server",
	"key": [principal, input.tool.server],
	"concurrent": 8,
	"queue": {"max": 32, "wait": "1m"},
} if untrusted_mcp
