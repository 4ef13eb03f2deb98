"""The error texts clients match on begin with Triton's own, over HTTP and gRPC, with Triton's
status codes. Each expected text below is what Triton 2.51 answered to the same request
(recorded with the `tritonserver` of nvidia-pytriton 0.7.0 on models of the same shape; see
docs/triton-reference.md); where Tritium adds its own detail, the test checks that Triton's text
comes first. The models are those of Triton's client examples (examples/triton_client_models/,
`simple`: INT32 INPUT0/INPUT1 [16] -> OUTPUT0/OUTPUT1, max_batch_size 8).
"""
import base64
import json
import os
import tempfile
from pathlib import Path
from urllib.parse import quote

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import EXAMPLES_REPO, Server, binary_request, copy_examples_repo, error_text

TAG = "[request id: <id_unknown>] "


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    base = tmp_path_factory.mktemp("error_texts")
    (core,) = copy_examples_repo(base, ("core",))
    server = Server(core, log_dir=base, args=["--model-control-mode", "explicit", "--load-model", "simple",
                                               "--load-model", "simple_sequence"]).start()
    yield server
    assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def stub(srv):
    channel = grpc.insecure_channel(srv.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def gclient(srv):
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    yield client
    client.close()


def ints(name, shape, value=1):
    return {"name": name, "datatype": "INT32", "shape": shape, "data": [value] * int(np.prod(shape))}


def http_infer(srv, inputs, model="simple", version=None, **extra):
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "") + "/infer"
    return srv.post(path, {"inputs": inputs, **extra})


def grpc_request(model="simple", version="", inputs=(("INPUT0", [1, 16]), ("INPUT1", [1, 16])), datatype="INT32"):
    req = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, shape in inputs:
        t = req.inputs.add(name=name, datatype=datatype, shape=shape)
        t.contents.int_contents[:] = [1] * int(np.prod(shape))
        if datatype == "FP32":
            t.ClearField("contents")
            t.contents.fp32_contents[:] = [1.0] * int(np.prod(shape))
    return req


def grpc_error(call, *args):
    with pytest.raises(grpc.RpcError) as info:
        call(*args)
    return info.value.code(), info.value.details()


def both(srv, stub, http_response, grpc_req):
    """(HTTP status, HTTP text), (gRPC code, gRPC text) of one request sent both ways."""
    return (http_response.status_code, error_text(http_response)), grpc_error(stub.ModelInfer, grpc_req)


OK_INPUTS = [ints("INPUT0", [1, 16]), ints("INPUT1", [1, 16])]


def test_unknown_model(srv, stub):
    (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, OK_INPUTS, model="nope"), grpc_request(model="nope"))
    assert (hs, gc) == (404, grpc.StatusCode.NOT_FOUND)
    assert ht == gt == "Request for unknown model: 'nope' is not found"


def test_unknown_version(srv, stub):
    (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, OK_INPUTS, version=7), grpc_request(version="7"))
    assert (hs, gc) == (404, grpc.StatusCode.NOT_FOUND)
    assert ht == gt == "Request for unknown model: 'simple' version 7 is not found"


