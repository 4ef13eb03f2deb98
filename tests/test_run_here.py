"""A lone request runs its batch on the frontend thread that received it only while that thread
serves one client alone (`src/frontends/alone.rs`). A thread that ran batches for many clients
read nothing else meanwhile and fell into a loop of batches of one: with one HTTP worker, every
request of a concurrent load ran on the worker, and no batch ever formed.

The actor tree's `here` counts the batches run on the submitting thread (of `direct`)."""

import os
import threading
import time

import numpy as np
import requests
import tritonclient.grpc as grpcclient

from helpers import copy_bundled_repo, Server

INPUTS = {"inputs": [
    {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16},
]}


def scheduler(srv):
    tree = requests.get(f"http://127.0.0.1:{srv.metrics_port}/v2/actors?model=add_sub", timeout=10).json()
    for m in tree["models"]:
        if m["name"] == "add_sub":
            return m["scheduler"]
    raise AssertionError(f"add_sub not in the actor tree: {tree}")


def infer(session, srv):
    r = session.post(f"{srv.base}/v2/models/add_sub/infer", json=INPUTS, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [3.0] * 16


def quiet():
    """Past the window in which another connection's request makes a thread mixed."""
    time.sleep(0.05)


def test_one_http_worker_runs_batches_for_one_client_only(tmp_path):
    repo = copy_bundled_repo(tmp_path / "models", ["add_sub"])
    srv = Server(repo, args=["--http-thread-count", "1"], log_dir=tmp_path).start()
    try:
        lone = requests.Session()
        for _ in range(5):  # the first execution, unmeasured, runs on the instance's thread
            infer(lone, srv)
        quiet()
        before = scheduler(srv)["here"]
        for _ in range(20):
            infer(lone, srv)
        # Most, not all: one slow execution (a busy machine) sends the next few to the instance's
        # thread until the recent average is short again.
        assert scheduler(srv)["here"] - before >= 15, "a lone client's requests run on the worker"

        # Two clients taking turns on the one worker: none runs there.
        other = requests.Session()
        before = scheduler(srv)["here"]
        for _ in range(10):
            infer(lone, srv)
            infer(other, srv)
        ran_here = scheduler(srv)["here"] - before
        # At most the first, and any that came after a pause of over 10 ms between the two.
        assert ran_here <= 5, f"{ran_here} of 20 alternating requests ran on the worker"

        # A concurrent load of four clients: before, every request ran on the worker.
        quiet()
        start = threading.Barrier(4)
        failures = []

        def client():
            try:
                s = requests.Session()
                start.wait()
                for _ in range(50):
                    infer(s, srv)
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(e)

        before = scheduler(srv)
        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        after = scheduler(srv)
        ran_here = after["here"] - before["here"]
        assert after["items"] - before["items"] == 200
        assert ran_here <= 20, f"{ran_here} of 200 concurrent requests ran on the worker"

        # Alone again once the window has passed.
        quiet()
        before = scheduler(srv)["here"]
        for _ in range(10):
            infer(lone, srv)
        assert scheduler(srv)["here"] - before >= 7
    finally:
        assert srv.stop() == 0, srv.log_tail()


def test_grpc_threads_shared_by_clients_run_no_batch_themselves(tmp_path):
    """gRPC connections go to the serving threads in turn, one per core: twice as many clients
    as threads, taking turns, leave each thread two clients, and nothing runs on them."""
    repo = copy_bundled_repo(tmp_path / "models", ["add_sub"])
    srv = Server(repo, log_dir=tmp_path).start()
    try:
        url = f"127.0.0.1:{srv.grpc_port}"

        def one(client):
            inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
            inputs[0].set_data_from_numpy(np.ones((1, 16), np.float32))
            inputs[1].set_data_from_numpy(np.full((1, 16), 2.0, np.float32))
            out = client.infer("add_sub", inputs).as_numpy("OUTPUT0")
            assert (out == 3.0).all()

        lone = grpcclient.InferenceServerClient(url)
        for _ in range(5):
            one(lone)
        quiet()
        before = scheduler(srv)["here"]
        for _ in range(20):
            one(lone)
        assert scheduler(srv)["here"] - before >= 15, "a lone client's calls run on its connection's thread"

        threads = len(os.sched_getaffinity(0))
        # Channels to one address share one connection unless each keeps its own.
        own = [("grpc.use_local_subchannel_pool", 1)]
        clients = [grpcclient.InferenceServerClient(url, channel_args=own) for _ in range(2 * threads)]
        for c in clients:  # each connects in turn, so each serving thread gets two
            one(c)
        before = scheduler(srv)["here"]
        for _ in range(5):
            for c in clients:
                one(c)
        ran_here = scheduler(srv)["here"] - before
        assert ran_here <= 5, f"{ran_here} of {10 * threads} calls ran on a shared thread"
        for c in [lone] + clients:
            c.close()
    finally:
        assert srv.stop() == 0, srv.log_tail()
