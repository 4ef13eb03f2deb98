"""Sequence-aware drain: on SIGTERM a server that holds live sequences turns not-ready, refuses
new sequences (START) and requests outside any sequence with UNAVAILABLE (HTTP 503), keeps serving
the turns of its live sequences, and exits 0 once none is left (they ended or idled out) or when
--exit-timeout-secs runs out; /metrics and the log show the live and refused counts."""
import re
import signal
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import Server, copy_bundled_repo, wait_until


def value_input(proto, v):
    t = proto.InferInput("INPUT", [1, 1], "INT32")
    t.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    return t


def turn(client, proto, seq, v, start=False, end=False):
    res = client.infer("accumulate", [value_input(proto, v)], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(res.as_numpy("OUTPUT")[0][0])


def metric(srv, name):
    text = requests.get(srv.metrics_url, timeout=5).text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def start(tmp_path, idle_us=None, exit_timeout=20):
    repo = copy_bundled_repo(tmp_path / "models", ["accumulate", "identity_fp32"])
    if idle_us is not None:
        cfg = repo / "accumulate" / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace("max_sequence_idle_microseconds: 5000000",
                                               f"max_sequence_idle_microseconds: {idle_us}"))
    return Server(repo, log_dir=tmp_path, exit_timeout_secs=exit_timeout).start()


def test_drain_serves_live_sequences_refuses_new_ones_and_exits_when_they_end(tmp_path):
    srv = start(tmp_path)
    try:
        http = httpclient.InferenceServerClient(srv.http_url)
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        assert turn(http, httpclient, 11, 5, start=True) == 5
        assert turn(grpc, grpcclient, 12, 7, start=True) == 7
        assert metric(srv, "tritium_drain_active") == 0
        srv.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: requests.get(f"{srv.base}/v2/health/ready", timeout=2).status_code == 400,
                   what="not ready after SIGTERM")
        assert not grpc.is_server_ready()
        assert requests.get(f"{srv.base}/v2/health/live", timeout=2).status_code == 200
        # New sequences are refused with UNAVAILABLE, over HTTP and gRPC.
        with pytest.raises(InferenceServerException) as info:
            turn(http, httpclient, 13, 1, start=True)
        assert info.value.status() == "503" and "draining" in info.value.message()
        with pytest.raises(InferenceServerException) as info:
            turn(grpc, grpcclient, 14, 1, start=True)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        # So are requests outside any sequence.
        r = srv.post("/v2/models/identity_fp32/infer",
                     {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]})
        assert r.status_code == 503, r.text
        # The live sequences go on, with their state.
        assert turn(http, httpclient, 11, 6) == 11
        assert turn(grpc, grpcclient, 12, 1) == 8
        assert metric(srv, "tritium_drain_active") == 1
        assert metric(srv, "tritium_drain_live_sequences") == 2
        assert metric(srv, 'tritium_drain_refused_total{kind="sequence_start"}') == 2
        assert metric(srv, 'tritium_drain_refused_total{kind="stateless"}') == 1
        assert turn(http, httpclient, 11, 1, end=True) == 12
        time.sleep(0.5)
        assert srv.alive(), "one sequence is still live"
        assert turn(grpc, grpcclient, 12, 2, end=True) == 10
        ended = time.monotonic()
        srv.proc.wait(timeout=10)
        assert time.monotonic() - ended < 5, "it exits soon after the last sequence ends (the exit timeout is 20 s)"
        assert srv.stop() == 0, srv.log_tail()
        log = srv.log_tail(20000)
        assert "draining: 2 live sequence(s)" in log, log
        assert "drain done: refused 2 sequence start(s) and 1 request(s) outside a sequence" in log, log
    finally:
        srv.kill()


def test_idle_sequences_end_the_drain_when_they_idle_out(tmp_path):
    srv = start(tmp_path, idle_us=2_000_000)
    try:
        http = httpclient.InferenceServerClient(srv.http_url)
        assert turn(http, httpclient, 21, 1, start=True) == 1
        sent = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(timeout=15)
        took = time.monotonic() - sent
        assert 1.5 < took < 10, f"exited {took:.1f}s after SIGTERM: the sequence idles out after 2 s (exit timeout 20 s)"
        assert srv.stop() == 0, srv.log_tail()
        assert "drain done" in srv.log_tail(20000)
    finally:
        srv.kill()


def test_the_exit_timeout_cuts_the_drain_short(tmp_path):
    srv = start(tmp_path, idle_us=120_000_000, exit_timeout=2)
    try:
        http = httpclient.InferenceServerClient(srv.http_url)
        assert turn(http, httpclient, 31, 1, start=True) == 1
        sent = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(timeout=15)
        took = time.monotonic() - sent
        assert took < 8, f"exited {took:.1f}s after SIGTERM with --exit-timeout-secs 2 (the idle timeout is 120 s)"
        assert srv.stop() == 0, srv.log_tail()
        assert "drain cut short by --exit-timeout-secs with 1 live sequence(s)" in srv.log_tail(20000)
    finally:
        srv.kill()