@pytest.mark.parametrize("call", ["ModelInfer", "ModelMetadata", "ModelReady", "ModelConfig", "ModelStatistics"])
def test_version_string_not_an_integer_grpc(stub, call):
    """grpc_explicit_int8_content_client.py matches this text; every RPC that takes a version
    answers it (INVALID_ARGUMENT)."""
    req = {
        "ModelInfer": lambda: grpc_request(version="wrong_specification"),
        "ModelMetadata": lambda: service_pb2.ModelMetadataRequest(name="simple", version="wrong_specification"),
        "ModelReady": lambda: service_pb2.ModelReadyRequest(name="simple", version="wrong_specification"),
        "ModelConfig": lambda: service_pb2.ModelConfigRequest(name="simple", version="wrong_specification"),
        "ModelStatistics": lambda: service_pb2.ModelStatisticsRequest(name="simple", version="wrong_specification"),
    }[call]()
    code, text = grpc_error(getattr(stub, call), req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert text.startswith("failed to get model version from specified version string 'wrong_specification'"), text


def test_version_string_not_an_integer_http(srv):
    """Triton's HTTP routes take digits only (404); Tritium says why, with gRPC's text."""
    for path in ["/v2/models/simple/versions/abc", "/v2/models/simple/versions/abc/config"]:
        r = srv.get(path)
        assert r.status_code == 404, r.text
        assert error_text(r).startswith("failed to get model version from specified version string 'abc'")
    r = http_infer(srv, OK_INPUTS, version="abc")
    assert r.status_code == 404
    assert error_text(r).startswith("failed to get model version from specified version string 'abc'")


def test_negative_version(srv, stub):
    code, text = grpc_error(stub.ModelInfer, grpc_request(version="-3"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert text.startswith("invalid model version specified '-3'"), text
    r = srv.get("/v2/models/simple/versions/-3")
    assert r.status_code == 404
    assert error_text(r).startswith("invalid model version specified '-3'")


def test_wrong_input_name(srv, stub):
    (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, [OK_INPUTS[0], ints("INPUTX", [1, 16])]),
                              grpc_request(inputs=(("INPUT0", [1, 16]), ("INPUTX", [1, 16]))))
    assert (hs, gc) == (400, grpc.StatusCode.INVALID_ARGUMENT)
    assert ht == gt == "unexpected inference input 'INPUTX' for model 'simple'"


def test_missing_input(srv, stub):
    (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, OK_INPUTS[:1]), grpc_request(inputs=(("INPUT0", [1, 16]),)))
    assert (hs, gc) == (400, grpc.StatusCode.INVALID_ARGUMENT)
    assert ht == gt == (TAG + "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
                        "but missing required input(s) ['INPUT1']. Please provide all required input(s).")


def test_too_many_inputs(srv, stub):
    (hs, ht), (gc, gt) = both(
        srv, stub, http_infer(srv, OK_INPUTS + [ints("EXTRA", [1, 16])]),
        grpc_request(inputs=(("INPUT0", [1, 16]), ("INPUT1", [1, 16]), ("EXTRA", [1, 16]))))
    assert (hs, gc) == (400, grpc.StatusCode.INVALID_ARGUMENT)
    for text in (ht, gt):
        assert text.startswith(TAG + "expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) ["), text


def test_wrong_datatype(srv, stub):
    fp32 = {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}
    req = grpc_request()
    req.inputs[1].datatype = "FP32"
    req.inputs[1].ClearField("contents")
    req.inputs[1].contents.fp32_contents[:] = [1.0] * 16
    (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, [OK_INPUTS[0], fp32]), req)
    assert (hs, gc) == (400, grpc.StatusCode.INVALID_ARGUMENT)
    assert ht == gt == TAG + "inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'"


def test_wrong_shape(srv, stub):
    (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, [OK_INPUTS[0], ints("INPUT1", [1, 15])]),
                              grpc_request(inputs=(("INPUT0", [1, 16]), ("INPUT1", [1, 15]))))
    assert (hs, gc) == (400, grpc.StatusCode.INVALID_ARGUMENT)
    assert ht == gt == (
        TAG + "unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [1,15]. NOTE: Setting a "
        "non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. "
        "If you want to specify the full shape including the batch dim in your input dims config, try setting "
        "max_batch_size to zero. See the model configuration docs for more info on max_batch_size.")


def test_batch_too_large(srv, stub):
    (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, [ints("INPUT0", [9, 16]), ints("INPUT1", [9, 16])]),
                              grpc_request(inputs=(("INPUT0", [9, 16]), ("INPUT1", [9, 16]))))
    assert (hs, gc) == (400, grpc.StatusCode.INVALID_ARGUMENT)
    for text in (ht, gt):
        assert text.startswith(TAG + "inference request batch-size must be <= 8 for 'simple'"), text


def test_byte_size_mismatch(srv, stub):
    header = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
                         {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 60}}]}
    body, headers = binary_request(header, [b"\0" * 64, b"\0" * 60])
    r = srv.post("/v2/models/simple/infer", body, headers=headers)
    req = service_pb2.ModelInferRequest(model_name="simple")
    req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    req.raw_input_contents.extend([b"\0" * 64, b"\0" * 60])
    (hs, ht), (gc, gt) = both(srv, stub, r, req)
    assert (hs, gc) == (400, grpc.StatusCode.INVALID_ARGUMENT)
    assert ht == gt == TAG + "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60"


def test_request_tag_names_the_request_id(srv, stub):
    r = http_infer(srv, OK_INPUTS[:1], id="req-9")
    req = grpc_request(inputs=(("INPUT0", [1, 16]),))
    req.id = "req-9"
    (_, ht), (_, gt) = both(srv, stub, r, req)
    for text in (ht, gt):
        assert text.startswith("[request id: req-9] expected 2 inputs but got 1 inputs"), text


