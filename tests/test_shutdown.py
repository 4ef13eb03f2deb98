"""Graceful shutdown, as Triton does it: on SIGTERM/SIGINT the listeners close, requests already
in flight finish normally, models unload, and the process exits 0."""
import signal
import threading
import time

import pytest
import requests

from helpers import Server

SLOW_CONFIG = """
name: "slow"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "execute_delay_ms" value: { string_value: "1500" } }
"""


def slow_repo(tmp_path):
    repo = tmp_path / "slow_repo"
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    return repo


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_in_flight_requests_finish_then_exit_0(start_server, tmp_path, sig):
    srv = start_server(slow_repo(tmp_path))
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [1.0, 2.0, 3.0]}]}
    results = []

    def call():
        try:
            r = requests.post(f"{srv.base}/v2/models/slow/infer", json=body, timeout=30)
            results.append((r.status_code, r.json()))
        except requests.RequestException as e:  # pragma: no cover - the failure case
            results.append((None, str(e)))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # both requests are executing now
    started = time.monotonic()
    srv.proc.send_signal(sig)
    for t in threads:
        t.join()
    code = srv.stop()
    assert code == 0, srv.log_tail()
    assert time.monotonic() - started < 10, "shutdown waited only for the in-flight requests"
    assert [s for s, _ in results] == [200, 200], results
    assert all(b["outputs"][0]["data"] == [1.0, 2.0, 3.0] for _, b in results)
    # New connections are refused once it is gone.
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{srv.base}/v2/health/live", timeout=2)


def test_exit_timeout_bounds_the_wait(tmp_path):
    repo = slow_repo(tmp_path)
    cfg = repo / "slow" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"1500"', '"8000"'))
    srv = Server(repo, log_dir=tmp_path, exit_timeout_secs=1).start()
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}

    def call():
        try:
            requests.post(f"{srv.base}/v2/models/slow/infer", json=body, timeout=30)
        except requests.RequestException:
            pass  # the server may drop it when the exit timeout runs out

    threading.Thread(target=call, daemon=True).start()
    time.sleep(0.5)
    started = time.monotonic()
    try:
        code = srv.stop()
    finally:
        srv.kill()
    assert code == 0, srv.log_tail()
    assert time.monotonic() - started < 6, "an exit timeout of 1 s is honoured"
