"""Built-in runtimes that hang inside one execution (issue 16, point 6): an ONNX model whose
`Loop` never ends, a TorchScript `while` loop that never ends and a TensorFlow `while_loop`
that never ends, each made here at test time, and each ending at once for a negative input.
A request with a `timeout` gets an error with a clear text within its timeout; the next
request is served; another model is not disturbed. ONNX Runtime and TensorFlow stop the run
themselves (the instance serves on, no restart); libtorch cannot be stopped, so its instance
is replaced (`tritium_instance_restarts_total` counts it) and the stuck thread is left to it.
A gRPC deadline alone stops the runs that can be stopped (ONNX Runtime, TensorFlow) and gives
no instance up. A request without either is not watched: it runs on the instance's thread, as
before."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import BUNDLED_REPO, REPO_ROOT, Server, wait_until

sys.path.insert(0, str(REPO_ROOT / "model_repository"))
from torchscript import module_source, write_archive  # noqa: E402

TF_PYTHON = REPO_ROOT / ".tensorflow" / "venv" / "bin" / "python"
TIMEOUT_US = 500_000
# Whether the fixture made the TensorFlow model: True, None (no TensorFlow here) or why not.
TF_MADE = None
# Generous on a shared 2-core machine: the answer comes at the timeout, not after this.
ANSWER_WITHIN_S = 8


def onnx_hang(path):
    """INPUT0 (INT64 [1]) counts up while it is >= 0: for ever from 0, at once when negative."""
    import onnx
    from onnx import TensorProto, helper
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
         helper.make_node("GreaterOrEqual", ["acc_out", "zero"], ["more"]),
         helper.make_node("Squeeze", ["more"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.INT64, [1])],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1]),
         helper.make_tensor("zero", TensorProto.INT64, [1], [0])])
    graph = helper.make_graph(
        [helper.make_node("GreaterOrEqual", ["INPUT0", "zero"], ["start"]),
         helper.make_node("Squeeze", ["start"], ["cond"]),
         helper.make_node("Loop", ["", "cond", "INPUT0"], ["OUTPUT0"], body=body)],
        "hang",
        [helper.make_tensor_value_info("INPUT0", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.INT64, [1])],
        [helper.make_tensor("zero", TensorProto.INT64, [1], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def torch_hang(path):
    source = module_source(
        "Hang", "INPUT__0: Tensor) -> Tensor",
        "    x = INPUT__0\n"
        "    while bool(torch.ge(torch.sum(x), 0)):\n"
        "      x = torch.add(x, 1)\n"
        "    return x\n")
    write_archive(str(path), "Hang", source)


TF_HANG = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf

class Hang(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1], tf.int64, name="x")])
    def serve(self, x):
        y = tf.while_loop(lambda v: tf.reduce_all(v >= 0), lambda v: v + 1, [x])[0]
        return {"y": y}

m = Hang()
tf.saved_model.save(m, sys.argv[1], signatures={"serving_default": m.serve})
"""


