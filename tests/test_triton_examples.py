"""The protocol behaviour Triton's client examples (triton-inference-server/client,
src/python/examples) check, on the bundled repository for them (examples/triton_client_models/)
served by scripts/serve_examples.sh in its three launch configurations. The examples themselves
are not part of this repository; these tests send what they send and check what they check:
model names, tensor names and shapes, each model's arithmetic, and the model counts of the
repository index that the model-control examples require.
"""
import queue
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT, Server, tritium_bin

ALL_MODELS = ["densenet_onnx", "repeat_int32", "simple", "simple_dyna_sequence", "simple_identity", "simple_int8",
              "simple_sequence", "simple_string", "simple_string_dyna_sequence"]
VALUES = [11, 7, 5, 3, 2, 0, 1]


class ServedExamples(Server):
    """tritium started by scripts/serve_examples.sh CONFIG (with this build's binary)."""

    def __init__(self, config, log_dir):
        super().__init__(REPO_ROOT / "examples" / "triton_client_models", log_dir=log_dir)
        self.config = config

    def command(self):
        flags = super().command()[3:]  # the address and port flags, not --model-repository
        return ["env", f"TRITIUM_BIN={tritium_bin()}", "bash", str(REPO_ROOT / "scripts" / "serve_examples.sh"),
                self.config, *flags]


def serve(config, tmp_path_factory):
    return ServedExamples(config, tmp_path_factory.mktemp(config)).start()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = serve("all", tmp_path_factory)
    yield server
    assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def grpc_client(srv):
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    yield client
    client.close()


@pytest.fixture(params=["http", "grpc"])
def client(request, srv, grpc_client):
    if request.param == "http":
        return httpclient, srv.client
    return grpcclient, grpc_client


def infer(lib, client, model, tensors, outputs=None, **kw):
    inputs = []
    for name, datatype, array in tensors:
        t = lib.InferInput(name, list(array.shape), datatype)
        t.set_data_from_numpy(array)
        inputs.append(t)
    requested = [lib.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, inputs, outputs=requested, **kw)


def test_all_configuration_serves_every_example_model(srv):
    index = srv.index()
    assert [m["name"] for m in index] == ALL_MODELS
    assert all(m["state"] == "READY" for m in index), index


