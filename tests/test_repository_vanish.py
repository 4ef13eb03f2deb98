"""The model repository vanishing in poll mode (issue 16, point 6), as Triton 2.51 answers it
(checked side by side with the real server): when the repository directory is renamed or
deleted while serving, the next poll unloads its models (an infer is then 404 "Request for
unknown model"), the repository index fails with 500 "failed to open directory <path>", the
server stays live and keeps polling, and when the directory comes back its models load and serve
again. Nothing panics; clients that keep sending meanwhile get answers or clean errors.
"""
import shutil
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import error_text, identity_config, wait_until

POLL = ["--model-control-mode=poll", "--repository-poll-secs=1"]


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "models"
    (root / "echo" / "1").mkdir(parents=True)
    (root / "echo" / "config.pbtxt").write_text(identity_config("echo", count=1))
    return root


def infer(srv, values):
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(values)], "data": values}]}
    return requests.post(f"{srv.base}/v2/models/echo/infer", json=body, timeout=20)


def ready(srv):
    return srv.get("/v2/models/echo/ready", timeout=5).status_code == 200


def assert_gone(srv, repo):
    """Triton 2.51's HTTP answers, taken from the real server with its repository renamed; gRPC
    carries the same status (INTERNAL for the index)."""
    r = infer(srv, [1.0])
    assert r.status_code == 404, r.text
    assert "unknown model" in error_text(r), r.text
    r = srv.get("/v2/models/echo/config")
    assert r.status_code == 404 and error_text(r) == "Request for unknown model: 'echo' has no available versions"
    r = srv.get("/v2/models/echo/ready")
    assert r.status_code == 400 and error_text(r) == "Model version not ready"
    index = srv.post("/v2/repository/index", timeout=10)
    assert index.status_code == 500, index.text
    assert error_text(index) == f"failed to open directory {repo}"
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as e:
            client.get_model_repository_index()
        assert e.value.status() == "StatusCode.INTERNAL" and e.value.message() == f"failed to open directory {repo}"
    finally:
        client.close()
    # The server stays live and ready: a model gone from the repository is not one it waits for.
    assert srv.get("/v2/health/live").status_code == 200
    assert srv.get("/v2/health/ready").status_code == 200


def assert_serving(srv):
    r = infer(srv, [1.0, 2.0, 3.0])
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0]


def test_a_renamed_repository_unloads_its_models_and_they_come_back(start_server, repo):
    srv = start_server(repo, args=POLL)
    assert_serving(srv)
    stop, outcomes = threading.Event(), []

    def client():
        while not stop.is_set():
            values = np.random.default_rng().random(4).astype(np.float32).tolist()
            try:
                r = infer(srv, values)
            except requests.RequestException as e:
                outcomes.append(f"error {e!r}")
                continue
            if r.status_code == 200:
                ok = np.allclose(r.json()["outputs"][0]["data"], values)
                outcomes.append("ok" if ok else "wrong answer")
            else:
                outcomes.append(r.status_code if set(r.json()) == {"error"} else f"bad body {r.text}")
            time.sleep(0.01)

    t = threading.Thread(target=client)
    t.start()
    try:
        moved = repo.with_name("models.moved")
        repo.rename(moved)
        wait_until(lambda: not ready(srv), timeout=15, what="the model unloaded after its repository went")
        assert_gone(srv, repo)
        time.sleep(2.5)  # more polls of a missing directory change nothing and break nothing
        assert_gone(srv, repo)
        moved.rename(repo)
        wait_until(lambda: ready(srv), timeout=30, what="the model back with its repository")
        assert_serving(srv)
        assert [e["name"] for e in srv.index()] == ["echo"]
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    assert set(outcomes) <= {"ok", 404}, sorted(set(map(str, outcomes)))
    assert "ok" in outcomes and 404 in outcomes
    assert srv.alive() and "panicked" not in srv.log_tail(200_000)


def test_a_deleted_repository_made_again_is_picked_up(start_server, repo, tmp_path):
    srv = start_server(repo, args=POLL)
    assert_serving(srv)
    keep = tmp_path / "keep"
    shutil.copytree(repo, keep)
    shutil.rmtree(repo)
    wait_until(lambda: not ready(srv), timeout=15, what="the model unloaded after its repository was deleted")
    assert_gone(srv, repo)
    shutil.copytree(keep, repo)
    wait_until(lambda: ready(srv), timeout=30, what="the model loaded from the new repository")
    assert_serving(srv)
    assert srv.alive() and "panicked" not in srv.log_tail(200_000)