def config(name, platform, inputs, outputs, datatype="TYPE_INT64"):
    io = lambda names: ", ".join(f'{{ name: "{n}" data_type: {datatype} dims: [ 1 ] }}' for n in names)
    return (f'name: "{name}"\nplatform: "{platform}"\nmax_batch_size: 0\n'
            f"input [ {io(inputs)} ]\noutput [ {io(outputs)} ]\n"
            'instance_group [ { count: 1 kind: KIND_CPU } ]\n')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("hung")
    repo = base / "models"
    for name, platform, inputs, outputs, file, make in [
        ("onnx_hang", "onnxruntime_onnx", ["INPUT0"], ["OUTPUT0"], "model.onnx", onnx_hang),
        ("torch_hang", "pytorch_libtorch", ["INPUT__0"], ["OUTPUT__0"], "model.pt", torch_hang),
    ]:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config(name, platform, inputs, outputs))
        make(repo / name / "1" / file)
    global TF_MADE
    if TF_PYTHON.exists():
        (repo / "tf_hang" / "1").mkdir(parents=True)
        (repo / "tf_hang" / "config.pbtxt").write_text(config("tf_hang", "tensorflow_savedmodel", ["x"], ["y"]))
        # A failure here fails the TensorFlow test alone, with the reason.
        try:
            made = subprocess.run([str(TF_PYTHON), "-c", TF_HANG, str(repo / "tf_hang" / "1" / "model.savedmodel")],
                                  capture_output=True, text=True, timeout=300)
            TF_MADE = made.returncode == 0 or f"making tf_hang failed: {made.stderr[-2000:]}"
        except subprocess.TimeoutExpired:
            TF_MADE = "making tf_hang with TensorFlow took more than 300 s"
    import shutil
    shutil.copytree(BUNDLED_REPO / "add_sub", repo / "add_sub")
    # --exit-on-error=false: a binary without TensorFlow serves the others (tf_hang is skipped).
    srv = Server(repo, args=["--exit-on-error=false"], log_dir=base).start(wait_for="live", timeout=120)
    try:
        wait_until(lambda: all(srv.get(f"/v2/models/{m}/ready").status_code == 200
                               for m in ("onnx_hang", "torch_hang", "add_sub")), timeout=120, what="models ready")
        yield srv
    finally:
        srv.stop()


def infer(server, model, value, name="INPUT0", timeout_us=None):
    body = {"inputs": [{"name": name, "shape": [1], "datatype": "INT64", "data": [value]}]}
    if timeout_us is not None:
        body["parameters"] = {"timeout": timeout_us}
    return server.post(f"/v2/models/{model}/infer", json=body, timeout=60)


def restarts(server, model):
    lines = [line for line in requests.get(server.metrics_url).text.splitlines()
             if line.startswith("tritium_instance_restarts_total") and f'model="{model}"' in line]
    assert lines, f"no restart counter for {model}"
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def others_unaffected(server):
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
                       for n in ("INPUT0", "INPUT1")]}
    r = server.post("/v2/models/add_sub/infer", json=body)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [2.0] * 16, r.text


def hangs_then_serves(server, model, name, runtime_text):
    started = time.monotonic()
    r = infer(server, model, 0, name=name, timeout_us=TIMEOUT_US)
    took = time.monotonic() - started
    assert r.status_code == 503, r.text
    assert r.json()["error"] == runtime_text, r.text
    assert TIMEOUT_US / 1e6 * 0.9 <= took < ANSWER_WITHIN_S, took
    others_unaffected(server)


def test_an_onnx_loop_that_never_ends_is_stopped_at_the_request_timeout(server):
    hangs_then_serves(server, "onnx_hang", "INPUT0",
                      "model 'onnx_hang': the execution did not finish within the request's timeout; "
                      "ONNX Runtime stopped it and the instance serves on")
    r = infer(server, "onnx_hang", -3)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [-3], r.text
    assert restarts(server, "onnx_hang") == 0, "ONNX Runtime stopped the run: nothing to replace"


def test_a_watched_onnx_batch_answers_only_the_outputs_asked_for(server):
    """A batch with a timeout runs with run options the alarm can reach (every output computed,
    the ones asked for kept): the answer is the same as without a timeout."""
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": [float(i)] * 16}
                       for i, n in ((3, "INPUT0"), (1, "INPUT1"))],
            "outputs": [{"name": "OUTPUT1"}]}
    plain = server.post("/v2/models/add_sub/infer", json=body).json()["outputs"]
    body["parameters"] = {"timeout": 5_000_000}
    watched = server.post("/v2/models/add_sub/infer", json=body).json()["outputs"]
    assert watched == plain and [o["name"] for o in watched] == ["OUTPUT1"] and watched[0]["data"] == [2.0] * 16


