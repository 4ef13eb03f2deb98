"""The model repository over HTTP: statistics, the index, broken configs, explicit load/unload
(with config overrides), and poll mode reloading under load without a failed request."""
import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import error_text, wait_until


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


def test_failed_request_counts_as_fail(server):
    before = server.client.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]["fail"]
    r = server.post("/v2/models/add_sub/infer", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]})
    assert r.status_code == 400
    after = server.client.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]["fail"]
    assert int(after["count"]) >= int(before["count"])


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
    srv = start_server(repo, wait_for="live")
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
    assert r.status_code == 500
    assert error_text(r) == "failed to load 'nope', failed to poll from model repository"
    r = srv.post("/v2/repository/models/mlp/load", {"parameters": {"config": "{not json"}})
    assert r.status_code >= 400
    assert srv.get("/v2/models/mlp/ready").status_code == 400
    r = srv.post("/v2/repository/models/mlp/load", b"{oops")
    assert r.status_code in (400, 500)
    assert "failed to parse the request JSON buffer" in error_text(r)


def test_poll_mode_refuses_explicit_load(start_server, repo_copy):
    srv = start_server(repo_copy(["add_sub"]), args=["--model-control-mode", "poll", "--repository-poll-secs", "1"])
    r = srv.post("/v2/repository/models/add_sub/load")
    assert r.status_code == 503
    assert error_text(r) == "explicit model load / unload is not allowed if polling is enabled"


def test_poll_mode_reloads_under_load_without_a_failed_request(start_server, repo_copy):
    repo = repo_copy(["add_sub", "identity_fp32", "mlp"])
    srv = start_server(repo, args=["--model-control-mode", "poll", "--repository-poll-secs", "1"])
    stop = threading.Event()
    done, failures = [0], []

    def load():
        client = httpclient.InferenceServerClient(srv.http_url)
        while not stop.is_set():
            try:
                infer_add_sub(client)
                done[0] += 1
            except (InferenceServerException, AssertionError) as e:  # pragma: no cover - the failure case
                failures.append(str(e))
        client.close()

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
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
        before = done[0]
        time.sleep(0.5)
        assert done[0] > before, "requests keep flowing after the reload"
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not failures, f"{len(failures)} failed requests during the reload, e.g. {failures[:3]}"
    assert done[0] > 20
    index = srv.index()
    assert entry(index, "add_sub", "2")["state"] == "READY"
    assert entry(index, "add_sub", "1") == {"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
