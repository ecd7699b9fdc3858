#!/usr/bin/env bash
# Static checks of the deployment files, each skipped with its reason when its tool is
# missing: the alert rules (promtool check and unit tests), the systemd units
# (systemd-analyze verify), the Kubernetes manifests (kubectl kustomize, kubernetes-validate
# against the Kubernetes schemas, check-references.py, and an allocator pod's start-up command
# run in the image), the compose file, the Envoy configs
# (envoy --mode validate) and the Grafana dashboard (parses as JSON).
#
# Environment: PROMTOOL (a promtool binary; else the leasehold-prometheus image's),
# KUBERNETES_VALIDATE_VENV (a virtualenv with kubernetes-validate; created when missing),
# LEASEHOLD_ENVOY (an envoy binary). Exits 1 if any check fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
failed=0
ok() { echo "  ok: $1"; }
skip() { echo "  skipped: $1"; }
fail() { echo "  FAILED: $1"; failed=1; }

echo "== alert rules"
rules="$here/monitoring/prometheus"
promtool_cmd=()
if [ -n "${PROMTOOL:-}" ] || command -v promtool >/dev/null 2>&1; then
    promtool_cmd=("${PROMTOOL:-promtool}")
    cd "$rules"
elif command -v docker >/dev/null 2>&1; then
    # build-images.sh tags it `local`; the compose test tags its build `e2e`.
    for image in leasehold-prometheus:local leasehold-prometheus:e2e; do
        if docker image inspect "$image" >/dev/null 2>&1; then
            promtool_cmd=(docker run --rm --network none -v "$rules:/rules:ro" -w /rules
                --entrypoint promtool "$image")
            break
        fi
    done
