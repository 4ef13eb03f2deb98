"""The model repository over HTTP: statistics, the index, broken configs, explicit load/unload
(with config overrides and `--load-model '*'`), several repositories, `--strict-model-config`,
and poll mode reloading, unloading and surviving a broken config under load without a failed
request."""
import shutil
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import BUNDLED_REPO, error_text, identity_config, wait_until


def add_sub_inputs(a, b):
    ins = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
           httpclient.InferInput("INPUT1", list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def infer_add_sub(client, version=""):
    a = np.random.default_rng().standard_normal((1, 16)).astype(np.float32)
    b = np.ones((1, 16), dtype=np.float32)
    res = client.infer("add_sub", add_sub_inputs(a, b), model_version=version)
    np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    return res



def entry(index, name, version=None):
    found = [e for e in index if e["name"] == name and (version is None or e.get("version") == version)]
    return found[0] if found else None


def test_statistics_count_up(server):
    def stats():
        return server.client.get_inference_statistics("add_sub")["model_stats"][0]
    before = stats()
    for _ in range(5):
        infer_add_sub(server.client)
    after = stats()
    assert int(after["inference_count"]) - int(before["inference_count"]) == 5
    assert int(after["execution_count"]) - int(before["execution_count"]) == 5
    inf_b, inf_a = before["inference_stats"], after["inference_stats"]
    assert int(inf_a["success"]["count"]) - int(inf_b["success"]["count"]) == 5
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert int(inf_a[key]["ns"]) > int(inf_b[key]["ns"]), key
    assert int(after["last_inference"]) > 0
    sizes = {int(b["batch_size"]) for b in after["batch_stats"]}
    assert 1 in sizes


def test_failed_request_counts_as_fail(start_server, repo_copy):
    """Exact counts (docs/triton-reference.md, Statistics): a request the model fails (here
    `loose`: add_sub's ONNX file under a config that claims any width, so [1,3] passes validation
    and fails in ONNX Runtime) adds one to `fail` and nothing to `success`; a request rejected by
    validation is counted nowhere."""
    repo = repo_copy(["add_sub"])
    (repo / "loose" / "1").mkdir(parents=True)
    shutil.copy(repo / "add_sub" / "1" / "model.onnx", repo / "loose" / "1" / "model.onnx")
    (repo / "loose" / "config.pbtxt").write_text((repo / "add_sub" / "config.pbtxt").read_text()
                                                 .replace('name: "add_sub"', 'name: "loose"')
                                                 .replace("dims: [ 16 ]", "dims: [ -1 ]"))
    srv = start_server(repo)

    def counts(model):
        s = srv.client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]
        return int(s["success"]["count"]), int(s["fail"]["count"])

    def body(width, inputs=("INPUT0", "INPUT1")):
        return {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, width], "data": [0.0] * width}
                           for n in inputs]}

    assert counts("loose") == (0, 0)
    r = srv.post("/v2/models/loose/infer", body(3))
    assert r.status_code >= 400, r.text
    assert counts("loose") == (0, 1), "a backend failure counts once as fail"
    assert srv.post("/v2/models/loose/infer", body(16)).status_code == 200
    assert counts("loose") == (1, 1)

    r = srv.post("/v2/models/add_sub/infer", body(16, inputs=("INPUT0",)))
    assert r.status_code == 400, r.text
    assert counts("add_sub") == (0, 0), "a validation rejection counts nowhere"
    assert srv.post("/v2/models/add_sub/infer", body(16)).status_code == 200
    assert counts("add_sub") == (1, 0)


def test_version_stats_endpoint(server):
    """`/v2/models/{m}/versions/{v}/stats` is the version's own entry, counting up exactly."""
    def version_stats():
        r = server.get("/v2/models/add_sub/versions/1/stats")
        assert r.status_code == 200, r.text
        stats = r.json()["model_stats"]
        assert [(s["name"], s["version"]) for s in stats] == [("add_sub", "1")]
        return stats[0]
    before = version_stats()
    for _ in range(3):
        infer_add_sub(server.client, version="1")
    after = version_stats()
    assert after["inference_count"] - before["inference_count"] == 3
    assert after["execution_count"] - before["execution_count"] == 3
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    assert after == server.client.get_inference_statistics("add_sub", "1")["model_stats"][0]
    r = server.get("/v2/models/add_sub/versions/3/stats")
    assert r.status_code == 400
    assert error_text(r) == "requested model 'add_sub' is not available"


