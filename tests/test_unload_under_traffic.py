"""A model unloaded while clients hammer it over HTTP and gRPC (issue 16, point 6), in explicit
mode: every request gets either its correct answer or a clean error (HTTP 400/404/503 with
Triton's JSON body, gRPC UNAVAILABLE/NOT_FOUND/INVALID_ARGUMENT), none hangs, the requests in
flight when the unload comes finish, another model's clients see no error at all, and the model
loads and serves again afterwards.
"""
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import identity_config, wait_until

CLEAN_HTTP = {400, 404, 503}
CLEAN_GRPC = {"StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND", "StatusCode.INVALID_ARGUMENT"}
REQUEST_TIMEOUT = 20


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "models"
    for name, delay in [("slow", 30), ("other", 0)]:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(identity_config(name, count=2, delay_ms=delay))
    return root


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = []  # (sent, answered) times
        self.clean = []  # (answered, status or code, text)
        self.bad = []  # anything else: wrong answers, unclean errors, hangs

    def add(self, kind, item):
        with self.lock:
            getattr(self, kind).append(item)


def http_worker(srv, model, stop, tally, seed):
    rng = np.random.default_rng(seed)
    with requests.Session() as session:
        while not stop.is_set():
            data = rng.random(8).astype(np.float32).tolist()
            body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [8], "data": data}]}
            sent = time.monotonic()
            try:
                r = session.post(f"{srv.base}/v2/models/{model}/infer", json=body, timeout=REQUEST_TIMEOUT)
            except requests.RequestException as e:
                tally.add("bad", f"HTTP {model}: {e!r}")
                continue
            done = time.monotonic()
            if r.status_code == 200:
                out = r.json()["outputs"][0]["data"]
                if np.allclose(out, data):
                    tally.add("ok", (sent, done))
                else:
                    tally.add("bad", f"HTTP {model}: wrong answer {out} for {data}")
            elif r.status_code in CLEAN_HTTP and set(r.json()) == {"error"}:
                tally.add("clean", (done, r.status_code, r.json()["error"]))
            else:
                tally.add("bad", f"HTTP {model}: {r.status_code} {r.text[:200]}")


def grpc_worker(srv, model, stop, tally, seed):
    rng = np.random.default_rng(seed)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        while not stop.is_set():
            data = rng.random(8).astype(np.float32)
            inp = grpcclient.InferInput("INPUT0", [8], "FP32")
            inp.set_data_from_numpy(data)
            sent = time.monotonic()
            try:
                result = client.infer(model, [inp], client_timeout=REQUEST_TIMEOUT)
            except InferenceServerException as e:
                if e.status() in CLEAN_GRPC:
                    tally.add("clean", (time.monotonic(), e.status(), e.message()))
                else:
                    tally.add("bad", f"gRPC {model}: {e.status()} {e.message()}")
                continue
            if np.allclose(result.as_numpy("OUTPUT0"), data):
                tally.add("ok", (sent, time.monotonic()))
            else:
                tally.add("bad", f"gRPC {model}: wrong answer")
    finally:
        client.close()


def ready(srv, model):
    return srv.get(f"/v2/models/{model}/ready", timeout=5).status_code == 200


def test_unloading_a_model_under_http_and_grpc_traffic(start_server, repo):
    srv = start_server(repo, args=["--model-control-mode=explicit", "--load-model=slow", "--load-model=other"])
    stop = threading.Event()
    slow, other = Tally(), Tally()
    workers = [threading.Thread(target=http_worker, args=(srv, "slow", stop, slow, i)) for i in range(3)]
    workers += [threading.Thread(target=grpc_worker, args=(srv, "slow", stop, slow, 10 + i)) for i in range(3)]
    workers += [threading.Thread(target=http_worker, args=(srv, "other", stop, other, 20)),
                threading.Thread(target=grpc_worker, args=(srv, "other", stop, other, 21))]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: len(slow.ok) >= 30, timeout=30, what="traffic on 'slow'")
        unload_sent = time.monotonic()
        r = srv.post("/v2/repository/models/slow/unload", timeout=60)
        unloaded = time.monotonic()
        assert r.status_code == 200, r.text
        assert not ready(srv, "slow")
        wait_until(lambda: len([c for c in slow.clean if c[0] > unloaded]) >= 20, timeout=30,
                   what="clean refusals after the unload")
        r = srv.post("/v2/repository/models/slow/load", timeout=60)
        assert r.status_code == 200, r.text
        reloaded = time.monotonic()
        wait_until(lambda: len([o for o in slow.ok if o[0] > reloaded]) >= 20, timeout=30,
                   what="answers after the reload")
    finally:
        stop.set()
        for w in workers:
            w.join(REQUEST_TIMEOUT + 10)
    assert not any(w.is_alive() for w in workers), "a client hangs"
    assert not slow.bad, slow.bad[:5]
    assert not other.bad and not other.clean, (other.bad[:5], other.clean[:5])
    assert len(other.ok) > 20
    # Requests sent before the unload and answered after it: in flight when it came, finished.
    assert any(sent < unload_sent and done > unload_sent for sent, done in slow.ok), \
        "no request was in flight across the unload"
    # Refusals name the model.
    assert all("slow" in text for _, _, text in slow.clean), slow.clean[:5]
    assert srv.alive() and ready(srv, "other") and ready(srv, "slow")
    assert "panicked" not in srv.log_tail(200_000)