def test_sequence_without_correlation_id(srv, gclient):
    r = http_infer(srv, [ints("INPUT", [1, 1])], model="simple_sequence")
    assert r.status_code == 400
    want = "inference request to model 'simple_sequence' must specify a non-zero or non-empty correlation ID"
    assert error_text(r) == want
    x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    x.set_data_from_numpy(np.ones((1, 1), np.int32))
    with pytest.raises(InferenceServerException) as info:
        gclient.infer("simple_sequence", [x])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == want


def test_sequence_without_start(srv, gclient):
    r = http_infer(srv, [ints("INPUT", [1, 1])], model="simple_sequence", parameters={"sequence_id": 77})
    assert r.status_code == 400
    assert error_text(r) == ("inference request for sequence 77 to model 'simple_sequence' must specify the START "
                             "flag on the first request of the sequence")
    x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    x.set_data_from_numpy(np.ones((1, 1), np.int32))
    with pytest.raises(InferenceServerException) as info:
        gclient.infer("simple_sequence", [x], sequence_id=78)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == ("inference request for sequence 78 to model 'simple_sequence' must specify the "
                                    "START flag on the first request of the sequence")


POLL_FAILURE = "failed to load '{}', failed to poll from model repository"


def test_load_of_a_model_the_repository_lacks(srv, gclient):
    """Triton's text, but a client error where Triton 2.51 answers 500 / INTERNAL (issue 16: bad
    input gets a 4xx; the README's differences from Triton list it)."""
    r = srv.post("/v2/repository/models/nope/load")
    assert r.status_code == 400
    assert r.json() == {"error": POLL_FAILURE.format("nope")}
    with pytest.raises(InferenceServerException) as info:
        gclient.load_model("nope")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == POLL_FAILURE.format("nope")
    assert gclient.is_server_live()


def test_load_with_a_malformed_config_override(srv, gclient):
    """What the model-control examples send: a `config` that is not a JSON object."""
    bad = '"parameters": {"config": {{"max_batch_size": "16"}}}'
    r = srv.post("/v2/repository/models/simple_int8/load", {"parameters": {"config": bad}})
    assert r.status_code == 500
    assert error_text(r).startswith(POLL_FAILURE.format("simple_int8") + ": Invalid config override"), r.text
    with pytest.raises(InferenceServerException) as info:
        gclient.load_model("simple_int8", config=bad)
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message().startswith(POLL_FAILURE.format("simple_int8"))
    assert not gclient.is_model_ready("simple_int8")


def test_load_file_override_with_a_name_longer_than_name_max(srv, gclient):
    """simple_grpc_model_control.py: INTERNAL, 'failed to poll from model repository', still live."""
    key = "file:" + "A" * 256
    with pytest.raises(InferenceServerException) as info:
        gclient.load_model("simple_int8", config="{}", files={key: b"a"})
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message().startswith(POLL_FAILURE.format("simple_int8")), info.value.message()
    r = srv.post("/v2/repository/models/simple_int8/load",
                 {"parameters": {"config": "{}", key: base64.b64encode(b"a").decode()}})
    assert r.status_code == 500
    assert error_text(r).startswith(POLL_FAILURE.format("simple_int8"))
    assert gclient.is_server_live() and srv.get("/v2/health/live").status_code == 200


def test_load_file_override_outside_the_model_folder(srv, gclient, tmp_path):
    target = tmp_path / "escaped.txt"
    for key in ["file:../escaped.txt", "file:1/../../escaped.txt", f"file:{target}"]:
        with pytest.raises(InferenceServerException) as info:
            gclient.load_model("simple_int8", config="{}", files={key: b"a"})
        assert info.value.status() == "StatusCode.INTERNAL"
        assert info.value.message().startswith(POLL_FAILURE.format("simple_int8") + f": Invalid file parameter '{key}'")
    assert not target.exists()


