"""The rate limiter (issue 21): with `--rate-limit=execution_count`, two models whose instances
each need the one copy of resource R never execute at the same time (COMPUTE_START..COMPUTE_END
from the engine's own trace timestamps); with the limiter off they overlap. An explicit
`--rate-limit-resource` too small for an instance fails its load with Triton's text, and a
config's `rate_limiter` while the limiter is off is said in the log.
"""
import json
import threading

import numpy as np
import tritonclient.http as httpclient

DELAY_MS = 150


def config(name: str, resource: str = 'resources [ { name: "R" count: 1 } ]') -> str:
    return f"""
name: "{name}"
backend: "identity"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 rate_limiter {{ {resource} priority: 1 }} }} ]
parameters {{ key: "execute_delay_ms" value: {{ string_value: "{DELAY_MS}" }} }}
"""


def repo_with(tmp_path, models):
    repo = tmp_path / "models"
    for name, text in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
    return repo


def compute_spans(trace_path):
    """{model: [(COMPUTE_START ns, COMPUTE_END ns), ...]} from a Triton trace file."""
    records = json.loads(trace_path.read_text())
    models = {r["id"]: r["model_name"] for r in records if "model_name" in r}
    points = {}
    for r in records:
        for t in r.get("timestamps", []):
            points.setdefault(r["id"], {})[t["name"]] = t["ns"]
    spans = {}
    for i, model in models.items():
        p = points.get(i, {})
        if "COMPUTE_START" in p and "COMPUTE_END" in p:
            spans.setdefault(model, []).append((p["COMPUTE_START"], p["COMPUTE_END"]))
    return spans


def run_both(srv, per_model=3):
    errors = []

    def call(model):
        try:
            c = httpclient.InferenceServerClient(srv.http_url)
            x = np.ones(4, dtype=np.float32)
            inp = httpclient.InferInput("INPUT0", [4], "FP32")
            inp.set_data_from_numpy(x)
            c.infer(model, [inp])
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(m,)) for _ in range(per_model) for m in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def overlaps(spans_a, spans_b):
    return sum(1 for a in spans_a for b in spans_b if a[0] < b[1] and b[0] < a[1])


def trace_args(path):
    return ["--trace-config", f"triton,file={path}", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1", "--trace-config", "log_frequency=0"]


def test_instances_sharing_a_resource_of_one_copy_never_execute_together(start_server, tmp_path):
    repo = repo_with(tmp_path, {"a": config("a"), "b": config("b")})
    on_path = tmp_path / "on.json"
    srv = start_server(repo, args=["--rate-limit=execution_count", *trace_args(on_path)])
    run_both(srv)
    spans = compute_spans(on_path)
    assert len(spans["a"]) == 3 and len(spans["b"]) == 3, spans
    assert overlaps(spans["a"], spans["b"]) == 0, spans
    assert "rate_limiter, which has no effect" not in srv.log_tail(100_000)

    off_path = tmp_path / "off.json"
    srv_off = start_server(repo, args=trace_args(off_path))
    run_both(srv_off)
    spans = compute_spans(off_path)
    assert overlaps(spans["a"], spans["b"]) > 0, spans
    log = srv_off.log_tail(100_000)
    assert "model 'a': instance_group 'a_0' sets rate_limiter, which has no effect while the rate limiter is off" in log


def test_an_explicit_count_below_an_instances_need_fails_its_load(start_server, tmp_path):
    repo = repo_with(tmp_path, {
        "small": config("small", 'resources [ { name: "R" count: 2 } ]'),
        "fits": config("fits", 'resources [ { name: "R" count: 1 } ]'),
        "global": config("global", 'resources [ { name: "G" global: true count: 3 } ]'),
    })
    srv = start_server(repo, args=["--rate-limit=execution_count", "--rate-limit-resource=R:1",
                                   "--rate-limit-resource=G:3:0", "--exit-on-error=false",
                                   "--strict-readiness=false"])
    index = {m["name"]: m for m in srv.index()}
    assert index["fits"]["state"] == "READY" and index["global"]["state"] == "READY", index
    assert index["small"]["state"] == "UNAVAILABLE", index
    assert ('Resource count for "R" is limited to 1 which will prevent scheduling of one or more model '
            'instances, the minimum required count is 2') in index["small"]["reason"], index["small"]