def test_a_grpc_request_timeout_stops_an_onnx_loop_too(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("INPUT0", [1], "INT64")
    x.set_data_from_numpy(np.array([0], dtype=np.int64))
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as e:
        client.infer("onnx_hang", [x], timeout=TIMEOUT_US)
    assert time.monotonic() - started < ANSWER_WITHIN_S
    assert e.value.status() == "StatusCode.UNAVAILABLE", e.value
    assert "ONNX Runtime stopped it" in e.value.message(), e.value
    x.set_data_from_numpy(np.array([-7], dtype=np.int64))
    assert client.infer("onnx_hang", [x]).as_numpy("OUTPUT0").tolist() == [-7]
    client.close()


def test_a_grpc_deadline_alone_stops_an_onnx_loop_whose_client_has_gone(server):
    """No `timeout` parameter: the client's gRPC deadline ends its call, and ONNX Runtime stops
    the run then too, so the model's one instance is free for the next request at once."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("INPUT0", [1], "INT64")
    x.set_data_from_numpy(np.array([0], dtype=np.int64))
    with pytest.raises(InferenceServerException) as e:
        client.infer("onnx_hang", [x], client_timeout=TIMEOUT_US / 1e6)
    # The client's own timer, tonic's (CANCELLED "Timeout expired") and the server's alarm all
    # fire at the deadline: whichever answer arrives first wins.
    stopped = e.value.status() == "StatusCode.UNAVAILABLE" and "ONNX Runtime stopped it" in e.value.message()
    assert e.value.status() in ("StatusCode.DEADLINE_EXCEEDED", "StatusCode.CANCELLED") or stopped, e.value
    x.set_data_from_numpy(np.array([-9], dtype=np.int64))
    started = time.monotonic()
    assert client.infer("onnx_hang", [x], client_timeout=ANSWER_WITHIN_S).as_numpy("OUTPUT0").tolist() == [-9]
    assert time.monotonic() - started < ANSWER_WITHIN_S
    assert restarts(server, "onnx_hang") == 0
    client.close()


def test_a_tensorflow_while_loop_that_never_ends_is_stopped_at_the_request_timeout(server):
    if TF_MADE is not True and TF_MADE is not None:
        pytest.fail(TF_MADE)
    state = server.get("/v2/models/tf_hang/ready").status_code if TF_PYTHON.exists() else None
    if state != 200:
        if os.environ.get("CI") == "true":
            pytest.fail("CI has no TensorFlow (venv or backend) for tf_hang")
        pytest.skip("no TensorFlow here (scripts/install_tensorflow.sh, --features tensorflow)")
    hangs_then_serves(server, "tf_hang", "x",
                      "model 'tf_hang': the execution did not finish within the request's timeout; "
                      "TensorFlow stopped it and the instance serves on")
    r = infer(server, "tf_hang", -3, name="x")
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [-3], r.text
    assert restarts(server, "tf_hang") == 0, "TensorFlow stopped the run: nothing to replace"


def test_a_torchscript_loop_that_never_ends_fails_its_request_and_the_instance_is_replaced(server):
    # Last in the module: the stuck libtorch thread spins on until the server stops.
    r = infer(server, "torch_hang", -3, name="INPUT__0", timeout_us=5_000_000)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [-3], "a watched batch that returns is served"
    assert restarts(server, "torch_hang") == 0
    hangs_then_serves(server, "torch_hang", "INPUT__0",
                      "model 'torch_hang': the backend did not return from execute within the request's timeout; "
                      "the instance is replaced")
    wait_until(lambda: infer(server, "torch_hang", -4, name="INPUT__0").status_code == 200, timeout=60,
               what="the replaced instance answers")
    assert infer(server, "torch_hang", -4, name="INPUT__0").json()["outputs"][0]["data"] == [-4]
    assert restarts(server, "torch_hang") >= 1
    others_unaffected(server)
    r = infer(server, "onnx_hang", -5)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [-5], r.text
