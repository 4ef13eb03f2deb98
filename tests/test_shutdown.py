"""Graceful shutdown, as Triton does it: on SIGTERM/SIGINT the listeners close, requests already
in flight finish normally, models unload, and the process exits 0."""
import signal
import threading
import time

import pytest
import requests

from helpers import Server, identity_config

SLOW_CONFIG = identity_config("slow", count=2, delay_ms=1500)


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


def test_during_shutdown_not_ready_and_new_infers_refused_while_in_flight_finish(start_server, tmp_path):
    """Between SIGTERM and exit, while a slow request is still running: readiness is false (or
    the connection is refused) and a new infer is refused, on a new connection and on one opened
    before the signal; the in-flight request still answers 200 with its data."""
    srv = start_server(slow_repo(tmp_path))
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [4.0, 5.0]}]}
    kept = requests.Session()  # a keep-alive connection opened before the signal
    assert kept.get(f"{srv.base}/v2/health/ready", timeout=5).status_code == 200
    result = []
    in_flight = threading.Thread(target=lambda: result.append(
        requests.post(f"{srv.base}/v2/models/slow/infer", json=body, timeout=30)))
    in_flight.start()
    time.sleep(0.4)  # executing now (1.5 s)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert in_flight.is_alive(), "the slow request is still in flight during these checks"

    def refused(call):
        """The status code, or None when the connection is refused or dropped."""
        try:
            return call().status_code
        except requests.ConnectionError:
            return None

    checks = {
        "ready (new connection)": refused(lambda: requests.get(f"{srv.base}/v2/health/ready", timeout=5)),
        "ready (kept connection)": refused(lambda: kept.get(f"{srv.base}/v2/health/ready", timeout=5)),
        "infer (new connection)": refused(lambda: requests.post(f"{srv.base}/v2/models/slow/infer", json=body, timeout=5)),
        "infer (kept connection)": refused(lambda: kept.post(f"{srv.base}/v2/models/slow/infer", json=body, timeout=5)),
    }
    assert in_flight.is_alive(), "the checks ran while the slow request was in flight"
    for what, status in checks.items():
        assert status is None or status >= 400, f"{what} answered {status} during shutdown: {checks}"
    in_flight.join()
    kept.close()
    assert srv.stop() == 0, srv.log_tail()
    assert result[0].status_code == 200, result[0].text
    assert result[0].json()["outputs"][0]["data"] == [4.0, 5.0]
