"""The Kubernetes manifests in deploy/k8s/: every resource validates (strictly: an unknown field
fails) against Kubernetes 1.33's schemas with kubernetes-validate from PyPI, and they agree with
each other and with the server: the drain fits in the grace period, probes and ports name what
the container serves, the Services and the ServiceMonitor select the pods, the HPA's metric is a
family Tritium serves, and the nginx config hashes onto the StatefulSet's replicas."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO_ROOT

K8S = REPO_ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.33.0"


def docs():
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d:
                out[(d["kind"], d["metadata"]["name"])] = d
    return out


def test_every_manifest_validates_strictly():
    exe = Path(sys.executable).with_name("kubernetes-validate")
    files = sorted(str(p) for p in K8S.glob("*.yaml"))
    r = subprocess.run([str(exe), "--strict", "-k", KUBERNETES_VERSION, *files], capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    passed = re.findall(r"passed for resource (\S+)", out)
    # Every resource but the ServiceMonitor (a CRD, not in Kubernetes' schemas: checked below).
    assert len(passed) == len(docs()) - 1, out
    assert "ServiceMonitor" in out  # reported as without a schema


def test_the_validator_refuses_a_misspelt_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((K8S / "statefulset.yaml").read_text().replace("terminationGracePeriodSeconds", "terminationGracePeriod"))
    exe = Path(sys.executable).with_name("kubernetes-validate")
    r = subprocess.run([str(exe), "--strict", "-k", KUBERNETES_VERSION, str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "terminationGracePeriod" in r.stdout + r.stderr


def test_the_drain_fits_in_the_grace_period_and_probes_use_the_health_api():
    sts = docs()[("StatefulSet", "tritium")]
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = dict(a.lstrip("-").split("=", 1) for a in c["args"])
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + int(args["exit-timeout-secs"]) + 5
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": int(args["http-port"]), "grpc": int(args["grpc-port"]), "metrics": int(args["metrics-port"])}
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["models"] == args["model-repository"]
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])


def test_services_servicemonitor_and_hpa_point_at_the_replicas():
    d = docs()
    sts = d[("StatefulSet", "tritium")]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    headless = d[("Service", sts["spec"]["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    for svc in (headless, d[("Service", "tritium")]):
        assert svc["spec"]["selector"].items() <= labels.items()
    sm = d[("ServiceMonitor", "tritium")]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= d[("Service", "tritium")]["metadata"]["labels"].items()
    svc_ports = {p["name"] for p in d[("Service", "tritium")]["spec"]["ports"]}
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= svc_ports
    hpa = d[("HorizontalPodAutoscaler", "tritium")]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "tritium"}
    (metric,) = hpa["spec"]["metrics"]
    name = metric["pods"]["metric"]["name"]
    assert f'"{name}"' in (REPO_ROOT / "src" / "metrics" / "mod.rs").read_text(), f"{name} is not a Tritium family"
    assert name in d[("ConfigMap", "tritium-prometheus-adapter")]["data"]["config.yaml"]


def test_the_nginx_config_hashes_onto_the_statefulset_replicas():
    d = docs()
    sts = d[("StatefulSet", "tritium")]
    conf = (REPO_ROOT / "deploy" / "nginx" / "nginx.conf").read_text()
    names = set(re.findall(r"server (tritium-\d+)\.(\S+):\d+", conf))
    assert {n for n, _ in names} == {f"tritium-{i}" for i in range(sts["spec"]["replicas"])}
    assert {svc for _, svc in names} == {sts["spec"]["serviceName"]}
    assert conf.count("hash $tritium_affinity_key consistent;") == 2
    assert "grpc_pass grpc://tritium_grpc;" in conf
