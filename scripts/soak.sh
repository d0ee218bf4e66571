#!/usr/bin/env bash
# The long soak of `toolbus up` (cmd/toolbus TestSoakUpWithMCPRediscovery),
# 15 minutes by default, under the race detector: an MCP server's tools
# change every 5 s and are rediscovered while an agent calls the server's
# tool up to 20 times a second; every call must work and /readyz say
# ready. It runs past the 13 minutes after which an up was once seen to
# lose its catalogue replica. scripts/test.sh runs the same test for 2
# minutes; docs/performance.md (#soak-of-toolbus-up) quotes this one.
#
#   scripts/soak.sh          # 15 minutes
#   scripts/soak.sh 30       # another length, in minutes
#
# It prints the rounds of rediscovery and the calls made, and exits
# non-zero when a call or a check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-15}
case $minutes in
'' | *[!0-9]* | 0) echo "usage: scripts/soak.sh [MINUTES]" >&2; exit 2 ;;
esac
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null 2>&1; then
	race=(-race)
fi
echo "== soak of toolbus up for $minutes minutes ${race[*]:-(no -race: cgo or a C compiler is missing)}"
echo "   load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
start=$(date +%s)
status=0
# go test's deadline leaves 10 minutes for the build, the start of
# toolbus up and its stop.
TOOLBUS_UP_SOAK=${minutes}m go test "${race[@]}" -count=1 -timeout "$((minutes + 10))m" -v \
	-run '^TestSoakUpWithMCPRediscovery$' ./cmd/toolbus/ || status=$?
echo "== $(($(date +%s) - start)) s in all; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