@pytest.mark.parametrize("model,dtype", [("simple", np.int32), ("simple_int8", np.int8)])
def test_simple_models_add_and_subtract(client, model, dtype):
    lib, c = client
    a = np.arange(16, dtype=dtype).reshape(1, 16)
    b = np.ones((1, 16), dtype=dtype)
    datatype = "INT32" if dtype == np.int32 else "INT8"
    result = infer(lib, c, model, [("INPUT0", datatype, a), ("INPUT1", datatype, b)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    meta = c.get_model_metadata(model)
    meta = meta if isinstance(meta, dict) else {"inputs": [{"name": i.name, "shape": list(i.shape)}
                                                          for i in meta.inputs]}
    assert [(i["name"], list(i["shape"])) for i in meta["inputs"]] == [("INPUT0", [-1, 16]), ("INPUT1", [-1, 16])]


def test_simple_explicit_int_contents(srv):
    """What grpc_explicit_int*_content_client.py send: int_contents, answered in raw outputs."""
    import grpc
    with grpc.insecure_channel(srv.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for model, datatype, dtype in [("simple", "INT32", np.int32), ("simple_int8", "INT8", np.int8)]:
            req = service_pb2.ModelInferRequest(model_name=model)
            for name, values in [("INPUT0", list(range(16))), ("INPUT1", [1] * 16)]:
                t = req.inputs.add(name=name, datatype=datatype, shape=[1, 16])
                t.contents.int_contents[:] = values
            req.outputs.add(name="OUTPUT0")
            req.outputs.add(name="OUTPUT1")
            resp = stub.ModelInfer(req)
            out = [np.frombuffer(raw, dtype=dtype) for raw in resp.raw_output_contents]
            assert out[0].tolist() == [i + 1 for i in range(16)] and out[1].tolist() == [i - 1 for i in range(16)]
        req = service_pb2.ModelInferRequest(model_name="simple_string")
        for name, values in [("INPUT0", [str(i).encode() for i in range(16)]), ("INPUT1", [b"1"] * 16)]:
            req.inputs.add(name=name, datatype="BYTES", shape=[1, 16]).contents.bytes_contents[:] = values
        resp = stub.ModelInfer(req)
        assert len(resp.raw_output_contents) == 2


def test_simple_string_adds_decimal_strings(client):
    lib, c = client
    a = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[b"1"] * 16], dtype=np.object_)
    result = infer(lib, c, "simple_string", [("INPUT0", "BYTES", a), ("INPUT1", "BYTES", b)])
    assert [int(x) for x in result.as_numpy("OUTPUT0")[0]] == [i + 1 for i in range(16)]
    assert [int(x) for x in result.as_numpy("OUTPUT1")[0]] == [i - 1 for i in range(16)]


def test_simple_identity_returns_bytes_unchanged(client):
    lib, c = client
    data = np.array([[b"hello", b"\x01\x02\x03", "é".encode()] * 4], dtype=np.object_)
    result = infer(lib, c, "simple_identity", [("INPUT0", "BYTES", data)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("element", ["he\x00llo".encode(), b"\x00\x01\x02\x03"])
def test_simple_identity_keeps_nul_bytes(client, element):
    """The string examples send elements holding NUL bytes to simple_identity (an ONNX string
    identity), and expect them back unchanged."""
    lib, c = client
    data = np.array([[element] * 16], dtype=np.object_)
    result = infer(lib, c, "simple_identity", [("INPUT0", "BYTES", data)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def run_sequence(lib, c, model, sequence_id, values):
    out = []
    for i, v in enumerate(values):
        r = infer(lib, c, model, [("INPUT", "INT32", np.full((1, 1), v, np.int32))], outputs=["OUTPUT"],
                  sequence_id=sequence_id, sequence_start=i == 0, sequence_end=i == len(values) - 1)
        out.append(int(r.as_numpy("OUTPUT")[0][0]))
    return out


def expected_plain(first, values):
    """simple_sequence: the first answer is its value plus one, the others their value."""
    return [first + 1] + values


def test_simple_sequence(client):
    lib, c = client
    offset = 0 if lib is httpclient else 100
    assert run_sequence(lib, c, "simple_sequence", 1000 + offset, [0] + VALUES) == expected_plain(0, VALUES)
    neg = [-v for v in VALUES]
    assert run_sequence(lib, c, "simple_sequence", 1001 + offset, [100] + neg) == expected_plain(100, neg)
    assert run_sequence(lib, c, "simple_sequence", f"seq-{lib.__name__}", [20] + neg) == expected_plain(20, neg)


def test_simple_dyna_sequences(client):
    """simple_dyna_sequence adds the correlation ID to the last answer; the string-ID model
    accumulates from its START value and adds the ID at the end."""
    lib, c = client
    offset = 0 if lib is httpclient else 100
    got = run_sequence(lib, c, "simple_dyna_sequence", 1010 + offset, [0] + VALUES)
    assert got == [1] + VALUES[:-1] + [VALUES[-1] + 1010 + offset]
    neg = [-v for v in VALUES]
    sid = str(1012 + offset)
    got = run_sequence(lib, c, "simple_string_dyna_sequence", sid, [20] + neg)
    want = list(np.cumsum([20] + neg))
    want[-1] += int(sid)
    assert got == want


def test_sequences_on_one_stream(srv):
    """What the sequence stream examples send: three sequences' requests back to back on one
    stream, answered per request id with the models' arithmetic."""
    answers = queue.Queue()
    neg = [-v for v in VALUES]
    sends = [("simple_dyna_sequence", 1020, [0] + VALUES), ("simple_dyna_sequence", 1021, [100] + neg),
             ("simple_string_dyna_sequence", "1022", [20] + neg)]
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        c.start_stream(callback=lambda result, error: answers.put(error or result))
        for model, sid, values in sends:
            for i, v in enumerate(values):
                t = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                t.set_data_from_numpy(np.full((1, 1), v, np.int32))
                c.async_stream_infer(model, [t], request_id=f"{sid}_{i}", sequence_id=sid, sequence_start=i == 0,
                                     sequence_end=i == len(values) - 1)
        got = {}
        for _ in range(sum(len(s[2]) for s in sends)):
            item = answers.get(timeout=30)
            assert not isinstance(item, InferenceServerException), item
            sid, step = item.get_response().id.split("_")
            got.setdefault(sid, {})[int(step)] = int(item.as_numpy("OUTPUT")[0][0])
        c.stop_stream()
    assert [got["1020"][i] for i in range(8)] == [1] + VALUES[:-1] + [1 + 1020]
    assert [got["1021"][i] for i in range(8)] == [101] + neg[:-1] + [-1 + 1021]
    want = list(np.cumsum([20] + neg))
    want[-1] += 1022
    assert [got["1022"][i] for i in range(8)] == want


def test_repeat_int32_streams_one_answer_per_element(srv):
    answers = queue.Queue()
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        c.start_stream(callback=lambda result, error: answers.put(error or result))
        inputs = []
        for name, datatype, array in [("IN", "INT32", np.arange(100, 110, dtype=np.int32)),
                                      ("DELAY", "UINT32", np.full(10, 10, np.uint32)),
                                      ("WAIT", "UINT32", np.array([10], np.uint32))]:
            t = grpcclient.InferInput(name, list(array.shape), datatype)
            t.set_data_from_numpy(array)
            inputs.append(t)
        c.async_stream_infer("repeat_int32", inputs, outputs=[grpcclient.InferRequestedOutput("OUT")])
        got = []
        for _ in range(10):
            item = answers.get(timeout=30)
            assert not isinstance(item, InferenceServerException), item
            got.append(item.as_numpy("OUT").tolist())
        c.stop_stream()
    assert got == [[v] for v in range(100, 110)]


def test_densenet_stand_in_has_densenets_interface(srv, grpc_client):
    meta = grpc_client.get_model_metadata("densenet_onnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("data_0", "FP32", [3, 224, 224])]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("fc6_1", "FP32", [1000])]
    import grpc
    with grpc.insecure_channel(srv.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        req = service_pb2.ModelInferRequest(model_name="densenet_onnx", id="my request id")
        req.inputs.add(name="data_0", datatype="FP32", shape=[3, 224, 224])
        req.outputs.add(name="fc6_1")
        req.raw_input_contents.append(b"a" * 602112)  # what grpc_client.py sends
        resp = stub.ModelInfer(req)
    assert resp.id == "my request id"
    assert [(o.name, list(o.shape)) for o in resp.outputs] == [("fc6_1", [1000])]
    assert len(resp.raw_output_contents[0]) == 4000


def check_model_control(lib, c):
    c.load_model("simple")
    assert c.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as info:
        c.load_model("simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert "failed to load" in info.value.message()
    c.load_model("simple", config='{"max_batch_size":"16"}')
    config = c.get_model_config("simple")
    assert (config["max_batch_size"] if isinstance(config, dict) else config.config.max_batch_size) == 16
    c.unload_model("simple")
    assert not c.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as info:
        c.load_model("wrong_model_name")
    assert "failed to load" in info.value.message()


def test_http_model_control_configuration(tmp_path_factory):
    """simple_http_model_control.py: explicit mode, exactly 7 models in the index."""
    server = serve("http-control", tmp_path_factory)
    try:
        names = [m["name"] for m in server.index()]
        assert names == [m for m in ALL_MODELS if m not in ("densenet_onnx", "repeat_int32")]
        assert all("state" not in m for m in server.index()), "explicit mode loads nothing at start"
        check_model_control(httpclient, server.client)
    finally:
        assert server.stop() == 0, server.log_tail()


def test_grpc_model_control_configuration(tmp_path_factory):
    """simple_grpc_model_control.py: explicit mode, exactly 8 models in the index, and a file
    parameter with a name longer than NAME_MAX is INTERNAL 'failed to poll from model
    repository' with the server still live."""
    server = serve("grpc-control", tmp_path_factory)
    try:
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            names = [m.name for m in c.get_model_repository_index().models]
            assert names == [m for m in ALL_MODELS if m != "densenet_onnx"]
            check_model_control(grpcclient, c)
            with pytest.raises(InferenceServerException) as info:
                c.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
            assert info.value.status() == "StatusCode.INTERNAL"
            assert "failed to poll from model repository" in info.value.message()
            assert c.is_server_live()
    finally:
        assert server.stop() == 0, server.log_tail()
