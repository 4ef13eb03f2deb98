"""The Prometheus endpoint against what Triton 2.51 exposes (docs/triton-reference.md, "Metrics"):
after mixed traffic on a fresh server (HTTP and gRPC, batched requests, the dynamic batcher,
queue-full rejections, cancellations, validation rejections and a backend error), every `nv_*`
family Tritium claims is there with Triton's TYPE, HELP and labels, and its values are the
statistics extension's (counts exactly, `*_duration_us` = ns / 1000). The `tritium_*` per-actor
families carry model, version and, per instance, instance labels.

The exposition is parsed here as the Prometheus text format (0.0.4) is specified, not grepped:
`parse_exposition` rejects malformed lines, samples before their TYPE, duplicate series and
suffixes that the family's type does not allow.
"""
import math
import re
import threading
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import Server, copy_bundled_repo, identity_config, wait_until

# --------------------------------------------------------------------------------------------
# A parser of the Prometheus text exposition format.

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(\{{.*\}})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?[ \t]*$")
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
    "summary": ("", "_sum", "_count"),
    "histogram": ("_bucket", "_sum", "_count"),
}


@dataclass
class Family:
    name: str
    type: str = None
    help: str = None
    # (sample name, labels, value)
    samples: list = field(default_factory=list)

    def series(self, suffix=""):
        return [(labels, value) for name, labels, value in self.samples if name == self.name + suffix]

    def value(self, suffix="", **labels):
        found = [v for name, l, v in self.samples if name == self.name + suffix and l == labels]
        assert len(found) == 1, f"{self.name}{suffix}{labels}: {len(found)} series"
        return found[0]


def _unescape(s, quotes):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "n":
                out.append("\n")
            elif n == "\\":
                out.append("\\")
            elif n == '"' and quotes:
                out.append('"')
            else:
                out.append("\\" + n)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _parse_labels(text):
    """`{a="x",b="y"}` → dict; raises on anything else."""
    assert text[0] == "{" and text[-1] == "}", text
    body, labels, i = text[1:-1], {}, 0
    while i < len(body):
        m = re.compile(rf"[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*\"").match(body, i)
        assert m, f"bad label at {body[i:]!r}"
        name, i = m.group(1), m.end()
        j = i
        while j < len(body) and body[j] != '"':
            j += 2 if body[j] == "\\" else 1
        assert j < len(body), f"unterminated label value in {text!r}"
        assert name not in labels, f"label {name} twice in {text!r}"
        labels[name] = _unescape(body[i:j], quotes=True)
        i = j + 1
        m = re.compile(r"[ \t]*(,|$)").match(body, i)
        assert m, f"expected ',' after label {name} in {text!r}"
        i = m.end()
    return labels


def _parse_value(s):
    v = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(s)
    return float(s) if v is None else v


def parse_exposition(text):
    """{family name: Family} of a Prometheus text-format scrape; asserts it is well formed."""
    families, by_sample, seen = {}, {}, set()
    for n, line in enumerate(text.split("\n"), 1):
        where = f"line {n}: {line!r}"
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                assert re.fullmatch(_NAME, name), where
                fam = families.setdefault(name, Family(name))
                if parts[1] == "HELP":
                    assert fam.help is None, f"second HELP, {where}"
                    fam.help = _unescape(parts[3] if len(parts) > 3 else "", quotes=False)
                else:
                    assert fam.type is None, f"second TYPE, {where}"
                    assert not fam.samples, f"TYPE after samples, {where}"
                    assert len(parts) == 4 and parts[3] in _SUFFIXES, where
                    fam.type = parts[3]
                    for suffix in _SUFFIXES[fam.type]:
                        by_sample[name + suffix] = fam
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample, {where}"
        sample, labels, value = m.group(1), _parse_labels(m.group(2)) if m.group(2) else {}, _parse_value(m.group(3))
        fam = by_sample.get(sample)
        assert fam is not None, f"sample of no declared family, {where}"
        key = (sample, tuple(sorted(labels.items())))
        assert key not in seen, f"duplicate series, {where}"
        seen.add(key)
        if fam.type == "histogram" and sample.endswith("_bucket"):
            assert "le" in labels, where
        if fam.type == "summary" and sample == fam.name:
            assert "quantile" in labels, where
        fam.samples.append((sample, labels, value))
    return families