def test_all_model_stats_and_unknown_model_stats(server):
    names = {s["name"] for s in server.client.get_inference_statistics()["model_stats"]}
    assert {"add_sub", "identity_fp32", "mlp"} <= names
    r = server.get("/v2/models/nope/stats")
    assert r.status_code == 400
    assert "nope" in error_text(r)


def test_index_lists_every_bundled_model_ready(server):
    index = server.index()
    assert index == sorted(index, key=lambda e: (e["name"], e.get("version", "")))
    for name in ("add_sub", "add_sub_nobatch", "identity", "identity_fp32", "identity_types", "mlp", "classify"):
        e = entry(index, name)
        assert e == {"name": name, "version": "1", "state": "READY"}, e
    ready = server.post("/v2/repository/index", {"ready": True}).json()
    assert all(e["state"] == "READY" for e in ready)


def test_broken_config_is_unavailable_with_file_and_line_and_others_serve(start_server, repo_copy):
    repo = repo_copy(["add_sub", "identity_fp32"])
    shutil.copytree(repo / "add_sub", repo / "broken")
    cfg = (repo / "broken" / "config.pbtxt").read_text().replace('name: "add_sub"', 'name: "broken"')
    lines = cfg.splitlines()
    lines.insert(5, "not_a_field: 3")
    (repo / "broken" / "config.pbtxt").write_text("\n".join(lines) + "\n")
    srv = start_server(repo, args=["--exit-on-error=false"], wait_for="live")
    e = wait_until(lambda: (x := entry(srv.index(), "broken")) and x.get("state") == "UNAVAILABLE" and x,
                   what="broken to be UNAVAILABLE")
    assert "config.pbtxt:6:1" in e["reason"], e
    assert "not_a_field" in e["reason"], e
    # The others load on their own time (broken fails at parse, before they are ready).
    wait_until(lambda: all((x := entry(srv.index(), m)) and x.get("state") == "READY" for m in ("add_sub", "identity_fp32")),
               what="the good models to be READY")
    # Strict readiness: one failed model makes the server not ready, yet the others serve.
    assert srv.get("/v2/health/ready").status_code == 400
    assert srv.get("/v2/models/add_sub/ready").status_code == 200
    infer_add_sub(srv.client)
    r = srv.post("/v2/models/broken/infer", {"inputs": []})
    assert r.status_code in (400, 404)


