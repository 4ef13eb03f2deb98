"""The dynamic batcher's queue policies through the real server: a full queue answers
"unavailable" at once, queue timeouts reject (or may be overridden per request), and higher
priority requests are served first."""
import threading
import time

import pytest
import requests

from helpers import identity_config

SLOW = identity_config("slowq", max_batch_size=4, delay_ms=400, extra="""\
dynamic_batching {
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { max_queue_size: 2 }
  priority_queue_policy {
    key: 1
    value: { timeout_action: REJECT default_timeout_microseconds: 200000 allow_timeout_override: true }
  }
}
""")


@pytest.fixture
def srv(start_server, tmp_path):
    repo = tmp_path / "q"
    (repo / "slowq" / "1").mkdir(parents=True)
    (repo / "slowq" / "config.pbtxt").write_text(SLOW)
    return start_server(repo)


def body(value, width, **params):
    return {"parameters": params, "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, width], "data": [value] * width}]}


def post_async(srv, results, key, payload):
    def run():
        r = requests.post(f"{srv.base}/v2/models/slowq/infer", json=payload, timeout=30)
        results[key] = (r.status_code, r.json(), time.monotonic())
    t = threading.Thread(target=run)
    t.start()
    return t


def test_full_queue_is_refused_at_once(srv):
    results = {}
    # Different widths never batch together: one runs, two fill the default level's queue.
    threads = [post_async(srv, results, k, body(k, k + 1)) for k in range(3)]
    time.sleep(0.2)
    started = time.monotonic()
    r = requests.post(f"{srv.base}/v2/models/slowq/infer", json=body(9, 9), timeout=30)
    assert time.monotonic() - started < 0.3
    assert r.status_code == 503 and r.json()["error"] == "Exceeds maximum queue size", r.text
    for t in threads:
        t.join()
    assert all(code == 200 for code, _, _ in results.values()), results


def test_queue_timeout_rejects_and_request_timeout_overrides(srv):
    results = {}
    busy = post_async(srv, results, "busy", body(1, 1))
    time.sleep(0.1)
    # Level 1: the default 200 ms queue timeout runs out behind the 400 ms execution...
    short = post_async(srv, results, "short", body(2, 2, priority=1))
    # ...unless the request allows itself longer (allow_timeout_override).
    long = post_async(srv, results, "long", body(3, 3, priority=1, timeout=5_000_000))
    for t in (busy, short, long):
        t.join()
    assert results["busy"][0] == 200
    assert results["short"][0] == 503 and results["short"][1]["error"] == "Request timeout expired", results["short"]
    assert results["long"][0] == 200


def test_higher_priority_is_served_first(srv):
    results = {}
    busy = post_async(srv, results, "busy", body(1, 1))
    time.sleep(0.1)
    low = post_async(srv, results, "low", body(2, 2, priority=2))
    time.sleep(0.05)
    high = post_async(srv, results, "high", body(3, 3, priority=1, timeout=5_000_000))
    for t in (busy, low, high):
        t.join()
    assert all(results[k][0] == 200 for k in results), results
    assert results["high"][2] < results["low"][2], "the later, higher-priority request finished first"


OVERLOAD = identity_config("busy", max_batch_size=1, delay_ms=200,
                           extra="dynamic_batching { default_queue_policy { max_queue_size: 4 } }\n")


def test_overload_is_refused_at_once_over_both_protocols_and_memory_stays_flat(start_server, tmp_path):
    """32 clients (HTTP and gRPC) hammer a model that runs one 200 ms request at a time with
    room for 4 queued: the queue never holds more (the scheduler's mailbox no more than the
    clients in flight), the rest get Triton's "Exceeds maximum queue
    size" at once (503 / UNAVAILABLE), every answer is checked, and the server's RSS in the
    second half of the run does not grow over the first."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    repo = tmp_path / "overload"
    (repo / "busy" / "1").mkdir(parents=True)
    (repo / "busy" / "config.pbtxt").write_text(OVERLOAD)
    srv = start_server(repo)
    data = np.arange(4096, dtype=np.float32).reshape(1, 4096)
    payload = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4096], "data": data.ravel().tolist()}]}
    stop = threading.Event()
    lock = threading.Lock()
    seen = {"http": {}, "grpc": {}}
    refused_s, unexpected, most = [], [], {"tritium_scheduler_queue_length": 0, "tritium_scheduler_mailbox_depth": 0}

    def count(proto, outcome, took=None):
        with lock:
            seen[proto][outcome] = seen[proto].get(outcome, 0) + 1
            if took is not None:
                refused_s.append(took)

    def http_client():
        s = requests.Session()
        while not stop.is_set():
            t = time.monotonic()
            r = s.post(f"{srv.base}/v2/models/busy/infer", json=payload, timeout=30)
            if r.status_code == 200 and r.json()["outputs"][0]["data"] == payload["inputs"][0]["data"]:
                count("http", 200)
            elif r.status_code == 503 and r.json() == {"error": "Exceeds maximum queue size"}:
                count("http", 503, time.monotonic() - t)
            else:
                unexpected.append(("http", r.status_code, r.text[:200]))

    def grpc_client():
        c = grpcclient.InferenceServerClient(srv.grpc_url)
        x = grpcclient.InferInput("INPUT0", [1, 4096], "FP32")
        x.set_data_from_numpy(data)
        while not stop.is_set():
            t = time.monotonic()
            try:
                ok = np.array_equal(c.infer("busy", [x]).as_numpy("OUTPUT0"), data)
                count("grpc", 200) if ok else unexpected.append(("grpc", "wrong answer"))
            except InferenceServerException as e:
                if e.status() == "StatusCode.UNAVAILABLE" and e.message() == "Exceeds maximum queue size":
                    count("grpc", "UNAVAILABLE", time.monotonic() - t)
                else:
                    unexpected.append(("grpc", e.status(), e.message()))
        c.close()

    def watch_pending():
        while not stop.is_set():
            for line in requests.get(srv.metrics_url, timeout=10).text.splitlines():
                name = line.split("{")[0]
                if name in most and 'model="busy"' in line:
                    most[name] = max(most[name], float(line.split()[-1]))
            time.sleep(0.05)

    def rss_mib():
        for line in open(f"/proc/{srv.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    threads = [threading.Thread(target=f) for f in [http_client] * 16 + [grpc_client] * 16 + [watch_pending]]
    for t in threads:
        t.start()
    try:
        time.sleep(6)
        half = rss_mib()
        time.sleep(6)
        end = rss_mib()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not unexpected, unexpected[:5]
    assert seen["http"].get(200, 0) + seen["grpc"].get(200, 0) >= 20, seen
    assert seen["http"].get(503, 0) > 100 and seen["grpc"].get("UNAVAILABLE", 0) > 100, seen
    assert sorted(refused_s)[len(refused_s) // 2] < 0.2, "refusals come at once, not after a turn in the queue"
    # The queue never holds more than max_queue_size; what waits in the scheduler's mailbox to
    # be refused is bounded by the clients in flight (32), not growing.
    assert most["tritium_scheduler_queue_length"] <= 4, most
    assert most["tritium_scheduler_mailbox_depth"] <= 32, most
    assert end - half < 16, f"RSS grew from {half:.0f} to {end:.0f} MiB under steady overload"
    assert requests.post(f"{srv.base}/v2/models/busy/infer", json=payload, timeout=30).status_code == 200