fi
if [ ${#promtool_cmd[@]} -eq 0 ]; then
    skip "no promtool and no leasehold-prometheus image (deploy/docker/build-images.sh)"
else
    "${promtool_cmd[@]}" check rules leasehold-alerts.yml && ok "promtool check rules" \
        || fail "promtool check rules"
    "${promtool_cmd[@]}" test rules leasehold-alerts.test.yml && ok "promtool test rules" \
        || fail "promtool test rules"
fi
cd "$here"

echo "== systemd units"
if command -v systemd-analyze >/dev/null 2>&1 && [ -d /lib/systemd/system ]; then
    # A root holding the system's units and stand-ins for the binaries, so verify checks
    # the units as written (ExecStart under /usr/local/bin) without installing anything.
    root="$(mktemp -d /tmp/leasehold-systemd.XXXXXX)"
    mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/lib/systemd"
    cp -r /lib/systemd/system "$root/lib/systemd/"
    for b in leasehold-allocator leasehold-agent; do
        printf '#!/bin/sh\n' >"$root/usr/local/bin/$b"
        chmod +x "$root/usr/local/bin/$b"
    done
    cp "$here"/systemd/*.service "$root/etc/systemd/system/"
    # verify exits 0 on unknown settings and only warns: any output is a failure.
    out="$(systemd-analyze verify --root="$root" leasehold-allocator@global-1.service \
        leasehold-agent.service 2>&1)"
    status=$?
    rm -rf "$root"
    if [ $status -eq 0 ] && [ -z "$out" ]; then ok "systemd-analyze verify"; else
        echo "$out"; fail "systemd-analyze verify"; fi
else
    skip "systemd-analyze not found"
fi

echo "== Kubernetes manifests"
venv="${KUBERNETES_VALIDATE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/k8s-validate-venv}"
if [ ! -x "$venv/bin/kubernetes-validate" ] && command -v python3 >/dev/null 2>&1; then
    echo "  installing kubernetes-validate into $venv"
    python3 -m venv "$venv" >/dev/null 2>&1 &&
        "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate ||
        rm -rf "$venv"
fi
if ! command -v kubectl >/dev/null 2>&1; then
    skip "kubectl not found (renders the kustomizations)"
elif [ ! -x "$venv/bin/kubernetes-validate" ]; then
    skip "kubernetes-validate could not be installed (python3 -m venv and pip needed)"
else
    rendered="$(mktemp /tmp/leasehold-k8s.XXXXXX.yaml)"
    if kubectl kustomize "$here/kubernetes" >"$rendered"; then
        ok "kubectl kustomize ($(grep -c '^kind:' "$rendered") objects)"
        # cert-manager's kinds have no schema there; check-references.py covers their links.
        out="$("$venv/bin/kubernetes-validate" --strict --quiet "$rendered" 2>&1 |
            grep -v "Couldn't find schema for kind \(Certificate\|Issuer\) with api version cert-manager.io/v1")"
        if [ -z "$out" ]; then ok "kubernetes-validate --strict"; else
            echo "$out"; fail "kubernetes-validate --strict"; fi
        "$venv/bin/python" "$here/kubernetes/check-references.py" <"$rendered" &&
            ok "check-references.py" || fail "check-references.py"
    else
        fail "kubectl kustomize"
    fi
    rm -f "$rendered"
fi

echo "== Kubernetes allocator start-up in the image"
# The StatefulSet's command and the root overlay's config template, run as the pod would
# (non-root, read-only root filesystem, TLS files named as cert-manager writes them) with
# the hostname of pod 1: the config is rendered with node id 2 and the node serves /healthz.
image=""
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    for candidate in leasehold:local leasehold:e2e; do
        if docker image inspect "$candidate" >/dev/null 2>&1; then image="$candidate"; break; fi
    done
fi
if [ -z "$image" ]; then
    skip "no docker or no leasehold image (deploy/docker/build-images.sh)"
elif [ ! -x "$venv/bin/python" ]; then
    skip "no python with PyPI's yaml (the kubernetes-validate virtualenv)"
else
    pod="$(mktemp -d /tmp/leasehold-pod.XXXXXX)"
    mkdir -p "$pod/tls" "$pod/template"
    chmod 0777 "$pod"
    peers=global-allocator-peers.leasehold.svc.cluster.local
    docker run --rm --network none -v "$pod:/out" "$image" leasectl certs init --out /out/pki \
        --allocators global --agents gw --admins ops \
        --hosts "global-allocator-1.$peers,global-allocator.leasehold.svc.cluster.local" >/dev/null
    cp "$pod/pki/ca.pem" "$pod/tls/ca.crt"
    cp "$pod/pki/allocator-global.pem" "$pod/tls/tls.crt"
    cp "$pod/pki/allocator-global-key.pem" "$pod/tls/tls.key"
    chmod 0644 "$pod"/tls/*
    cp "$here/kubernetes/overlays/root/allocator.yaml" "$pod/template/"
    script="$("$venv/bin/python" -c 'import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
print(d["spec"]["template"]["spec"]["containers"][0]["command"][2])' \
        "$here/kubernetes/base/allocator/statefulset.yaml")"
    name="leasehold-pod-check-$$"
    docker run -d --name "$name" --network none --hostname global-allocator-1 --read-only \
        --tmpfs /run/leasehold --user 10001:10001 -v "$pod/tls:/etc/leasehold/tls:ro" \
        -v "$pod/template:/etc/leasehold/template:ro" "$image" bash -c "$script" >/dev/null
    healthy=""
    for _ in $(seq 20); do
        if docker exec "$name" leasehold-healthcheck 2>/dev/null; then healthy=1; break; fi
        sleep 0.5
    done
    rendered="$(docker exec "$name" cat /run/leasehold/allocator.yaml 2>/dev/null)"
    if [ -n "$healthy" ] && grep -q '^node_id: 2$' <<<"$rendered" &&
        grep -q "global-allocator-1.$peers:7400" <<<"$rendered"; then
        ok "pod global-allocator-1 renders node id 2 and serves /healthz ($image)"
    else
        docker logs "$name" 2>&1 | tail -n 5
        fail "allocator pod start-up"
    fi
    docker rm -f -v "$name" >/dev/null 2>&1
    docker run --rm --network none -v "$pod:/out" "$image" rm -rf /out/pki >/dev/null 2>&1
    rm -rf "$pod"
fi

echo "== compose file"
if command -v docker-compose >/dev/null 2>&1; then
    docker-compose -f "$here/compose/docker-compose.yaml" config -q && ok "docker-compose config" \
        || fail "docker-compose config"
elif docker compose version >/dev/null 2>&1; then
    docker compose -f "$here/compose/docker-compose.yaml" config -q && ok "docker compose config" \
        || fail "docker compose config"
else
    skip "no docker compose"
fi

echo "== Envoy configs"
envoy="${LEASEHOLD_ENVOY:-$(command -v envoy || true)}"
if [ -n "$envoy" ] && [ -x "$envoy" ]; then
    for f in compose/envoy/gateway.yaml compose/envoy/upstream.yaml kubernetes/gateway/envoy.yaml; do
        "$envoy" --mode validate --disable-hot-restart -c "$here/$f" >/dev/null 2>&1 &&
            ok "envoy --mode validate $f" || fail "envoy --mode validate $f"
    done
else
    skip "no envoy binary (LEASEHOLD_ENVOY)"
fi

echo "== Grafana dashboard"
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["panels"]' \
        "$here/monitoring/grafana/leasehold.json" && ok "leasehold.json parses" \
        || fail "leasehold.json"
else
    skip "python3 not found"
fi

exit $failed
