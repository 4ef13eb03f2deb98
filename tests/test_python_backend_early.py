"""A non-decoupled request's one response reaches the client when the backend sends it
(`TRITONBACKEND_ResponseSend` with the final flag), before the backend's `execute` returns, as
in Triton 2.51 (same Python backend library, same model.py, real Triton from the wheel beside
Tritium). The instance stays busy until `execute` returns: the next request waits for it. The
model's statistics count the request once `execute` returned, with the backend's own times.

The model sends its response through the response sender (allowed for a non-decoupled model
since Triton 23.10: exactly one response, with the final flag) and then sleeps in `execute`.
"""
import shutil
import threading
import time

import numpy as np
import pytest
import requests

from helpers import Server, wait_until
from test_python_backend import Triton, infer, stub_env

SLEEP_S = 1.0

CONFIG = """name: "answer_then_sleep"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

MODEL_PY = f"""import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        time.sleep({SLEEP_S})
        return None
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("early_answer")
    model = base / "models" / "answer_then_sleep"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL_PY)
    tritium = Server(base / "models", log_dir=base, env=stub_env()).start(timeout=120)
    triton = Triton(base / "models", base)
    yield {"tritium": tritium, "triton": triton}
    triton.stop()
    assert tritium.stop() == 0, tritium.log_tail()


def stats(srv) -> dict:
    s = requests.get(f"http://{srv.http_url}/v2/models/answer_then_sleep/stats", timeout=5).json()
    return s["model_stats"][0]


def timed(srv, protocol, value):
    """(seconds to the answer, outputs) of one request."""
    url = srv.http_url if protocol == "http" else srv.grpc_url
    started = time.monotonic()
    got, error = infer(url, protocol, "answer_then_sleep", [("IN", np.full(2, value, np.float32), "FP32")])
    assert error is None, error
    return time.monotonic() - started, got


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_answer_goes_out_when_sent_and_the_next_request_waits_for_execute(servers, protocol):
    for name, srv in servers.items():
        before = int(stats(srv)["inference_count"])
        started = time.monotonic()
        first, got = timed(srv, protocol, 3.0)
        np.testing.assert_array_equal(got["OUT"], np.full(2, 6.0, np.float32))
        assert first < SLEEP_S * 0.6, f"{name}: the answer came {first:.3f} s after the request, after execute"
        # The instance is busy until execute returns: the next request waits for it.
        second, got = timed(srv, protocol, 4.0)
        np.testing.assert_array_equal(got["OUT"], np.full(2, 8.0, np.float32))
        assert time.monotonic() - started >= SLEEP_S, f"{name}: the second request ran before execute returned"
        assert second >= SLEEP_S * 0.3, name
        # Both counted once their executions returned (the second's within its sleep).
        def counted():
            s = stats(srv)
            return int(s["inference_count"]) == before + 2 and s
        s = wait_until(counted, timeout=SLEEP_S * 3, what=f"{name}'s statistics")
        assert int(s["inference_stats"]["success"]["count"]) == before + 2, name


def test_statistics_read_after_an_answer_include_it_once_execute_returns(servers):
    """A request answered before its `execute` returned is counted when `execute` returns (the
    backend reports its statistics then); a reader of the statistics waits for that only
    briefly, so while the backend runs on (here a second) they do not count it yet."""
    srv = servers["tritium"]
    before = int(stats(srv)["inference_count"])
    done = threading.Event()

    def one():
        timed(srv, "http", 1.0)
        done.set()

    threading.Thread(target=one).start()
    assert done.wait(SLEEP_S * 0.6), "answered before execute returned"
    during = stats(srv)
    assert int(during["inference_count"]) == before, "counted only once execute returns"
    wait_until(lambda: int(stats(srv)["inference_count"]) == before + 1, timeout=SLEEP_S * 3,
               what="the request counted")
