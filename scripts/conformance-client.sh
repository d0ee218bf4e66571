#!/usr/bin/env bash
# The client under test of the MCP conformance suite's client mode: toolbus,
# run as a user runs it. The suite runs
#
#   node22 conformance/dist/index.js client \
#       --command scripts/conformance-client.sh --scenario NAME
#
# appending the URL of its test server and setting MCP_CONFORMANCE_SCENARIO.
# This script starts `toolbus up` on a fresh data directory and a free port,
# with a generated Claude Code .mcp.json naming URL as a streamable-HTTP
# server (trusted, so that no approver is needed), waits until
# `toolbus mcp status --json` shows it connected, does what the scenario
# asks through `toolbus call`, and stops toolbus.
#
# It uses $TOOLBUS_BIN when set, else builds cmd/toolbus into a temporary
# directory. The test that runs the suite is cmd/toolbus's TestConformanceClient.
set -euo pipefail

url=${1:?usage: conformance-client.sh URL (the suite appends it)}
scenario=${MCP_CONFORMANCE_SCENARIO:-initialize}
# How long toolbus has to come up and connect: a bound on a wait, kept
# under the suite's own timeout of the whole client.
connect_wait=${TOOLBUS_CONNECT_WAIT:-60}

tmp=$(mktemp -d)
up_pid=
cleanup() {
	if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
		kill -INT "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
# The suite ends a client that runs out of time with SIGTERM: exit, so
# that cleanup stops toolbus.
trap 'exit 1' INT TERM

bin=${TOOLBUS_BIN:-}
if [ -z "$bin" ]; then
	(cd "$(dirname "$0")/.." && go build -o "$tmp/toolbus" ./cmd/toolbus)
	bin=$tmp/toolbus
fi

# The URL goes into JSON as it is, so it may hold nothing JSON would quote.
case "$url" in
http://* | https://*) ;;
*) echo "conformance-client: $url is no http(s) URL" >&2; exit 2 ;;
esac
case "$url" in
*[\"\\[:space:][:cntrl:]]*) echo "conformance-client: $url holds characters JSON would quote" >&2; exit 2 ;;
esac
printf '{"mcpServers": {"conformance": {"type": "http", "url": "%s", "trust": true}}}\n' "$url" > "$tmp/mcp.json"
mkdir "$tmp/workspace"

# Port 0: the bus takes a free port and prints its URL.
TOOLBUS_NATS= "$bin" up --listen 127.0.0.1:0 --data "$tmp/data" --workspace "$tmp/workspace" \
	--mcp-config "$tmp/mcp.json" > "$tmp/up.out" 2> "$tmp/up.err" &
up_pid=$!

# fail prints why, with what toolbus up said, and exits non-zero.
fail() {
	echo "conformance-client: $*" >&2
	echo "--- toolbus up stdout:" >&2
	cat "$tmp/up.out" >&2
	echo "--- toolbus up stderr:" >&2
	cat "$tmp/up.err" >&2
	exit 1
}

deadline=$((SECONDS + connect_wait))
nats=
while [ -z "$nats" ]; do
	nats=$(grep -o 'nats://[^ ]*' "$tmp/up.out" || true)
	kill -0 "$up_pid" 2>/dev/null || fail "toolbus up exited before it was up"
	[ "$SECONDS" -lt "$deadline" ] || fail "toolbus up printed no bus URL within ${connect_wait}s"
	[ -n "$nats" ] || sleep 0.1
done
echo "toolbus is up at $nats"

# This toolbus hosts the one server, so its one state is the server's.
until "$bin" mcp status --json --nats "$nats" | grep -q '"state": "connected"'; do
	[ "$SECONDS" -lt "$deadline" ] || fail "the server did not connect within ${connect_wait}s: $("$bin" mcp status --nats "$nats" 2>&1)"
	sleep 0.1
done
echo "connected to $url"

case "$scenario" in
initialize)
	# The connection is the scenario: initialize and the tool listing.
	;;
tools_call)
	out=$("$bin" call add_numbers --args '{"a":1,"b":2}' --nats "$nats") || fail "toolbus call add_numbers failed"
	echo "add_numbers: $out"
	[ "$out" = "The sum of 1 and 2 is 3" ] || fail "add_numbers answered $out"
	;;
*)
	fail "scenario $scenario is not one this client knows (initialize, tools_call)"
	;;
esac

kill -INT "$up_pid"
wait "$up_pid" || fail "toolbus up exited with status $? on SIGINT"
up_pid=
