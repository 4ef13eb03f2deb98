"""A model whose version is swapped, or reloaded in place, while HTTP and gRPC clients send it
a steady stream of requests: no request may fail (as in Triton, requests already accepted by
the old version finish on it, new ones go to the new version once it is ready). Swaps come from
poll mode (a new version folder, `version_policy: latest 1`, so the old one is unloaded) and
from explicit loads (a new version, or the same version with a changed config). A sequence
begun before a reload is told to start again, as Triton tells it.
"""
import threading
import time

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import identity_config, wait_until

MODEL = "swap"


def config(instances=1, note="0"):
    # The parameter changes the config (an explicit load then reloads the same version).
    extra = f'parameters {{ key: "note" value: {{ string_value: "{note}" }} }}\n'
    extra += "version_policy { latest { num_versions: 1 } }\n"
    return identity_config(MODEL, count=instances, extra=extra)


def make_repo(root):
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(config())
    return root


class Load:
    """Two HTTP and two gRPC clients sending requests without pause until `stop`; every answer
    is checked, every failure kept with its message."""

    def __init__(self, srv):
        self.srv, self.stop = srv, threading.Event()
        self.lock, self.done, self.failed = threading.Lock(), 0, []
        workers = [self.http, self.http, self.grpc, self.grpc]
        self.threads = [threading.Thread(target=w, args=(i,)) for i, w in enumerate(workers)]

    def count(self, ok, what=""):
        with self.lock:
            if ok:
                self.done += 1
            else:
                self.failed.append(what)

    def http(self, seed):
        rng = np.random.default_rng(seed)
        with requests.Session() as session:
            while not self.stop.is_set():
                data = rng.random(4).astype(np.float32).tolist()
                body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": data}]}
                try:
                    r = session.post(f"{self.srv.base}/v2/models/{MODEL}/infer", json=body, timeout=20)
                except requests.RequestException as e:
                    self.count(False, f"HTTP: {e!r}")
                    continue
                ok = r.status_code == 200 and np.allclose(r.json()["outputs"][0]["data"], data)
                self.count(ok, f"HTTP {r.status_code}: {r.text[:300]}")

    def grpc(self, seed):
        rng = np.random.default_rng(seed)
        client = grpcclient.InferenceServerClient(self.srv.grpc_url)
        try:
            while not self.stop.is_set():
                data = rng.random(4).astype(np.float32)
                inp = grpcclient.InferInput("INPUT0", [4], "FP32")
                inp.set_data_from_numpy(data)
                try:
                    got = client.infer(MODEL, [inp], client_timeout=20).as_numpy("OUTPUT0")
                    self.count(np.allclose(got, data), f"gRPC: wrong answer {got} for {data}")
                except Exception as e:  # noqa: BLE001 - every failure counts
                    self.count(False, f"gRPC {type(e).__name__}: {e}")
        finally:
            client.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        wait_until(lambda: self.done > 20, timeout=20, what="the first answers")
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()

    def settle(self, swaps):
        """Waits for answers after the last swap; fails naming the first failures."""
        before = self.done
        wait_until(lambda: self.done > before + 20, timeout=20, what="answers after the swaps")
        assert self.failed == [], f"{len(self.failed)} of {self.done + len(self.failed)} requests failed " \
                                  f"over {swaps} swaps: {self.failed[:3]}"


def ready_versions(srv):
    return sorted(int(m["version"]) for m in srv.index() if m["name"] == MODEL and m.get("state") == "READY")


def test_poll_mode_swaps_versions_under_load_without_a_failed_request(tmp_path, start_server):
    repo = make_repo(tmp_path / "models")
    srv = start_server(repo, args=["--model-control-mode=poll", "--repository-poll-secs=1"])
    with Load(srv) as load:
        for version in range(2, 6):
            # A file in it: poll mode sees a folder change by its files.
            (repo / MODEL / str(version)).mkdir()
            (repo / MODEL / str(version) / "notes.txt").write_text(f"version {version}")
            wait_until(lambda: ready_versions(srv) == [version], timeout=20, what=f"version {version} alone")
        load.settle(swaps=4)
    assert srv.client.get_model_metadata(MODEL)["versions"] == ["5"]


def test_explicit_loads_swap_and_reload_under_load_without_a_failed_request(tmp_path, start_server):
    repo = make_repo(tmp_path / "models")
    srv = start_server(repo, args=["--model-control-mode=explicit", f"--load-model={MODEL}"])
    swaps, version, deadline = 0, 1, time.monotonic() + 6
    with Load(srv) as load:
        while time.monotonic() < deadline:
            # A reload of the same version with a changed config, then a new version.
            (repo / MODEL / "config.pbtxt").write_text(config(instances=1 + swaps % 2, note=str(swaps)))
            if swaps % 2:
                version += 1
                (repo / MODEL / str(version)).mkdir()
            r = srv.post(f"/v2/repository/models/{MODEL}/load")
            assert r.status_code == 200, r.text
            assert ready_versions(srv) == [version]
            swaps += 1
        load.settle(swaps)
    # Unloaded for good: Triton's texts, as before.
    assert srv.post(f"/v2/repository/models/{MODEL}/unload").status_code == 200
    r = srv.post(f"/v2/models/{MODEL}/infer", {"inputs": []})
    assert r.status_code in (400, 404) and "swap" in r.json()["error"], r.text


def test_a_sequence_that_spans_a_reload_is_told_to_start_again_never_reset_silently(repo_copy, start_server):
    """The sequence's state lives with the version that held it: after a reload, a request of a
    sequence begun before it gets Triton's START-flag error over both protocols (never a sum
    quietly restarted from zero), and a sequence begun after it accumulates as usual."""
    repo = repo_copy(["accumulate"])
    srv = start_server(repo, args=["--model-control-mode=explicit", "--load-model=accumulate"])
    http, grpc = srv.client, grpcclient.InferenceServerClient(srv.grpc_url)

    def turn(client, module, value, sid, start=False):
        t = module.InferInput("INPUT", [1, 1], "INT32")
        t.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        r = client.infer("accumulate", [t], sequence_id=sid, sequence_start=start)
        return int(r.as_numpy("OUTPUT")[0][0])

    clients = [(http, httpclient, 11), (grpc, grpcclient, 12)]
    for client, module, sid in clients:
        assert turn(client, module, 5, sid, start=True) == 5
        assert turn(client, module, 2, sid) == 7
    config = repo / "accumulate" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_sequence_idle_microseconds: 5000000",
                                                 "max_sequence_idle_microseconds: 6000000"))
    assert srv.post("/v2/repository/models/accumulate/load").status_code == 200
    for client, module, sid in clients:
        try:
            turn(client, module, 1, sid)
            raise AssertionError(f"sequence {sid} went on after the reload")
        except InferenceServerException as e:
            assert "must specify the START flag on the first request of the sequence" in e.message(), e
            assert str(sid) in e.message(), e
        # Begun again, it accumulates on the new version from its own start.
        assert turn(client, module, 4, sid, start=True) == 4
        assert turn(client, module, 3, sid) == 7
