"""A real Prometheus (Debian's `prometheus`, installed by scripts/install_prometheus.sh) scraping
a real Tritium every second: the PromQL users write against Triton works on Tritium's series, and
every query of dashboards/tritium.json parses and evaluates. The tests that need the binary are
skipped when it is absent.
"""
import json
import math
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from helpers import REPO_ROOT, free_ports

PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary: run scripts/install_prometheus.sh")

DASHBOARD = REPO_ROOT / "dashboards" / "tritium.json"
JOB = "tritium"
SENT = 25

# What Grafana would put in place of its variables, for a query Prometheus can run.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "5s",
    "$__range": "5m",
    "$model": "add_sub|identity_fp32|add_sub_pipeline|accumulate",
    "$job": JOB,
}


class Prometheus:
    def __init__(self, tmp: Path, target: str):
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        self.log_path = tmp / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log()}"
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"prometheus was not ready:\n{self.log()}")

    def log(self):
        return self.log_path.read_bytes()[-4000:].decode(errors="replace")

    def query(self, expr):
        """The API's answer to an instant query: (status, resultType, result, error)."""
        r = requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = r.json()
        data = body.get("data", {})
        return body["status"], data.get("resultType"), data.get("result"), body.get("error")

    def vector(self, expr):
        status, kind, result, error = self.query(expr)
        assert status == "success", (expr, error)
        assert kind == "vector", (expr, kind)
        return [(s["metric"], float(s["value"][1])) for s in result]

    def wait_for(self, expr, predicate, timeout=30, what=None):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.vector(expr)
            if predicate(last):
                return last
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what or expr}: last {last}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture
def stack(start_server, repo_copy, tmp_path):
    srv = start_server(repo_copy(["add_sub", "identity_fp32", "add_sub_pipeline", "accumulate"]))
    prom = Prometheus(tmp_path, f"127.0.0.1:{srv.metrics_port}")
    try:
        # Scraped at least once before any traffic, so the increase is visible to rate().
        prom.wait_for(f'up{{job="{JOB}"}}', lambda v: v and v[0][1] == 1, what="the target to be up")
        prom.wait_for('nv_inference_request_success{model="add_sub"}', lambda v: v and v[0][1] == 0,
                      what="add_sub's counter at 0")
        yield srv, prom
    finally:
        prom.stop()


