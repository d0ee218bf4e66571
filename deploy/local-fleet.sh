#!/usr/bin/env bash
# local-fleet.sh starts the fleet of deploy/compose.yaml as local processes
# on loopback, for machines without a container engine:
#
#   three bus nodes in one NATS cluster (JetStream, 3 copies of every store),
#   the registry, two executors (each with a workspace of its own), and the
#   web console, each connected with an identity of its own (`toolbus
#   init`, in DIR/identities), which the bus nodes enforce.
#
#   deploy/local-fleet.sh start [DIR]    build the commands into DIR/bin and start the fleet
#   deploy/local-fleet.sh status [DIR]   which parts run
#   deploy/local-fleet.sh stop [DIR]     stop every part (SIGINT, then SIGKILL after 30 s)
#   deploy/local-fleet.sh reload [DIR]   have the bus nodes read the identities again
#
# DIR (default: $TOOLBUS_FLEET_DIR, else ./.local-fleet) holds the
# binaries, each part's data, log (DIR/log/NAME.log) and pid, and the
# workspaces. The ports are TOOLBUS_FLEET_PORT (client ports, default
# 4301..4303), TOOLBUS_FLEET_ROUTE_PORT (6301..6303) and
# TOOLBUS_FLEET_CONSOLE (127.0.0.1:4380); every part serves /metrics,
# /healthz and /readyz on TOOLBUS_FLEET_METRICS.. (default 9401..9407:
# bus1-3, registry, executor1-2, console). Any command reaches the fleet
# through any node:
#
#   TOOLBUS_IDENTITY=DIR/identities/agent.nk toolbus call read_file --workspace one \
#     --args '{"file_path":"README.md"}' --nats "$(deploy/local-fleet.sh urls)"
#
# executor1's workspace is named one, executor2's two: a file or shell
# call names one of them (--workspace), and runs there only. An executor
# reads the agents' settings its workspace holds (.gemini/settings.json,
# .claude/settings.json, .mcp.json: hooks, MCP servers, discovery), as
# `toolbus up` reads its directory's; they are read at start.
#
# The identities are bus, admin, registry, executor1, executor2, approver
# (the console), auditor, agent and facade (for `toolbus mcp serve`, the
# only member that may answer as a caller's user); `toolbus init DIR/identities --add
# agent:NAME` adds another, which the nodes admit after
# `deploy/local-fleet.sh reload [DIR]` (SIGHUP to each node).
set -euo pipefail
# Everything made here is this user's alone: the logs hold the console's
# address with its token, the data dirs the stores.
umask 077

cmd=${1:-}
dir=${2:-${TOOLBUS_FLEET_DIR:-./.local-fleet}}
port=${TOOLBUS_FLEET_PORT:-4301}
route=${TOOLBUS_FLEET_ROUTE_PORT:-6301}
console=${TOOLBUS_FLEET_CONSOLE:-127.0.0.1:4380}
metrics=${TOOLBUS_FLEET_METRICS:-9401}
repo=$(cd "$(dirname "$0")/.." && pwd)

urls() {
	echo "nats://127.0.0.1:$port,nats://127.0.0.1:$((port + 1)),nats://127.0.0.1:$((port + 2))"
}

# start_part NAME COMMAND ARGS...: runs a part in the background, its
# output in DIR/log/NAME.log, its pid in DIR/run/NAME.pid.
start_part() {
	local name=$1 log=$dir/log/$1.log
	shift
	# A log an earlier run left keeps its mode through ">": make it the
	# user's alone before anything is written to it.
	: >"$log"
	chmod 600 "$log"
	"$@" >"$log" 2>&1 &
	echo $! >"$dir/run/$name.pid"
}

