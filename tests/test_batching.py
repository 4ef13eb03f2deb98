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
