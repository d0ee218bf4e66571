#!/usr/bin/env bash
# Builds a release of toolbus into DIR (default dist/, which git ignores):
# for linux and darwin on amd64 and arm64, static binaries of toolbus, bus,
# registry and executor (CGO_ENABLED=0, -trimpath), each platform's in a
# tar.gz with the README and the changelog, its software bill of materials
# (SPDX 2.3 JSON, from the binaries' own build information: toolbus
# version --sbom), and SHA256SUMS over every archive and bill.
#
#   scripts/release.sh [DIR]          VERSION=v1.2.0 scripts/release.sh
#
# VERSION defaults to git describe; it is what `toolbus version` prints.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-dist}"
version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}"
platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
commands=(./cmd/toolbus ./cmd/bus ./cmd/registry ./cmd/executor)

rm -rf "$out"
mkdir -p "$out"
# The host's own toolbus writes the bills of every platform's binaries.
host_bin="$out/.host"
mkdir -p "$host_bin"
go build -o "$host_bin/" ./cmd/toolbus

for platform in "${platforms[@]}"; do
	os="${platform%/*}" arch="${platform#*/}"
	name="toolbus_${version}_${os}_${arch}"
	dir="$out/$name"
	mkdir -p "$dir"
	# -buildvcs: the commit goes into each binary (and so into its bill),
	# whatever GOFLAGS says.
	CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -buildvcs=true -trimpath \
		-ldflags "-s -w -X main.version=$version" -o "$dir/" "${commands[@]}"
	cp README.md CHANGELOG.md "$dir/"
	for bin in toolbus bus registry executor; do
		"$host_bin/toolbus" version --sbom "$dir/$bin" > "$dir/$bin.spdx.json"
	done
	tar -C "$out" -czf "$out/$name.tar.gz" "$name"
	echo "built $name"
done
rm -rf "$host_bin"
(cd "$out" && sha256sum ./*.tar.gz ./*/*.spdx.json > SHA256SUMS)
echo "release $version in $out: $(ls "$out"/*.tar.gz | wc -l) archives, SHA256SUMS"