def test_parser_reads_the_format_and_refuses_what_is_not():
    text = ('# HELP a_total Some "help" with \\\\ and \\n.\n# TYPE a_total counter\n'
            'a_total{model="x\\"y",version="1"} 3\na_total 4 1700000000000\n\n'
            '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3.5\nh_count 2\n'
            '# TYPE s summary\ns{quantile="0.5"} NaN\ns_sum 0\ns_count 0\n')
    f = parse_exposition(text)
    assert f["a_total"].help == 'Some "help" with \\ and \n.'
    assert f["a_total"].value(model='x"y', version="1") == 3
    assert f["a_total"].value() == 4
    assert f["h"].value("_bucket", le="+Inf") == 2
    assert math.isnan(f["s"].value(quantile="0.5"))
    for bad in ("x 1\n",                                           # no TYPE
                "# TYPE x counter\nx 1\nx 2\n",                     # duplicate series
                "# TYPE x counter\nx_sum 1\n",                      # suffix a counter has not
                "# TYPE x counter\nx{a=b} 1\n",                     # unquoted label value
                "# TYPE x counter\nx{a=\"b\"}\n",                   # no value
                "# TYPE x counter\nx 1\n# TYPE x counter\n"):       # second TYPE
        with pytest.raises(AssertionError):
            parse_exposition(bad)


# --------------------------------------------------------------------------------------------
# The server and its traffic.


# Triton 2.51's families (docs/triton-reference.md): TYPE, HELP, labels of each series.
PER_MODEL = {"model", "version"}
TRITON_FAMILIES = {
    "nv_inference_request_success": ("counter", "Number of successful inference requests, all batch sizes", PER_MODEL),
    "nv_inference_request_failure": ("counter", "Number of failed inference requests, all batch sizes", PER_MODEL | {"reason"}),
    "nv_inference_count": ("counter", "Number of inferences performed (does not include cached requests)", PER_MODEL),
    "nv_inference_exec_count": ("counter", "Number of model executions performed (does not include cached requests)", PER_MODEL),
    "nv_inference_request_duration_us": ("counter", "Cumulative inference request duration in microseconds (includes cached requests)", PER_MODEL),
    "nv_inference_queue_duration_us": ("counter", "Cumulative inference queuing duration in microseconds (includes cached requests)", PER_MODEL),
    "nv_inference_compute_input_duration_us": ("counter", "Cumulative compute input duration in microseconds (does not include cached requests)", PER_MODEL),
    "nv_inference_compute_infer_duration_us": ("counter", "Cumulative compute inference duration in microseconds (does not include cached requests)", PER_MODEL),
    "nv_inference_compute_output_duration_us": ("counter", "Cumulative inference compute output duration in microseconds (does not include cached requests)", PER_MODEL),
    "nv_inference_pending_request_count": ("gauge", "Instantaneous number of pending requests awaiting execution per-model.", PER_MODEL),
    "nv_pinned_memory_pool_total_bytes": ("gauge", "Pinned memory pool total memory size, in bytes", set()),
    "nv_pinned_memory_pool_used_bytes": ("gauge", "Pinned memory pool used memory size, in bytes", set()),
    "nv_cpu_utilization": ("gauge", "CPU utilization rate [0.0 - 1.0]", set()),
    "nv_cpu_memory_total_bytes": ("gauge", "CPU total memory (RAM), in bytes", set()),
    "nv_cpu_memory_used_bytes": ("gauge", "CPU used memory (RAM), in bytes", set()),
}
REASONS = {"REJECTED", "CANCELED", "BACKEND", "OTHER"}
PER_INSTANCE = {"tritium_instance_alive": "gauge", "tritium_instance_busy_us": "counter",
                "tritium_instance_executions_total": "counter", "tritium_instance_restarts_total": "counter",
                "tritium_instance_mailbox_depth": "gauge"}
