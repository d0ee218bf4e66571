#!/usr/bin/env bash
# The whole test suite, and first whatever the tests need. This is the
# README's second Quick start command, and what CI runs (.ci/run).
#
# Every test runs real parts: an in-process nats-server with JetStream,
# the built binaries as subprocesses. Nothing here needs the network beyond
# the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
go version

echo "== modules"
go mod download

echo "== gofmt and go vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...

echo "== tests"
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null 2>&1; then
	race=(-race)
fi
go test "${race[@]}" -count=1 ./...

echo "== Rego tests: toolbus policy test, and the stock opa test"
go run ./cmd/toolbus policy test policy/
go tool opa test policy/

echo "== benchmarks compile and run once"
# Their tables are long; they are shown only when a benchmark fails.
bench_log=$(mktemp)
trap 'rm -f "$bench_log"' EXIT
if ! go test -run '^$' -bench . -benchtime 1x ./... > "$bench_log" 2>&1; then
	grep -v '^\(goos\|goarch\|pkg\|cpu\):' "$bench_log"
	echo "== a benchmark failed"
	exit 1
fi

echo "== all tests passed"