def test_load_with_a_model_name_that_is_not_one_path_segment(srv, gclient, tmp_path):
    """A load request's model name names the folder its files go to: `../x`, an absolute path,
    `a/b`, `..` are refused (400 / INVALID_ARGUMENT) before anything is written, over both
    protocols; afterwards no stray file or folder exists where they pointed, and no temporary
    folder is left behind."""
    tmp_root = Path(tempfile.gettempdir())
    leftovers = lambda: {p for p in os.listdir(tmp_root) if p.startswith("tritium-override-")}
    before = leftovers()
    stray = f"tritium_stray_{os.getpid()}"
    places = [tmp_root / stray, tmp_root.parent / stray, tmp_path / stray]
    names = [f"../{stray}", f"../../{stray}", str(tmp_path / stray), "a/b", "..", "."]
    for name in names:
        with pytest.raises(InferenceServerException) as info:
            gclient.load_model(name, config="{}", files={"file:1/model.onnx": b"a"})
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT", (name, info.value)
        assert info.value.message().startswith(f"invalid model name '{name}': a model name must be one plain "
                                               "path segment"), info.value.message()
        with pytest.raises(InferenceServerException) as info:
            gclient.load_model(name)  # from the repository: the same answer
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT", (name, info.value)
    # Over HTTP the name arrives percent-encoded in the path.
    body = {"parameters": {"config": "{}", "file:1/model.onnx": base64.b64encode(b"a").decode()}}
    for encoded, name in [(f"..%2F{stray}", f"../{stray}"), ("%2E%2E", ".."),
                          (quote(str(tmp_path / stray), safe=""), str(tmp_path / stray))]:
        r = srv.post(f"/v2/repository/models/{encoded}/load", body)
        assert r.status_code == 400, (encoded, r.status_code, r.text)
        assert error_text(r).startswith(f"invalid model name '{name}'"), r.text
    for place in places:
        assert not place.exists(), f"a load request wrote {place}"
    assert leftovers() <= before, "no temporary folder is left behind"
    assert gclient.is_server_live()


def test_load_file_override_without_config(srv, gclient):
    with pytest.raises(InferenceServerException) as info:
        gclient.load_model("simple_int8", files={"file:1/model.onnx": b"a"})
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message() == (POLL_FAILURE.format("simple_int8")
                                    + ": Load parameter 'config' must be specified for model file override")


def test_load_from_files_in_the_request(srv, gclient):
    """A model no repository has, loaded from `file:1/model.onnx` and a config, over both
    protocols (gRPC bytes, HTTP base64), then served."""
    onnx = (EXAMPLES_REPO / "core" / "simple" / "1" / "model.onnx").read_bytes()
    config = json.dumps({"name": "sent", "platform": "onnxruntime_onnx", "max_batch_size": 8})
    gclient.load_model("sent", config=config, files={"file:1/model.onnx": onnx})
    assert gclient.is_model_ready("sent")
    r = http_infer(srv, [ints("INPUT0", [1, 16], 5), ints("INPUT1", [1, 16], 2)], model="sent")
    assert r.status_code == 200, r.text
    assert [o["data"][0] for o in r.json()["outputs"]] == [7, 3]
    gclient.unload_model("sent")
    r = srv.post("/v2/repository/models/sent2/load",
                 {"parameters": {"config": config.replace('"sent"', '"sent2"'),
                                 "file:1/model.onnx": base64.b64encode(onnx).decode()}})
    assert r.status_code == 200, r.text
    assert gclient.is_model_ready("sent2")
    gclient.unload_model("sent2")


