#!/usr/bin/env bash
# build-images.sh builds the image deploy/compose.yaml runs, with no image
# registry: the commands are built on this host into deploy/.build/bin
# (static, CGO_ENABLED=0) and copied onto a Debian base made here.
#
#   deploy/build-images.sh
#
# The base, toolbus-base:bookworm, is made once, when the engine does not
# have it: debootstrap (minbase, from Debian's packages) into a temporary
# directory, then imported (podman import / docker import). It needs root,
# or sudo, and the debootstrap package. Later runs only rebuild the
# commands and the image on top, in seconds.
#
# Environment:
#   TOOLBUS_ENGINE        podman or docker (default: podman where installed, else docker)
#   TOOLBUS_IMAGE         the image to build (default toolbus:dev, what compose.yaml runs)
#   TOOLBUS_BASE          the base image (default toolbus-base:bookworm); any image with
#                         bash, coreutils and useradd will do, debian:bookworm-slim among them
#   TOOLBUS_BASE_INCLUDE  Debian packages the made base has beyond minbase
#                         (default ca-certificates; add git, say, for the shell tool's users)
#   TOOLBUS_DEBIAN_MIRROR where debootstrap gets them (default http://deb.debian.org/debian)
#
# With podman on a host with cgroup v1, set CONTAINERS_CONF to
# deploy/containers.conf first (docs/deploy.md).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
engine=${TOOLBUS_ENGINE:-}
if [ -z "$engine" ]; then
	if command -v podman >/dev/null 2>&1; then engine=podman; else engine=docker; fi
fi
image=${TOOLBUS_IMAGE:-toolbus:dev}
base=${TOOLBUS_BASE:-toolbus-base:bookworm}
include=${TOOLBUS_BASE_INCLUDE:-ca-certificates}
mirror=${TOOLBUS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm

command -v "$engine" >/dev/null 2>&1 || {
	echo "build-images: $engine is not installed (docs/deploy.md says what to install)" >&2
	exit 1
}

# as_root runs a command as root: directly, or through sudo.
as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		echo "build-images: $1 needs root, and sudo is not installed" >&2
		return 1
	fi
}

make_base() {
	command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || {
		echo "build-images: $base is missing and debootstrap is not installed (apt-get install debootstrap)," >&2
		echo "or set TOOLBUS_BASE to an image with bash, such as debian:bookworm-slim" >&2
		exit 1
	}
	tmp=$(mktemp -d)
	# debootstrap mounts /proc and /sys in the tree while it configures;
	# an interrupted run may leave them, which must go before the tree.
	trap 'for m in proc sys; do mountpoint -q "$tmp/root/$m" 2>/dev/null && as_root umount "$tmp/root/$m"; done; as_root rm -rf "$tmp"' EXIT
	echo "== base: debootstrap $suite (minbase, with $include) from $mirror"
	if ! as_root env PATH="$PATH:/usr/sbin:/sbin" debootstrap --variant=minbase --include="$include" "$suite" "$tmp/root" "$mirror" >"$tmp/log" 2>&1; then
		tail -20 "$tmp/log" >&2
		echo "build-images: debootstrap failed (log above)" >&2
		exit 1
	fi
	# The packages' archives and lists are only debootstrap's cache.
	as_root sh -c 'rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' sh "$tmp/root"
	echo "== base: $engine import as $base"
	as_root tar -C "$tmp/root" --numeric-owner -c . | "$engine" import - "$base" >/dev/null
	as_root rm -rf "$tmp"
	trap - EXIT
}

echo "== commands: CGO_ENABLED=0 go build into deploy/.build/bin"
mkdir -p "$repo/deploy/.build/bin"
(cd "$repo" && CGO_ENABLED=0 GOOS=linux go build -trimpath -o deploy/.build/bin/ ./cmd/bus ./cmd/registry ./cmd/executor ./cmd/toolbus)

if "$engine" image inspect "$base" >/dev/null 2>&1; then
	echo "== base: $base is there"
elif [ "$base" = toolbus-base:bookworm ]; then
	make_base
fi

echo "== image: $image from $base"
old=$("$engine" image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
# The Dockerfile goes into the context: Docker's classic builder refuses
# one from outside it.
cp "$repo/deploy/Dockerfile" "$repo/deploy/.build/Dockerfile"
"$engine" build --quiet -f "$repo/deploy/.build/Dockerfile" --build-arg BASE="$base" -t "$image" "$repo/deploy/.build" >/dev/null
# The image this one replaces, left with no name, goes, unless a
# container still runs it.
if [ -n "$old" ] && [ "$old" != "$("$engine" image inspect --format '{{.Id}}' "$image")" ]; then
	"$engine" rmi "$old" >/dev/null 2>&1 || true
fi
echo "built $image ($engine)"
