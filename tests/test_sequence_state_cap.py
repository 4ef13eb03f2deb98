"""`max_sequence_state_bytes`: the implicit state a model's sequences hold together is capped.
Past the cap the longest-idle sequence is evicted, its state dropped, and its next request is
refused with an error that says so (never a silent restart from zero); the others go on with
their state. The cap, the evictions and the bytes held are on /metrics."""
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from test_metrics import scrape

STATE_BYTES = 4  # the accumulator's state: one INT32
CAP = 2 * STATE_BYTES
LABELS = {"model": "acc_cap", "version": "1"}


@pytest.fixture
def srv(start_server, repo_copy):
    repo = repo_copy(["accumulate"])
    config = (repo / "accumulate" / "config.pbtxt").read_text().replace('name: "accumulate"', 'name: "acc_cap"')
    (repo / "acc_cap" / "1").mkdir(parents=True)
    (repo / "acc_cap" / "1" / "model.onnx").write_bytes((repo / "accumulate" / "1" / "model.onnx").read_bytes())
    (repo / "acc_cap" / "config.pbtxt").write_text(
        config + f'parameters {{ key: "max_sequence_state_bytes" value: {{ string_value: "{CAP}" }} }}\n')
    return start_server(repo, args=["--metrics-interval-ms", "100"])


def step(client, seq, v, start=False, end=False):
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    res = client.infer("acc_cap", [inp], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(res.as_numpy("OUTPUT")[0][0])


def metrics_when(srv, done, timeout=5.0):
    """The parsed /metrics once `done(metrics)` holds (the server refreshes them every 100 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(srv)
        if done(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.05)


def test_longest_idle_sequence_is_evicted_and_told_so(srv):
    c = srv.client
    m = scrape(srv)
    assert m["tritium_sequence_state_bytes_limit"].value(**LABELS) == CAP
    assert m["tritium_sequence_evictions_total"].type == "counter"
    assert m["tritium_sequence_evictions_total"].value(**LABELS) == 0

    assert step(c, 1, 1, start=True) == 1
    assert step(c, 2, 2, start=True) == 2
    assert step(c, 1, 10) == 11  # sequence 2 is now the longest idle
    m = metrics_when(srv, lambda m: m["tritium_sequence_state_bytes"].value(**LABELS) == CAP)
    assert m["tritium_sequence_state_bytes"].value(**LABELS) == CAP
    assert m["tritium_sequence_evictions_total"].value(**LABELS) == 0

    # A third sequence's state goes over the cap: sequence 2 is evicted, not 1 or 3.
    assert step(c, 3, 3, start=True) == 3
    m = metrics_when(srv, lambda m: m["tritium_sequence_evictions_total"].value(**LABELS) == 1)
    assert m["tritium_sequence_evictions_total"].value(**LABELS) == 1
    assert m["tritium_sequence_state_bytes"].value(**LABELS) == CAP
    assert m["tritium_sequence_active"].value(**LABELS) == 2

    # Its next turn is refused, saying why, over HTTP (400) and over gRPC.
    body = {"parameters": {"sequence_id": 2},
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [5]}]}
    r = srv.post("/v2/models/acc_cap/infer", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "sequence 2" in error and "evicted" in error and "max_sequence_state_bytes (8 bytes)" in error, error
    assert "START" in error, error
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[5]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        g.infer("acc_cap", [inp], sequence_id=2)
    assert "evicted" in info.value.message(), info.value.message()
    assert "INVALID_ARGUMENT" in str(info.value.status()), info.value.status()

    # The others carry on with their state.
    assert step(c, 1, 100) == 111
    assert step(c, 3, 4) == 7
    # A new START under the evicted ID is a new conversation, from zero; it evicts the
    # longest idle again (sequence 1, last active before 3).
    assert step(c, 2, 9, start=True) == 9
    m = metrics_when(srv, lambda m: m["tritium_sequence_evictions_total"].value(**LABELS) == 2)
    assert m["tritium_sequence_evictions_total"].value(**LABELS) == 2
    with pytest.raises(InferenceServerException) as info:
        step(c, 1, 1)
    assert "evicted" in info.value.message()
    assert step(c, 2, 1, end=True) == 10
    assert step(c, 3, 1, end=True) == 8
    m = metrics_when(srv, lambda m: m["tritium_sequence_state_bytes"].value(**LABELS) == 0)
    assert m["tritium_sequence_state_bytes"].value(**LABELS) == 0

