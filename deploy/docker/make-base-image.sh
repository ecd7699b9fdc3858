#!/usr/bin/env bash
# Makes the base image the Dockerfiles start from (debian:bookworm-slim by default) on a
# machine that can reach Debian's package mirror but no image registry: debootstrap's minbase
# variant, imported with `docker import`. With a registry, `docker pull debian:bookworm-slim`
# does the same job and this script is not needed.
#
# Usage: make-base-image.sh [TAG]   (default leasehold/debian:bookworm-minbase)
# Does nothing when TAG already exists. Needs root (debootstrap) and the debootstrap package.
set -euo pipefail

tag="${1:-leasehold/debian:bookworm-minbase}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag exists"
    exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "debootstrap not found (apt-get install debootstrap)" >&2
    exit 1
fi

rootfs="$(mktemp -d /tmp/leasehold-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT

echo "debootstrap --variant=minbase bookworm from $mirror"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
    tail -n 20 "$rootfs.log" >&2
    exit 1
}
rm -f "$rootfs.log"
# What the official slim image also drops: package lists and caches, docs and man pages.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*

tar -C "$rootfs" -c . | docker import --change 'CMD ["bash"]' - "$tag" >/dev/null
echo "imported $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