def test_explicit_mode_load_unload_and_config_override(start_server, repo_copy):
    srv = start_server(repo_copy(), args=["--model-control-mode", "explicit", "--load-model", "add_sub"])
    index = srv.index()
    assert entry(index, "add_sub") == {"name": "add_sub", "version": "1", "state": "READY"}
    assert entry(index, "mlp") == {"name": "mlp"}, "a model never loaded has only its name"
    assert srv.get("/v2/models/mlp/ready").status_code == 400

    srv.client.load_model("identity_fp32")
    assert srv.client.is_model_ready("identity_fp32")
    x = np.arange(5, dtype=np.float32).reshape(1, 5)
    inp = httpclient.InferInput("INPUT0", [1, 5], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(srv.client.infer("identity_fp32", [inp]).as_numpy("OUTPUT0"), x)
    srv.client.load_model("identity_fp32")  # loading a loaded model is fine

    srv.client.unload_model("identity_fp32")
    wait_until(lambda: entry(srv.index(), "identity_fp32").get("reason") == "unloaded", what="unloaded")
    assert entry(srv.index(), "identity_fp32") == {
        "name": "identity_fp32", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    r = srv.post("/v2/models/identity_fp32/infer", {"inputs": []})
    assert r.status_code == 404
    assert "Request for unknown model: 'identity_fp32' has no available versions" in error_text(r)
    srv.client.unload_model("identity_fp32")  # unloading again is fine
    assert srv.post("/v2/repository/models/nope/unload").status_code == 200

    # A config override replaces config.pbtxt for this load.
    cfg = srv.client.get_model_config("add_sub")
    cfg["max_batch_size"] = 4
    cfg["instance_group"] = [{"count": 2, "kind": "KIND_CPU"}]
    srv.client.load_model("add_sub", config=__import__("json").dumps(cfg))
    new = srv.client.get_model_config("add_sub")
    assert new["max_batch_size"] == 4
    assert sum(g["count"] for g in new["instance_group"]) == 2
    infer_add_sub(srv.client)

    r = srv.post("/v2/repository/models/nope/load")
    assert r.status_code == 400
    assert error_text(r) == "failed to load 'nope', failed to poll from model repository"
    r = srv.post("/v2/repository/models/mlp/load", {"parameters": {"config": "{not json"}})
    assert r.status_code >= 400
    assert srv.get("/v2/models/mlp/ready").status_code == 400
    r = srv.post("/v2/repository/models/mlp/load", b"{oops")
    assert r.status_code in (400, 500)
    assert "failed to parse the request JSON buffer" in error_text(r)


def test_a_model_file_that_does_not_load_answers_with_the_backends_own_kind(start_server, repo_copy):
    """An instance whose backend cannot load (a model.onnx that is not a model; strict config, so
    nothing reads the file before the instance does) ends the load with the backend's own error:
    400 / INVALID_ARGUMENT with its text, where it was 500 / INTERNAL before issue 25."""
    repo = repo_copy(["add_sub"])
    shutil.copytree(repo / "add_sub", repo / "garbled")
    cfg = (repo / "garbled" / "config.pbtxt").read_text().replace('name: "add_sub"', 'name: "garbled"')
    (repo / "garbled" / "config.pbtxt").write_text(cfg)
    (repo / "garbled" / "1" / "model.onnx").write_bytes(b"this is not an ONNX model")
    srv = start_server(repo, args=["--model-control-mode", "explicit", "--strict-model-config=true"])
    r = srv.post("/v2/repository/models/garbled/load")
    assert r.status_code == 400, r.text
    text = error_text(r)
    assert "'garbled'" in text and "model.onnx" in text and "Protobuf parsing failed" in text, text
    e = entry(srv.index(), "garbled")
    assert e["state"] == "UNAVAILABLE" and "model.onnx" in e["reason"], e
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as raised:
            c.load_model("garbled")
        assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "'garbled'" in raised.value.message() and "model.onnx" in raised.value.message()
    finally:
        c.close()


def bundled_model_names():
    return sorted(d.name for d in BUNDLED_REPO.iterdir() if d.is_dir() and not d.name.startswith("."))


def test_explicit_mode_load_model_star_loads_every_bundled_model(start_server, repo_copy):
    """`--load-model '*'` in explicit mode loads every model of the repository (as mode none)."""
    srv = start_server(repo_copy(), args=["--model-control-mode", "explicit", "--load-model", "*"])
    index = srv.index()
    names = bundled_model_names()
    assert len(names) > 10
    assert [e["name"] for e in index] == names
    assert index == [{"name": n, "version": "1", "state": "READY"} for n in names]
    assert all(srv.client.is_model_ready(n) for n in names)
    infer_add_sub(srv.client)
    # Still explicit: the repository API works.
    srv.client.unload_model("mlp")
    wait_until(lambda: not srv.client.is_model_ready("mlp"), what="mlp to unload")


def test_two_model_repositories_serve_models_from_both(start_server, repo_copy, tmp_path):
    """Repeated `--model-repository`: the models of both are loaded and infer."""
    first = repo_copy(["add_sub"])
    second = tmp_path / "second_repo"
    second.mkdir()
    shutil.copytree(BUNDLED_REPO / "identity_fp32", second / "identity_two")
    cfg = second / "identity_two" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"identity_fp32"', '"identity_two"'))
    srv = start_server(first, args=["--model-repository", str(second)])
    index = srv.index()
    assert index == [{"name": "add_sub", "version": "1", "state": "READY"},
                     {"name": "identity_two", "version": "1", "state": "READY"}]
    infer_add_sub(srv.client)
    x = np.arange(7, dtype=np.float32).reshape(1, 7)
    inp = httpclient.InferInput("INPUT0", [1, 7], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(srv.client.infer("identity_two", [inp]).as_numpy("OUTPUT0"), x)


def test_strict_model_config_refuses_a_model_without_config(start_server, repo_copy):
    """`--strict-model-config=true`: `autocomplete_add` (no config.pbtxt) is UNAVAILABLE with
    the reason in the index; a model with a partial config too; the others serve. (Without the
    flag autocomplete_add loads: test_model_without_config_is_autocompleted_from_its_file.)"""
    repo = repo_copy(["add_sub", "autocomplete_add", "identity_fp32"])
    shutil.copytree(repo / "autocomplete_add", repo / "partial")
    (repo / "partial" / "config.pbtxt").write_text('name: "partial"\nplatform: "onnxruntime_onnx"\n')
    srv = start_server(repo, args=["--strict-model-config=true", "--exit-on-error=false"], wait_for="live")

    def settled():
        index = srv.index()
        states = {m: (entry(index, m) or {}).get("state") for m in ("autocomplete_add", "partial", "add_sub", "identity_fp32")}
        return index if states == {"autocomplete_add": "UNAVAILABLE", "partial": "UNAVAILABLE",
                                   "add_sub": "READY", "identity_fp32": "READY"} else None
    index = wait_until(settled, what="the strict outcome in the index")
    reason = entry(index, "autocomplete_add")["reason"]
    assert "autocomplete_add" in reason and "config.pbtxt" in reason and "missing" in reason, reason
    reason = entry(index, "partial")["reason"]
    assert "'partial'" in reason and "'input'" in reason, reason
    assert not srv.client.is_model_ready("autocomplete_add")
    assert srv.get("/v2/health/ready").status_code == 400, "strict readiness: a wanted model failed"
    infer_add_sub(srv.client)
    x = np.ones((1, 3), dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(srv.client.infer("identity_fp32", [inp]).as_numpy("OUTPUT0"), x)
    r = srv.post("/v2/models/autocomplete_add/infer", {"inputs": []})
    assert r.status_code == 404, r.text


def test_poll_mode_refuses_explicit_load(start_server, repo_copy):
    srv = start_server(repo_copy(["add_sub"]), args=["--model-control-mode", "poll", "--repository-poll-secs", "1"])
    r = srv.post("/v2/repository/models/add_sub/load")
    assert r.status_code == 503
    assert error_text(r) == "explicit model load / unload is not allowed if polling is enabled"


class Traffic:
    """`threads` threads, each with its own client, calling `call(client)` until the block ends;
    counts the calls that return and keeps the text of those that raise."""

    def __init__(self, srv, call=infer_add_sub, threads=4, stagger=0.0):
        self.srv, self.call, self.n, self.stagger = srv, call, threads, stagger
        self.stop = threading.Event()
        self.done, self.failures = [0] * threads, []

    def _run(self, i):
        time.sleep(i * self.stagger)
        client = httpclient.InferenceServerClient(self.srv.http_url, network_timeout=60.0)
        try:
            while not self.stop.is_set():
                try:
                    self.call(client)
                    self.done[i] += 1
                except Exception as e:  # pragma: no cover - the failure case
                    self.failures.append(f"{type(e).__name__}: {e}")
        finally:
            client.close()

    @property
    def count(self):
        return sum(self.done)

    def assert_flowing(self):
        before = self.count
        wait_until(lambda: self.count > before, timeout=10, what="requests to keep flowing")

    def __enter__(self):
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(self.n)]
        for t in self.threads:
            t.start()
        wait_until(lambda: self.count >= self.n, what="traffic to start")
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()
        assert not self.failures, (f"{len(self.failures)} failed requests of {self.count + len(self.failures)}, "
                                   f"e.g. {self.failures[:3]}\n{self.srv.log_tail()}")


def poll_server(start_server, repo):
    return start_server(repo, args=["--model-control-mode", "poll", "--repository-poll-secs", "1"])


def test_poll_mode_reloads_under_load_without_a_failed_request(start_server, repo_copy):
    repo = repo_copy(["add_sub", "identity_fp32", "mlp"])
    srv = poll_server(start_server, repo)
    with Traffic(srv) as traffic:
        time.sleep(0.5)
        # A new version (latest 1 serves only version 2), a new model, a changed config and a
        # removed model, all in one poll.
        shutil.copytree(repo / "add_sub" / "1", repo / "add_sub" / "2")
        shutil.copytree(repo / "identity_fp32", repo / "identity_copy")
        (repo / "identity_copy" / "config.pbtxt").write_text(
            (repo / "identity_copy" / "config.pbtxt").read_text().replace('"identity_fp32"', '"identity_copy"'))
        shutil.rmtree(repo / "mlp")
        wait_until(lambda: srv.client.get_model_metadata("add_sub")["versions"] == ["2"], what="add_sub version 2")
        wait_until(lambda: srv.client.is_model_ready("identity_copy"), what="identity_copy to load")
        wait_until(lambda: not srv.client.is_model_ready("mlp"), what="mlp to unload")
        time.sleep(0.5)
        traffic.assert_flowing()
    assert traffic.count > 20
    index = srv.index()
    assert entry(index, "add_sub", "2")["state"] == "READY"
    assert entry(index, "add_sub", "1") == {"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}


def instance_count(srv, model):
    return sum(g["count"] for g in srv.client.get_model_config(model)["instance_group"])


def test_poll_mode_reloads_a_changed_config_of_a_busy_model(start_server, repo_copy):
    """add_sub's instance_group count 1 -> 2 while four clients keep it busy: it reloads with
    the new config and not one request fails."""
    repo = repo_copy(["add_sub"])
    srv = poll_server(start_server, repo)
    assert instance_count(srv, "add_sub") == 1
    cfg = repo / "add_sub" / "config.pbtxt"
    with Traffic(srv) as traffic:
        text = cfg.read_text()
        assert "count: 1" in text
        cfg.write_text(text.replace("count: 1", "count: 2"))
        wait_until(lambda: instance_count(srv, "add_sub") == 2, what="the reloaded config")
        traffic.assert_flowing()
    assert entry(srv.index(), "add_sub") == {"name": "add_sub", "version": "1", "state": "READY"}


SLOW_IDENTITY = identity_config("slow", count=4, delay_ms=300)


def test_poll_mode_removed_model_finishes_its_in_flight_requests(start_server, repo_copy):
    """A model removed from the repository while requests run on it: those in flight answer
    200 with their data; later ones are refused as for an unknown model (404); the model ends
    UNAVAILABLE "unloaded"; add_sub's traffic never fails."""
    repo = repo_copy(["add_sub"])
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "config.pbtxt").write_text(SLOW_IDENTITY)
    srv = poll_server(start_server, repo)
    outcomes = []  # (status, end time, text)

    def call_slow(client):
        x = np.random.default_rng().standard_normal(4).astype(np.float32)
        r = requests.post(f"{srv.base}/v2/models/slow/infer", timeout=30, json={
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": x.tolist()}]})
        outcomes.append((r.status_code, time.monotonic(), r.text))
        if r.status_code == 200:
            np.testing.assert_allclose(r.json()["outputs"][0]["data"], x, rtol=1e-6)
        elif r.status_code == 404 and "Request for unknown model: 'slow'" in r.text:
            time.sleep(0.05)  # gone, as it should be once removed
        else:
            raise AssertionError(f"{r.status_code}: {r.text}")

    # Staggered so that some of the four slow requests are always mid-execution.
    with Traffic(srv) as good, Traffic(srv, call_slow, stagger=0.075) as slow:
        shutil.rmtree(repo / "slow")
        wait_until(lambda: any(s == 404 for s, _, _ in outcomes), what="slow to be unloaded")
        good.assert_flowing()
    first_gone = min(t for s, t, _ in outcomes if s == 404)
    finished_after = [t for s, t, _ in outcomes if s == 200 and t > first_gone]
    assert finished_after, "requests in flight when the model was removed finished with 200"
    assert max(t for s, t, _ in outcomes if s == 200) < first_gone + 1.0
    assert not srv.client.is_model_ready("slow")
    assert entry(srv.index(), "slow") == {"name": "slow", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    assert slow.count > 4


def test_poll_mode_broken_config_keeps_the_old_version_serving(start_server, repo_copy):
    """A config.pbtxt broken while the model is busy: the poll fails to reload it, the loaded
    version keeps serving (no request fails), and the index shows why."""
    repo = repo_copy(["add_sub"])
    srv = poll_server(start_server, repo)
    cfg = repo / "add_sub" / "config.pbtxt"
    good = cfg.read_text()
    with Traffic(srv) as traffic:
        cfg.write_text(good + "not_a_field: 3\n")
        e = wait_until(lambda: (x := entry(srv.index(), "add_sub")) and x.get("reason") and x,
                       what="the failed reload in the index")
        assert e["state"] == "READY", e
        assert "config.pbtxt:15:1" in e["reason"] and "not_a_field" in e["reason"], e
        time.sleep(1.5)  # another poll or two: the loaded version still serves
        traffic.assert_flowing()
        assert srv.client.is_model_ready("add_sub")
        assert srv.client.get_model_config("add_sub")["max_batch_size"] == 8
        # Repaired: the next poll reloads it and the reason goes.
        cfg.write_text(good.replace("count: 1", "count: 2"))
        wait_until(lambda: entry(srv.index(), "add_sub") == {"name": "add_sub", "version": "1", "state": "READY"},
                   what="the repaired model to reload")
        assert instance_count(srv, "add_sub") == 2
        traffic.assert_flowing()
