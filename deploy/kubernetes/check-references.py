#!/usr/bin/env python3
"""Checks what schema validation cannot: that the rendered manifests refer to each other.

Reads `kubectl kustomize deploy/kubernetes` output on stdin (needs PyYAML) and fails, listing
every problem, when a volume names a ConfigMap or Secret nothing makes, a Service or
PodDisruptionBudget selects no pod template, a StatefulSet's serviceName is not a headless
Service, a probe names a port its container does not declare, a Certificate's issuer is
missing, or an allocator or agent config names a peer, upstream or allocator address that no
Service resolves or no certificate covers.
"""
import fnmatch
import sys

import yaml

docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
problems = []


def of_kind(kind):
    return [d for d in docs if d["kind"] == kind]


def name(d):
    return d["metadata"]["name"]


config_maps = {name(d): d for d in of_kind("ConfigMap")}
certificates = of_kind("Certificate")
secrets = {c["spec"]["secretName"] for c in certificates}
issuers = {name(d) for d in of_kind("Issuer")}
services = {name(d): d for d in of_kind("Service")}
workloads = of_kind("StatefulSet") + of_kind("Deployment")
namespace = {d["metadata"].get("namespace") for d in workloads} - {None}
assert len(namespace) == 1, f"one namespace expected, found {namespace}"
namespace = namespace.pop()
cert_dns = [n for c in certificates for n in c["spec"].get("dnsNames", [])]


def covered(host):
    return any(fnmatch.fnmatch(host, pattern) and host.count(".") == pattern.count(".")
               for pattern in cert_dns)


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def service_host(addr, what):
    host = addr.rsplit(":", 1)[0]
    short = f".{namespace}.svc.cluster.local"
    if not host.endswith(short):
        problems.append(f"{what}: {host} is not a Service of namespace {namespace}")
        return None
    return host[: -len(short)]


pods = []
for w in workloads:
    spec = w["spec"]["template"]["spec"]
    labels = w["spec"]["template"]["metadata"]["labels"]
    pods.append(labels)
    if not selects(w["spec"]["selector"]["matchLabels"], labels):
        problems.append(f"{name(w)}: selector does not match its own pod labels")
    for v in spec.get("volumes", []):
        if "configMap" in v and v["configMap"]["name"] not in config_maps:
            problems.append(f"{name(w)}: volume {v['name']} names missing ConfigMap {v['configMap']['name']}")
        if "secret" in v and v["secret"]["secretName"] not in secrets:
            problems.append(f"{name(w)}: volume {v['name']} names Secret {v['secret']['secretName']} no Certificate makes")
        if "csi" in v:
            issuer = v["csi"]["volumeAttributes"].get("csi.cert-manager.io/issuer-name")
            if issuer not in issuers:
                problems.append(f"{name(w)}: CSI volume {v['name']} names missing Issuer {issuer}")
    volume_names = {v["name"] for v in spec.get("volumes", [])}
    volume_names |= {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
    for c in spec["containers"]:
        ports = {p.get("name") for p in c.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe"):
            port = c.get(probe, {}).get("httpGet", {}).get("port")
            if isinstance(port, str) and port not in ports:
                problems.append(f"{name(w)}/{c['name']}: {probe} names undeclared port {port}")
        for m in c.get("volumeMounts", []):
            if m["name"] not in volume_names:
                problems.append(f"{name(w)}/{c['name']}: mounts undefined volume {m['name']}")
    if w["kind"] == "StatefulSet":
        peers = services.get(spec_sn := w["spec"]["serviceName"])
        if peers is None or peers["spec"].get("clusterIP") != "None":
            problems.append(f"{name(w)}: serviceName {spec_sn} is not a headless Service")
        # The allocator config in this StatefulSet's ConfigMap: its peers and its upstream.
        for v in spec["volumes"]:
            if "configMap" not in v or v["configMap"]["name"] not in config_maps:
                continue
            cfg = yaml.safe_load(config_maps[v["configMap"]["name"]]["data"]["allocator.yaml"])
            replicas = w["spec"]["replicas"]
            want = [f"{name(w)}-{i}.{spec_sn}.{namespace}.svc.cluster.local:7400" for i in range(replicas)]
            got = [b["addr"] for b in cfg["bootstrap"]]
            if got != want:
                problems.append(f"{name(w)}: bootstrap {got} is not its pods {want}")
            if [b["id"] for b in cfg["bootstrap"]] != list(range(1, replicas + 1)):
                problems.append(f"{name(w)}: bootstrap ids are not 1..{replicas} (ordinal + 1)")
            for addr in want:
                if not covered(addr.rsplit(":", 1)[0]):
                    problems.append(f"{name(w)}: no certificate covers peer {addr}")
            for addr in cfg.get("upstream", []):
                svc = service_host(addr, f"{name(w)} upstream")
                if svc and svc not in services:
                    problems.append(f"{name(w)}: upstream {addr} is no Service")
                if not covered(addr.rsplit(":", 1)[0]):
                    problems.append(f"{name(w)}: no certificate covers upstream {addr}")

for cm in config_maps.values():
    if "agent.yaml" in cm["data"]:
        for addr in yaml.safe_load(cm["data"]["agent.yaml"])["allocators"]:
            svc = service_host(addr, f"{name(cm)} allocators")
            if svc and svc not in services:
                problems.append(f"{name(cm)}: allocator {addr} is no Service")
            if not covered(addr.rsplit(":", 1)[0]):
                problems.append(f"{name(cm)}: no certificate covers allocator {addr}")

for s in services.values():
    if not any(selects(s["spec"]["selector"], labels) for labels in pods):
        problems.append(f"Service {name(s)} selects no pod template")
for p in of_kind("PodDisruptionBudget"):
    if not any(selects(p["spec"]["selector"]["matchLabels"], labels) for labels in pods):
        problems.append(f"PodDisruptionBudget {name(p)} selects no pod template")
for c in certificates:
    if c["spec"]["issuerRef"]["name"] not in issuers:
        problems.append(f"Certificate {name(c)} names missing Issuer {c['spec']['issuerRef']['name']}")
for i in of_kind("Issuer"):
    ca = i["spec"].get("ca", {}).get("secretName")
    if ca and ca not in secrets:
        problems.append(f"Issuer {name(i)} uses Secret {ca} no Certificate makes")

for p in problems:
    print(p, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"references consistent across {len(docs)} objects")