def send_add_sub(srv, n, batch=1):
    a = np.ones((batch, 16), dtype=np.float32)
    for _ in range(n):
        ins = [httpclient.InferInput("INPUT0", [batch, 16], "FP32"), httpclient.InferInput("INPUT1", [batch, 16], "FP32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a)
        srv.client.infer("add_sub", ins)


@needs_prometheus
def test_prometheus_sees_the_requests_sent(stack):
    srv, prom = stack
    send_add_sub(srv, SENT)
    got = prom.wait_for('nv_inference_request_success{model="add_sub"}', lambda v: v and v[0][1] == SENT,
                        what=f"{SENT} successes scraped")
    assert len(got) == 1
    labels = got[0][0]
    assert labels["job"] == JOB and labels["version"] == "1", labels
    rates = prom.vector("sum(rate(nv_inference_request_success[1m])) by (model)")
    by_model = {m["model"]: v for m, v in rates}
    assert by_model["add_sub"] > 0, rates
    assert by_model["identity_fp32"] == 0, rates
    queue = prom.vector('rate(nv_inference_queue_duration_us{model="add_sub"}[1m]) / '
                        'rate(nv_inference_request_success{model="add_sub"}[1m])')
    assert len(queue) == 1 and math.isfinite(queue[0][1]) and queue[0][1] >= 0, queue
    latency = prom.vector('rate(nv_inference_request_duration_us{model="add_sub"}[1m]) / '
                          'rate(nv_inference_request_success{model="add_sub"}[1m])')
    assert len(latency) == 1 and math.isfinite(latency[0][1]) and latency[0][1] >= queue[0][1], (latency, queue)
    # Validation rejections are no failures; the four reasons are there at 0.
    failures = prom.vector('nv_inference_request_failure{model="add_sub"}')
    assert {m["reason"] for m, _ in failures} == {"REJECTED", "CANCELED", "BACKEND", "OTHER"}
    # Tritium's per-instance `instance` label meets Prometheus' target label: it is kept as
    # `exported_instance` (what the dashboard queries), and `instance` is the scrape target.
    busy = prom.vector('tritium_instance_busy_us{model="add_sub"}')
    assert len(busy) == 1, busy
    assert busy[0][0]["exported_instance"] == "add_sub_0_0", busy  # Triton names instances <group>_<i>
    assert busy[0][0]["instance"] == f"127.0.0.1:{srv.metrics_port}", busy


def dashboard_targets(dashboard):
    """(panel title, expr) of every query target, rows' nested panels included."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p["title"], t["expr"]))
            walk(p.get("panels", []))
    walk(dashboard["panels"])
    return out


def concrete(expr):
    for var in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(var, GRAFANA_VARIABLES[var]).replace("${" + var[1:] + "}", GRAFANA_VARIABLES[var])
    assert "$" not in expr, f"a Grafana variable without a test value in {expr}"
    return expr


def test_the_dashboard_is_a_grafana_model_with_a_prometheus_datasource_variable():
    d = json.loads(DASHBOARD.read_text())
    assert d["title"] and d["uid"] and isinstance(d["schemaVersion"], int)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"model", "job"} <= set(variables)
    panels = [p for p in d["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p.get("description"), f"panel {p['title']} has no description"
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, p["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for wanted in ("request rate", "failure rate", "latency", "queue vs compute", "batch efficiency",
                   "gpu utilization", "instance"):
        assert wanted in titles, wanted
    families = " ".join(e for _, e in dashboard_targets(d))
    for family in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                   "nv_inference_exec_count", "nv_inference_queue_duration_us", "nv_gpu_utilization",
                   "tritium_instance_busy_us", "tritium_scheduler_queue_length", "tritium_batcher_items_total"):
        assert family in families, family


# Panels that must show data after the traffic below (the others need a GPU, or a
# --metrics-config option, or failures).
MUST_HAVE_DATA = {"Request rate", "Failure rate by reason", "Inference rate", "Pending requests",
                  "Average request latency", "Queue vs compute time per request", "Batch efficiency",
                  "Executions per second", "CPU utilization", "CPU memory used", "Instance busy",
                  "Instance executions per second", "Instance restarts", "Scheduler queue and mailbox",
                  "Batcher: items per batch", "Batcher: wait before dispatch (p50, p99)",
                  "Batcher: batch size (p50, p99)", "Sequences: active and backlog",
                  "Sequences: state bytes and idle releases", "Ensemble step latency (p99)",
                  "Time to first response (p50, p99)", "Requests in flight"}
PIPELINE_REQUESTS = 2


@needs_prometheus
def test_every_dashboard_query_parses_and_evaluates(stack):
    srv, prom = stack
    d = json.loads(DASHBOARD.read_text())
    send_add_sub(srv, 10, batch=4)
    r = srv.post("/v2/models/identity_fp32/infer",
                 {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 3], "data": [1.0] * 6}]})
    assert r.status_code == 200, r.text
    # Through the ensemble (each runs add_sub once more, alone) and one open sequence.
    for _ in range(PIPELINE_REQUESTS):
        r = srv.post("/v2/models/add_sub_pipeline/infer", {"inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16} for n in ("IN0", "IN1")]})
        assert r.status_code == 200, r.text
    r = srv.post("/v2/models/accumulate/infer", {
        "parameters": {"sequence_id": 7, "sequence_start": True},
        "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [5]}]})
    assert r.status_code == 200, r.text
    add_sub = 40 + PIPELINE_REQUESTS
    prom.wait_for('nv_inference_count{model="add_sub"}', lambda v: v and v[0][1] == add_sub, what="the traffic scraped")
    prom.wait_for('nv_inference_count{model="add_sub_pipeline"}', lambda v: v and v[0][1] == PIPELINE_REQUESTS,
                  what="the ensemble traffic scraped")
    prom.wait_for('nv_inference_count{model="identity_fp32"}', lambda v: v and v[0][1] == 2 + PIPELINE_REQUESTS,
                  what="the traffic scraped")
    # The variables' own queries (Grafana's label_values) through the labels API.
    for label, match in (("job", "nv_inference_request_success"),
                         ("model", f'nv_inference_request_success{{job=~"{JOB}"}}')):
        body = requests.get(f"{prom.url}/api/v1/label/{label}/values", params={"match[]": match}, timeout=10).json()
        assert body["status"] == "success", body
        assert (JOB if label == "job" else "add_sub") in body["data"], body
    targets = dashboard_targets(d)
    assert len(targets) >= 20
    with_data = set()
    for title, expr in targets:
        q = concrete(expr)
        status, kind, result, error = prom.query(q)
        assert status == "success", f"{title}: {q}: {error}"
        assert kind == "vector", (title, q, kind)
        # Parses on its own too (the format endpoint exists from Prometheus 2.38).
        fmt = requests.get(f"{prom.url}/api/v1/format_query", params={"query": q}, timeout=10).json()
        assert fmt["status"] == "success", (title, q, fmt)
        if any(math.isfinite(float(s["value"][1])) for s in result):
            with_data.add(title)
        for s in result:
            model = s["metric"].get("model")
            assert model is None or re.fullmatch(GRAFANA_VARIABLES["$model"], model), (title, s)
    assert MUST_HAVE_DATA <= with_data, MUST_HAVE_DATA - with_data
    batch = prom.vector(concrete(next(e for t, e in targets if t == "Batch efficiency")))
    assert {m["model"]: v for m, v in batch}["add_sub"] == pytest.approx(add_sub / (10 + PIPELINE_REQUESTS)), batch
    steps = prom.vector(concrete(next(e for t, e in targets if t == "Ensemble step latency (p99)")))
    assert {(m["step"], m["step_model"]) for m, _ in steps} == {("1", "add_sub"), ("2", "identity_fp32")}, steps
    active = prom.vector(concrete(next(e for t, e in targets if t == "Sequences: active and backlog")))
    assert ({"model": "accumulate"}, 1.0) in active, active