PER_SCHEDULER = {"tritium_scheduler_queue_length": "gauge", "tritium_scheduler_mailbox_depth": "gauge",
                 "tritium_batcher_batches_total": "counter", "tritium_batcher_items_total": "counter"}

SLOW_BATCH_MS = 2000
# What the traffic below sends to add_sub: (batch size, count) over HTTP and over gRPC.
ADD_SUB_HTTP = [(1, 5), (4, 2)]
ADD_SUB_GRPC = [(1, 3), (8, 1)]


def scrape(srv):
    r = requests.get(srv.metrics_url, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers
    return parse_exposition(r.text)


def all_stats(srv):
    r = srv.get("/v2/models/stats")
    assert r.status_code == 200, r.text
    return {(s["name"], s["version"]): s for s in r.json()["model_stats"]}


def identity_body(n=1, width=3):
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [n, width], "data": [1.0] * (n * width)}]}


def http_add_sub(client, batch):
    a = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
    ins = [httpclient.InferInput("INPUT0", [batch, 16], "FP32"), httpclient.InferInput("INPUT1", [batch, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    res = client.infer("add_sub", ins)
    np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + a, rtol=1e-6)


def grpc_add_sub(client, batch):
    a = np.ones((batch, 16), dtype=np.float32)
    ins = [grpcclient.InferInput("INPUT0", [batch, 16], "FP32"), grpcclient.InferInput("INPUT1", [batch, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    res = client.infer("add_sub", ins)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), np.zeros((batch, 16), np.float32))



def in_threads(fns):
    threads = [threading.Thread(target=f) for f in fns]
    for t in threads:
        t.start()
    return threads


@dataclass
class Traffic:
    srv: Server
    metrics: dict
    stats: dict
    during_batch: dict
    configs: dict
    rejected: int
    validation_rejections: int
    # The least the merged slow_batch batch's oldest request can have waited, in seconds: the
    # first execution (SLOW_BATCH_MS) began after the first request was sent, and the four had
    # all queued when the test saw them queued; on a busy machine that takes a while.
    merged_wait_floor_s: float


def build_repo(base):
    repo = copy_bundled_repo(base / "models", ["add_sub", "identity_fp32"])

    def write(name, text):
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "config.pbtxt").write_text(text)

    # One instance, 2 s per execution, dynamic batcher: requests that queue behind a running
    # one are merged into one execution.
    write("slow_batch", identity_config("slow_batch", max_batch_size=8, delay_ms=SLOW_BATCH_MS,
                                        extra="dynamic_batching { max_queue_delay_microseconds: 1000 }\n"))
    # A queue of one: more requests than that are rejected (REJECTED).
    write("slow_queue", identity_config("slow_queue", max_batch_size=8, delay_ms=600,
                                        extra="dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n"))
    # add_sub's ONNX file with a config that claims any width: a [1,3] request passes validation
    # and fails in the backend (Triton: reason BACKEND).
    (repo / "loose" / "1").mkdir(parents=True)
    (repo / "loose" / "1" / "model.onnx").write_bytes((repo / "add_sub" / "1" / "model.onnx").read_bytes())
    cfg = (repo / "add_sub" / "config.pbtxt").read_text().replace('name: "add_sub"', 'name: "loose"').replace("dims: [ 16 ]", "dims: [ -1 ]")
    (repo / "loose" / "config.pbtxt").write_text(cfg)
    return repo


def run_traffic(srv):
    http = httpclient.InferenceServerClient(srv.http_url, concurrency=8)
    grpcc = grpcclient.InferenceServerClient(srv.grpc_url)
    channel = grpc.insecure_channel(srv.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        # Successful requests, batch sizes 1, 4 and 8, over both protocols.
        for batch, n in ADD_SUB_HTTP:
            for _ in range(n):
                http_add_sub(http, batch)
        for batch, n in ADD_SUB_GRPC:
            for _ in range(n):
                grpc_add_sub(grpcc, batch)
        for n in (1, 2, 3):
            r = srv.post("/v2/models/identity_fp32/infer", identity_body(n, 5))
            assert r.status_code == 200, r.text

        # Validation rejections, which Triton counts nowhere.
        bad = [
            srv.post("/v2/models/add_sub/infer", {"inputs": [  # missing INPUT1
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}),
            srv.post("/v2/models/add_sub/infer", {"inputs": [  # wrong shape
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 15], "data": [0.0] * 15},
                {"name": "INPUT1", "datatype": "FP32", "shape": [1, 15], "data": [0.0] * 15}]}),
            srv.post("/v2/models/add_sub/infer", {"inputs": [  # batch 9 > max_batch_size 8
                {"name": "INPUT0", "datatype": "FP32", "shape": [9, 16], "data": [0.0] * 144},
                {"name": "INPUT1", "datatype": "FP32", "shape": [9, 16], "data": [0.0] * 144}]}),
        ]
        assert [r.status_code for r in bad] == [400, 400, 400], [r.text for r in bad]
        ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        ins[0].set_data_from_numpy(np.zeros((1, 16), np.int32))
        ins[1].set_data_from_numpy(np.zeros((1, 16), np.float32))
        with pytest.raises(InferenceServerException):
            grpcc.infer("add_sub", ins)  # wrong datatype
        validation_rejections = len(bad) + 1

        # A backend error.
        r = srv.post("/v2/models/loose/infer", {"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0, 3.0]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0, 3.0]}]})
        assert r.status_code >= 400, r.text

        # The dynamic batcher: one request runs, four queue behind it and then run as one batch.
        codes = []

        def slow(model, n=1):
            codes.append((model, requests.post(f"{srv.base}/v2/models/{model}/infer", json=identity_body(n), timeout=60).status_code))

        sent_first = time.monotonic()
        first = in_threads([lambda: slow("slow_batch")])
        wait_until(lambda: scrape(srv)["tritium_batcher_batches_total"].value(model="slow_batch", version="1") == 1,
                 what="the first slow_batch request to reach the instance")
        rest = in_threads([lambda: slow("slow_batch")] * 3 + [lambda: slow("slow_batch", 2)])

        def four_queued():
            m = scrape(srv)
            return m if m["tritium_scheduler_queue_length"].value(model="slow_batch", version="1") == 4 else None
        during_batch = wait_until(four_queued, timeout=SLOW_BATCH_MS / 1000 * 0.9, what="four requests queued on slow_batch")
        merged_wait_floor_s = SLOW_BATCH_MS / 1000 - (time.monotonic() - sent_first)
        # A gRPC request queued behind them and cancelled by its client (CANCELED).
        req = service_pb2.ModelInferRequest(model_name="slow_batch")
        req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 3]).contents.fp32_contents.extend([1.0] * 3)
        call = stub.ModelInfer.future(req)
        time.sleep(0.2)
        call.cancel()
        for t in first + rest:
            t.join()
        assert [c for _, c in codes] == [200] * 5, codes

        # Queue full: one runs, one waits, the others are rejected.
        threads = []
        for _ in range(4):
            threads += in_threads([lambda: slow("slow_queue")])
            time.sleep(0.1)
        for t in threads:
            t.join()
        queue_codes = [c for m, c in codes if m == "slow_queue"]
        assert set(queue_codes) <= {200, 503} and 503 in queue_codes, queue_codes
        rejected = queue_codes.count(503)

        # Quiet: nothing pending anywhere, then metrics and statistics side by side.
        def quiet():
            m = scrape(srv)
            return all(v == 0 for _, v in m["nv_inference_pending_request_count"].series()) and \
                all(v == 0 for _, v in m["tritium_scheduler_mailbox_depth"].series())
        wait_until(quiet, what="no pending request")
        time.sleep(0.3)
        stats = all_stats(srv)
        metrics = scrape(srv)
        assert all_stats(srv) == stats, "statistics moved while the server was quiet"
        configs = {name: srv.get(f"/v2/models/{name}/config").json() for name, _ in stats}
        return Traffic(srv, metrics, stats, during_batch, configs, rejected, validation_rejections,
                       merged_wait_floor_s)
    finally:
        channel.close()
        grpcc.close()
        http.close()


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    base = tmp_path_factory.mktemp("metrics")
    srv = Server(build_repo(base), log_dir=base).start()
    try:
        yield run_traffic(srv)
    finally:
        code = srv.stop()
        assert code == 0, f"tritium exited with {code} after SIGTERM:\n{srv.log_tail()}"


# --------------------------------------------------------------------------------------------
# The checks.

def test_every_triton_family_with_its_type_help_and_labels(traffic):
    m = traffic.metrics
    loaded = set(traffic.stats)
    for name, (kind, help_text, labels) in TRITON_FAMILIES.items():
        assert name in m, f"{name} missing"
        fam = m[name]
        assert fam.type == kind, (name, fam.type)
        assert fam.help == help_text, (name, fam.help)
        series = fam.series()
        assert series, f"{name} has no series"
        for l, v in series:
            assert set(l) == labels, (name, l)
            assert v >= 0 and math.isfinite(v), (name, l, v)
        if "model" in labels:
            per_model = {(l["model"], l["version"]) for l, _ in series}
            assert per_model == loaded, (name, per_model ^ loaded)
    for model, version in loaded:
        reasons = {l["reason"] for l, _ in m["nv_inference_request_failure"].series()
                   if l["model"] == model and l["version"] == version}
        assert reasons == REASONS, (model, reasons)
    assert 0.0 <= m["nv_cpu_utilization"].value() <= 1.0
    assert 0 < m["nv_cpu_memory_used_bytes"].value() <= m["nv_cpu_memory_total_bytes"].value()


def test_counts_equal_the_statistics_extension(traffic):
    m = traffic.metrics
    for (model, version), s in traffic.stats.items():
        inf = s["inference_stats"]
        l = {"model": model, "version": version}
        assert m["nv_inference_request_success"].value(**l) == int(inf["success"]["count"]), model
        failures = sum(m["nv_inference_request_failure"].value(reason=r, **l) for r in REASONS)
        assert failures == int(inf["fail"]["count"]), model
        assert m["nv_inference_count"].value(**l) == int(s["inference_count"]), model
        assert m["nv_inference_exec_count"].value(**l) == int(s["execution_count"]), model


def test_durations_are_the_statistics_nanoseconds_over_1000(traffic):
    m = traffic.metrics
    pairs = {"nv_inference_request_duration_us": "success", "nv_inference_queue_duration_us": "queue",
             "nv_inference_compute_input_duration_us": "compute_input",
             "nv_inference_compute_infer_duration_us": "compute_infer",
             "nv_inference_compute_output_duration_us": "compute_output"}
    for (model, version), s in traffic.stats.items():
        for family, key in pairs.items():
            us = m[family].value(model=model, version=version)
            ns = int(s["inference_stats"][key]["ns"])
            # Triton sums ns / 1000 per request: within one microsecond per request.
            count = max(1, int(s["inference_stats"][key]["count"]))
            assert abs(us - ns / 1000) <= count, (model, family, us, ns)
    # The request duration is of successful requests only, as in Triton (the failed request
    # on `loose` has fail.ns > 0 and adds nothing).
    loose = traffic.stats[("loose", "1")]["inference_stats"]
    assert int(loose["fail"]["ns"]) > 0
    assert m["nv_inference_request_duration_us"].value(model="loose", version="1") == int(loose["success"]["ns"]) // 1000


def test_batched_requests_count_each_item_and_one_execution(traffic):
    m = traffic.metrics
    l = {"model": "add_sub", "version": "1"}
    requests_sent = sum(n for _, n in ADD_SUB_HTTP + ADD_SUB_GRPC)
    items = sum(b * n for b, n in ADD_SUB_HTTP + ADD_SUB_GRPC)
    assert m["nv_inference_request_success"].value(**l) == requests_sent
    assert m["nv_inference_count"].value(**l) == items
    assert m["nv_inference_exec_count"].value(**l) == requests_sent, "add_sub has no dynamic batcher"
    # slow_batch: one execution of 1, then the four queued requests (5 items) in one.
    l = {"model": "slow_batch", "version": "1"}
    assert m["nv_inference_request_success"].value(**l) == 5
    assert m["nv_inference_count"].value(**l) == 6
    assert m["nv_inference_exec_count"].value(**l) == 2
    # Triton's batch efficiency: inference count / execution count.
    assert m["nv_inference_count"].value(**l) / m["nv_inference_exec_count"].value(**l) == 3


def test_pending_counts_requests_waiting_not_the_one_executing(traffic):
    """Triton: 'pending requests awaiting execution' — received, not yet started by an
    instance. While one slow_batch request runs and four wait, that is 4."""
    m = traffic.during_batch
    assert m["tritium_scheduler_queue_length"].value(model="slow_batch", version="1") == 4
    assert m["nv_inference_pending_request_count"].value(model="slow_batch", version="1") == 4
    assert traffic.metrics["nv_inference_pending_request_count"].value(model="slow_batch", version="1") == 0


def test_rejected_and_cancelled_requests_have_their_reason(traffic):
    m = traffic.metrics
    assert m["nv_inference_request_failure"].value(model="slow_queue", reason="REJECTED", version="1") == traffic.rejected
    assert m["nv_inference_request_failure"].value(model="slow_batch", reason="CANCELED", version="1") == 1
    for reason in REASONS - {"CANCELED"}:
        assert m["nv_inference_request_failure"].value(model="slow_batch", reason=reason, version="1") == 0


def test_validation_rejections_are_counted_nowhere(traffic):
    m = traffic.metrics
    s = traffic.stats[("add_sub", "1")]["inference_stats"]
    assert int(s["fail"]["count"]) == 0
    for reason in REASONS:
        assert m["nv_inference_request_failure"].value(model="add_sub", reason=reason, version="1") == 0


def test_backend_errors_count_as_BACKEND(traffic):
    m = traffic.metrics
    assert m["nv_inference_request_failure"].value(model="loose", reason="BACKEND", version="1") == 1
    assert m["nv_inference_request_failure"].value(model="loose", reason="OTHER", version="1") == 0


def test_batcher_histograms_show_the_merged_batch_and_its_wait(traffic):
    m = traffic.metrics
    l = {"model": "slow_batch", "version": "1"}
    sizes, waits = m["tritium_batcher_batch_size"], m["tritium_batcher_delay_us"]
    # One request alone, then the four that queued behind it (1 + 1 + 1 + 2 items) as one batch.
    assert sizes.value("_count", **l) == 2
    assert sizes.value("_bucket", le="1", **l) == 1
    assert sizes.value("_bucket", le="4", **l) == 1
    assert sizes.value("_bucket", le="8", **l) == 2
    assert sizes.value("_sum", **l) == 6
    # The merged batch's oldest request waited for the first execution (SLOW_BATCH_MS), less the
    # time its client took to send it; the first batch's request waited for nothing.
    floor_us = traffic.merged_wait_floor_s * 1e6
    assert floor_us > 0.1 * SLOW_BATCH_MS * 1000
    assert waits.value("_count", **l) == 2
    # The lone first request waited under a second; the merged batch's past its floor, so over
    # a second too when the floor is.
    under_a_second = waits.value("_bucket", le="1000000", **l)
    assert under_a_second == 1 if floor_us > 1e6 else under_a_second >= 1
    assert waits.value("_sum", **l) >= floor_us * 0.98


def test_tritium_actor_families_are_labelled_by_model_version_and_instance(traffic):
    m = traffic.metrics
    loaded = set(traffic.stats)
    for name, kind in PER_SCHEDULER.items():
        assert m[name].type == kind and m[name].help, name
        assert {(l["model"], l["version"]) for l, _ in m[name].series()} == loaded, name
        assert all(set(l) == PER_MODEL for l, _ in m[name].series()), name
    for name, kind in PER_INSTANCE.items():
        fam = m[name]
        assert fam.type == kind and fam.help, name
        for (model, version) in loaded:
            series = [(l, v) for l, v in fam.series() if l["model"] == model and l["version"] == version]
            expected = sum(int(g.get("count", 1)) for g in traffic.configs[model]["instance_group"])
            if name == "tritium_instance_restarts_total":
                # One series per instance and exit cause (issue 25's typed exits).
                assert all(set(l) == PER_MODEL | {"instance", "cause"} for l, _ in series), series
                causes = {"load_failed", "backend_failed", "panicked"}
                assert {(l["instance"], l["cause"]) for l, _ in series} == {
                    (i, c) for i in {l["instance"] for l, _ in series} for c in causes}, series
                series = [(l, v) for l, v in series if l["cause"] == "panicked"]
                series = [({k: x for k, x in l.items() if k != "cause"}, v) for l, v in series]
            assert len(series) == expected, (name, model, series)
            assert all(set(l) == PER_MODEL | {"instance"} and l["instance"] for l, _ in series), (name, series)
            assert len({l["instance"] for l, _ in series}) == expected, (name, series)
    for (model, version) in loaded:
        l = {"model": model, "version": version}
        execs = sum(v for lab, v in m["tritium_instance_executions_total"].series() if lab["model"] == model)
        assert execs == m["nv_inference_exec_count"].value(**l), model
        assert all(v == 1 for lab, v in m["tritium_instance_alive"].series() if lab["model"] == model), model
    l = {"model": "add_sub", "version": "1"}
    assert m["tritium_batcher_items_total"].value(**l) == m["nv_inference_count"].value(**l)
    assert m["tritium_batcher_batches_total"].value(**l) == m["nv_inference_exec_count"].value(**l)
    busy = sum(v for lab, v in m["tritium_instance_busy_us"].series() if lab["model"] == "slow_batch")
    assert busy >= 2 * SLOW_BATCH_MS * 1000 * 0.99, "two slow executions"


def test_an_unloaded_model_leaves_the_metrics_and_a_reload_starts_at_zero(start_server, repo_copy):
    srv = start_server(repo_copy(["add_sub", "identity_fp32"]),
                       args=["--model-control-mode", "explicit", "--load-model", "add_sub", "--load-model", "identity_fp32"])
    for _ in range(3):
        http_add_sub(srv.client, 2)
    assert scrape(srv)["nv_inference_count"].value(model="add_sub", version="1") == 6
    srv.client.unload_model("add_sub")
    wait_until(lambda: not srv.client.is_model_ready("add_sub"), what="add_sub to unload")

    def gone():
        m = scrape(srv)
        return all(l.get("model") != "add_sub" for f in m.values() for _, l, _ in f.samples) and m
    m = wait_until(gone, what="add_sub to leave the metrics")
    assert m["nv_inference_count"].value(model="identity_fp32", version="1") == 0
    srv.client.load_model("add_sub")
    http_add_sub(srv.client, 1)
    m = scrape(srv)
    s = srv.client.get_inference_statistics("add_sub")["model_stats"][0]
    assert int(s["inference_count"]) == 1
    assert m["nv_inference_count"].value(model="add_sub", version="1") == 1
    assert m["nv_inference_request_success"].value(model="add_sub", version="1") == 1