running() {
	local pidfile=$1
	[ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# wait_port PORT [SECONDS] waits until something listens on PORT (30 s by
# default).
wait_port() {
	local seconds=${2:-30}
	for _ in $(seq 1 $((seconds * 10))); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "local-fleet: nothing listens on port $1 after $seconds s" >&2
	return 1
}

# wait_log waits until the log file $1 has a line matching the pattern $2
# (grep -o), and prints the first match.
wait_log() {
	local found
	for _ in $(seq 1 300); do
		if found=$(grep -o "$2" "$1" 2>/dev/null | head -1) && [ -n "$found" ]; then
			echo "$found"
			return 0
		fi
		sleep 0.1
	done
	echo "local-fleet: $1 says nothing like $2 after 30 s" >&2
	return 1
}

# settings_flags WS sets flags to the executor flags naming the agents'
# settings files workspace WS holds.
settings_flags() {
	flags=()
	[ ! -f "$1/.gemini/settings.json" ] || flags+=(--settings "$1/.gemini/settings.json")
	[ ! -f "$1/.claude/settings.json" ] || flags+=(--claude-settings "$1/.claude/settings.json")
	[ ! -f "$1/.mcp.json" ] || flags+=(--mcp-config "$1/.mcp.json")
}

start() {
	mkdir -p "$dir/bin" "$dir/log" "$dir/run" "$dir/ws1" "$dir/ws2"
	chmod 700 "$dir/log" "$dir/run"
	dir=$(cd "$dir" && pwd)
	for pidfile in "$dir"/run/*.pid; do
		if running "$pidfile"; then
			echo "local-fleet: already running ($pidfile); stop it first" >&2
			exit 1
		fi
	done
	echo "building into $dir/bin"
	(cd "$repo" && go build -o "$dir/bin/" ./cmd/bus ./cmd/registry ./cmd/executor ./cmd/toolbus)
	local ids="$dir/identities"
	"$dir/bin/toolbus" init "$ids" --add bus:bus --add admin:admin --add registry:registry --add executor:executor1 \
		--add executor:executor2 --add approver:approver --add auditor:auditor --add agent:agent --add facade:facade >/dev/null
	local routes="nats-route://127.0.0.1:$route,nats-route://127.0.0.1:$((route + 1)),nats-route://127.0.0.1:$((route + 2))"
	for i in 0 1 2; do
		start_part "bus$((i + 1))" "$dir/bin/bus" --listen "127.0.0.1:$((port + i))" --data "$dir/data/bus$((i + 1))" \
			--cluster-name toolbus-fleet --cluster-listen "127.0.0.1:$((route + i))" --routes "$routes" --server-name "bus$((i + 1))" \
			--identities "$ids" --metrics "127.0.0.1:$((metrics + i))" \
			--audit-checkpoint "$([ $i = 0 ] && echo 1m || echo 0)"
	done
	for i in 0 1 2; do
		wait_port $((port + i))
	done
	local all
	all=$(urls)
	[ -f "$dir/ws1/README.md" ] || echo "# workspace one" >"$dir/ws1/README.md"
	[ -f "$dir/ws2/README.md" ] || echo "# workspace two" >"$dir/ws2/README.md"
	TOOLBUS_IDENTITY="$ids/registry.nk" start_part registry "$dir/bin/registry" --nats "$all" --metrics "127.0.0.1:$((metrics + 3))"
	local flags
	settings_flags "$dir/ws1"
	TOOLBUS_IDENTITY="$ids/executor1.nk" start_part executor1 "$dir/bin/executor" --nats "$all" --workspace "$dir/ws1" --workspace-name one \
		--metrics "127.0.0.1:$((metrics + 4))" "${flags[@]}"
	settings_flags "$dir/ws2"
	TOOLBUS_IDENTITY="$ids/executor2.nk" start_part executor2 "$dir/bin/executor" --nats "$all" --workspace "$dir/ws2" --workspace-name two \
		--metrics "127.0.0.1:$((metrics + 5))" "${flags[@]}"
	TOOLBUS_IDENTITY="$ids/approver.nk" start_part console "$dir/bin/toolbus" console --nats "$all" --listen "$console" --metrics "127.0.0.1:$((metrics + 6))"
	# The console listens once an executor has made the allowlist bucket,
	# after the audit stream and the executors' other stores: a fresh
	# cluster makes each with 3 copies, which a loaded machine takes tens
	# of seconds for.
	wait_port "${console##*:}" 180
	# The console listens a moment before it prints its address.
	console_url=$(wait_log "$dir/log/console.log" 'http://[^ ]*token=[^ ]*')
	echo "fleet up: $all"
	echo "metrics:  http://127.0.0.1:$metrics/metrics .. :$((metrics + 6))"
	echo "identities: $ids (TOOLBUS_IDENTITY=$ids/agent.nk to call as the agent; $ids/facade.nk for toolbus mcp serve)"
	echo "console:  $console_url"
}

stop() {
	local pids=() names=()
	for pidfile in "$dir"/run/*.pid; do
		[ -f "$pidfile" ] || continue
		if running "$pidfile"; then
			pids+=("$(cat "$pidfile")")
			names+=("$(basename "$pidfile" .pid)")
		fi
	done
	# The parts first, the bus nodes last.
	for order in parts nodes; do
		local wait=()
		for k in "${!pids[@]}"; do
			case "${names[$k]}" in bus*) [ $order = nodes ] || continue ;; *) [ $order = parts ] || continue ;; esac
			kill -INT "${pids[$k]}" 2>/dev/null || true
			wait+=("${pids[$k]}")
		done
		for pid in "${wait[@]}"; do
			for _ in $(seq 1 300); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			if kill -0 "$pid" 2>/dev/null; then
				echo "local-fleet: $pid did not stop on SIGINT in 30 s; killed" >&2
				kill -KILL "$pid" 2>/dev/null || true
			fi
		done
	done
	rm -f "$dir"/run/*.pid
	echo "fleet stopped"
}

status() {
	local any=1
	for pidfile in "$dir"/run/*.pid; do
		[ -f "$pidfile" ] || continue
		if running "$pidfile"; then
			echo "$(basename "$pidfile" .pid): running (pid $(cat "$pidfile"))"
			any=0
		else
			echo "$(basename "$pidfile" .pid): stopped"
		fi
	done
	return $any
}

# reload has every bus node read DIR/identities again (SIGHUP).
reload() {
	local any=1
	for pidfile in "$dir"/run/bus*.pid; do
		if running "$pidfile"; then
			kill -HUP "$(cat "$pidfile")"
			echo "$(basename "$pidfile" .pid): asked to read the identities again (see its log)"
			any=0
		fi
	done
	return $any
}

case "$cmd" in
start) start ;;
stop) stop ;;
reload) reload ;;
status) status ;;
urls) urls ;;
*)
	sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