def test_load_failure_after_the_poll(srv, gclient):
    """A model file the backend cannot load: Triton's 'load failed for model' (400)."""
    config = json.dumps({"name": "broken", "platform": "onnxruntime_onnx", "max_batch_size": 8,
                         "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]}],
                         "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]}]})
    want = "load failed for model 'broken': version 1 is at UNAVAILABLE state: "
    with pytest.raises(InferenceServerException) as info:
        gclient.load_model("broken", config=config, files={"file:1/model.onnx": b"not onnx"})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message().startswith(want), info.value.message()
    r = srv.post("/v2/repository/models/broken/load",
                 {"parameters": {"config": config, "file:1/model.onnx": base64.b64encode(b"not onnx").decode()}})
    assert r.status_code == 400
    assert error_text(r).startswith(want)


def test_unload_of_an_unknown_model_succeeds(srv, gclient):
    assert srv.post("/v2/repository/models/nope/unload").status_code == 200
    gclient.unload_model("nope")


@pytest.fixture
def region():
    handle = shm.create_shared_memory_region("errors", "/tritium_error_texts", 128)
    yield handle
    shm.destroy_shared_memory_region(handle)


def test_shared_memory_registration_errors(srv, gclient, region):
    r = srv.post("/v2/systemsharedmemory/region/r1/register", {"key": "/tritium_no_such_key", "offset": 0,
                                                                "byte_size": 64})
    assert (r.status_code, error_text(r)) == (500, "Unable to open shared memory region: '/tritium_no_such_key'")
    with pytest.raises(InferenceServerException) as info:
        gclient.register_system_shared_memory("r1", "/tritium_no_such_key", 64)
    assert (info.value.status(), info.value.message()) == (
        "StatusCode.INTERNAL", "Unable to open shared memory region: '/tritium_no_such_key'")

    r = srv.get("/v2/systemsharedmemory/region/nope/status")
    assert (r.status_code, error_text(r)) == (404, "Unable to find system shared memory region: 'nope'")
    with pytest.raises(InferenceServerException) as info:
        gclient.get_system_shared_memory_status("nope")
    assert (info.value.status(), info.value.message()) == (
        "StatusCode.NOT_FOUND", "Unable to find system shared memory region: 'nope'")

    gclient.register_system_shared_memory("texts", "/tritium_error_texts", 128)
    try:
        r = srv.post("/v2/systemsharedmemory/region/texts/register", {"key": "/tritium_error_texts", "offset": 0,
                                                                       "byte_size": 128})
        assert (r.status_code, error_text(r)) == (400, "shared memory region 'texts' already in manager")
        with pytest.raises(InferenceServerException) as info:
            gclient.register_system_shared_memory("texts", "/tritium_error_texts", 128)
        assert (info.value.status(), info.value.message()) == (
            "StatusCode.ALREADY_EXISTS", "shared memory region 'texts' already in manager")
    finally:
        gclient.unregister_system_shared_memory("texts")


def test_shared_memory_region_and_offset_errors_in_a_request(srv, stub, gclient, region):
    gclient.register_system_shared_memory("texts2", "/tritium_error_texts", 128)
    try:
        def shm_input(region_name, size, offset):
            return {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                    "parameters": {"shared_memory_region": region_name, "shared_memory_byte_size": size,
                                   "shared_memory_offset": offset}}

        def grpc_shm(region_name, size, offset):
            req = grpc_request(inputs=(("INPUT1", [1, 16]),))
            t = req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
            t.parameters["shared_memory_region"].string_param = region_name
            t.parameters["shared_memory_byte_size"].int64_param = size
            t.parameters["shared_memory_offset"].int64_param = offset
            return req

        cases = [(("nope", 64, 0), 404, grpc.StatusCode.NOT_FOUND, "Unable to find shared memory region: 'nope'"),
                 (("texts2", 64, 100), 400, grpc.StatusCode.INVALID_ARGUMENT,
                  "Invalid offset + byte size for shared memory region: 'texts2'")]
        for args, status, code, want in cases:
            (hs, ht), (gc, gt) = both(srv, stub, http_infer(srv, [shm_input(*args), OK_INPUTS[1]]), grpc_shm(*args))
            assert (hs, gc) == (status, code)
            assert ht == gt == want
    finally:
        gclient.unregister_system_shared_memory("texts2")


def test_load_and_unload_refused_without_explicit_mode(tmp_path):
    """Triton 2.51 answers 503 'explicit model load / unload is not allowed if polling is
    enabled' in modes none and poll alike; Tritium keeps the words up to 'not allowed' and names
    the mode it runs in."""
    (core,) = copy_examples_repo(tmp_path, ("core",))
    server = Server(core, log_dir=tmp_path, args=["--model-control-mode", "none"]).start()
    try:
        for action in ("load", "unload"):
            r = server.post(f"/v2/repository/models/simple/{action}")
            assert r.status_code == 503
            assert error_text(r).startswith("explicit model load / unload is not allowed"), r.text
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            with pytest.raises(InferenceServerException) as info:
                c.load_model("simple")
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert info.value.message().startswith("explicit model load / unload is not allowed")
    finally:
        assert server.stop() == 0, server.log_tail()


def test_model_known_but_unloaded(srv, gclient):
    """Never loaded: 'is not found'; loaded then unloaded: 'has no available versions' (404 /
    NOT_FOUND), for inference and metadata alike."""
    x = grpcclient.InferInput("INPUT0", [1, 16], "INT8")
    x.set_data_from_numpy(np.ones((1, 16), np.int8))
    gclient.load_model("simple_int8")
    gclient.unload_model("simple_int8")
    want = "Request for unknown model: 'simple_int8' has no available versions"
    r = srv.post("/v2/models/simple_int8/infer", {"inputs": [{"name": "INPUT0", "datatype": "INT8", "shape": [1, 16],
                                                               "data": [1] * 16}]})
    assert (r.status_code, error_text(r)) == (404, want)
    r = srv.get("/v2/models/simple_int8")
    assert (r.status_code, error_text(r)) == (404, want)
    with pytest.raises(InferenceServerException) as info:
        gclient.infer("simple_int8", [x])
    assert (info.value.status(), info.value.message()) == ("StatusCode.NOT_FOUND", want)
