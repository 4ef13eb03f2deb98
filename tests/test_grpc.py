"""The gRPC frontend through `tritonclient.grpc` (sync, asyncio and streaming) and the raw stubs
where tritonclient would not send something: every RPC, tensors in raw and typed contents,
errors with Triton's codes and texts, streams that survive failed requests, shared memory,
cancellation and the health service."""
import asyncio
import queue
import threading
import time

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from test_shutdown import slow_repo


@pytest.fixture(scope="module")
def client(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def add_sub_inputs(a, b):
    ins = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"),
           grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def rand(shape=(1, 16), seed=None):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def raises(fn, code, fragment):
    with pytest.raises(InferenceServerException) as info:
        fn()
    assert info.value.status() == code, (info.value.status(), info.value.message())
    assert fragment in info.value.message(), info.value.message()
    return info.value


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert not client.is_model_ready("nope")
    meta = client.get_server_metadata()
    assert meta.name == "triton" and "binary_tensor_data" in meta.extensions  # --id, as Triton
    assert meta.version and meta.version != "2.51.0", "Tritium keeps its own version"
    m = client.get_model_metadata("add_sub")
    assert m.versions == ["1"] and m.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in m.inputs] == [("INPUT0", "FP32", [-1, 16]), ("INPUT1", "FP32", [-1, 16])]
    raises(lambda: client.get_model_metadata("nope"), "StatusCode.NOT_FOUND",
           "Request for unknown model: 'nope' is not found")
    raises(lambda: client.get_model_metadata("add_sub", "7"), "StatusCode.NOT_FOUND",
           "Request for unknown model: 'add_sub' version 7 is not found")


def test_config_is_the_model_config_message(client):
    cfg = client.get_model_config("add_sub").config
    assert cfg.name == "add_sub" and cfg.max_batch_size == 8
    assert [i.name for i in cfg.input] == ["INPUT0", "INPUT1"]
    assert cfg.instance_group[0].count == 1
    raises(lambda: client.get_model_config("nope"), "StatusCode.NOT_FOUND", "'nope'")


def test_infer_add_sub_matches_numpy(client):
    a, b = rand(seed=1), rand(seed=2)
    res = client.infer("add_sub", add_sub_inputs(a, b), request_id="r1")
    assert res.get_response().id == "r1"
    np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    only = client.infer("add_sub", add_sub_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]


def test_every_datatype_in_raw_contents(client):
    rng = np.random.default_rng(5)
    meta = client.get_model_metadata("identity_types")
    ins, expected = [], {}
    for i, o in zip(meta.inputs, meta.outputs):
        shape = [2, 3]
        if i.datatype == "BYTES":
            x = np.array([f"s{k}-é".encode() for k in range(6)], dtype=np.object_).reshape(shape)
        elif i.datatype == "BOOL":
            x = rng.integers(0, 2, shape) == 1
        elif i.datatype == "BF16":
            x = (rng.integers(-64, 64, shape) / 4).astype(ml_dtypes.bfloat16)
        else:
            x = (rng.standard_normal(shape) * 50).astype(triton_to_np_dtype(i.datatype))
        t = grpcclient.InferInput(i.name, shape, i.datatype)
        t.set_data_from_numpy(x)
        ins.append(t)
        expected[o.name] = x
    res = client.infer("identity_types", ins)
    for name, x in expected.items():
        np.testing.assert_array_equal(res.as_numpy(name), x, err_msg=name)


def test_typed_contents_and_parameters(stub):
    req = service_pb2.ModelInferRequest(model_name="add_sub", id="typed")
    for name in ("INPUT0", "INPUT1"):
        t = req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        t.contents.fp32_contents.extend([float(k) for k in range(16)])
    req.parameters["sequence_id"].string_param = "ignored-by-stateless-model"
    req.parameters["priority"].uint64_param = 0
    req.parameters["binary_data_output"].bool_param = True  # ignored on gRPC
    res = stub.ModelInfer(req)
    assert res.id == "typed" and res.model_version == "1"
    out = {o.name: np.frombuffer(raw, dtype=np.float32) for o, raw in zip(res.outputs, res.raw_output_contents)}
    np.testing.assert_array_equal(out["OUTPUT0"], np.arange(16, dtype=np.float32) * 2)
    np.testing.assert_array_equal(out["OUTPUT1"], np.zeros(16, dtype=np.float32))


@pytest.mark.parametrize("mutate, code, fragment", [
    (lambda r: setattr(r, "model_name", "nope"), grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'nope' is not found"),
    (lambda r: setattr(r, "model_version", "7"), grpc.StatusCode.NOT_FOUND, "'add_sub' version 7 is not found"),
    (lambda r: setattr(r.inputs[0], "name", "INPUTX"), grpc.StatusCode.INVALID_ARGUMENT, "unexpected inference input 'INPUTX' for model 'add_sub'"),
    (lambda r: setattr(r.inputs[1], "datatype", "INT32"), grpc.StatusCode.INVALID_ARGUMENT, "data-type is 'INT32', but model 'add_sub' expects 'FP32'"),
    (lambda r: setattr(r.inputs[1], "datatype", "FLOAT"), grpc.StatusCode.INVALID_ARGUMENT, "invalid datatype 'FLOAT'"),
    (lambda r: r.raw_input_contents.__setitem__(1, b"\0" * 60), grpc.StatusCode.INVALID_ARGUMENT, "input byte size mismatch for input 'INPUT1' for model 'add_sub'. Expected 64, got 60"),
    (lambda r: r.raw_input_contents.append(b"\0" * 64), grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents"),
    (lambda r: r.outputs.add(name="OUTPUTX"), grpc.StatusCode.INVALID_ARGUMENT, "unexpected inference output 'OUTPUTX' for model 'add_sub'"),
    (lambda r: r.parameters["triton_x"].CopyFrom(service_pb2.InferParameter(bool_param=True)),
     grpc.StatusCode.INVALID_ARGUMENT, "reserved for Triton usage"),
    (lambda r: r.parameters["sequence_start"].CopyFrom(service_pb2.InferParameter(int64_param=1)),
     grpc.StatusCode.INVALID_ARGUMENT, "Unable to parse 'sequence_start'"),
    (lambda r: r.inputs[0].shape.__setitem__(0, 9), grpc.StatusCode.INVALID_ARGUMENT, "batch-size must be <= 8"),
    (lambda r: r.inputs[0].shape.__setitem__(1, -3), grpc.StatusCode.INVALID_ARGUMENT, "negative dimension"),
], ids=["model", "version", "input", "datatype", "datatype-name", "byte-size", "raw-count", "output",
        "reserved", "param-type", "batch", "negative"])
def test_bad_requests_get_tritons_codes(stub, mutate, code, fragment):
    req = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        req.raw_input_contents.append(b"\0" * 64)
    mutate(req)
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(req)
    assert info.value.code() == code, info.value.details()
    assert fragment in info.value.details(), info.value.details()
    # The model is unharmed.
    ok = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        ok.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        ok.raw_input_contents.append(b"\0" * 64)
    assert len(stub.ModelInfer(ok).outputs) == 2


def test_statistics_and_repository(client, server):
    before = client.get_inference_statistics("add_sub").model_stats[0].inference_count
    client.infer("add_sub", add_sub_inputs(rand(), rand()))
    stats = client.get_inference_statistics("add_sub").model_stats[0]
    assert stats.inference_count == before + 1
    assert stats.inference_stats.success.count >= 1 and stats.inference_stats.queue.ns > 0
    http = server.client.get_inference_statistics("add_sub")["model_stats"][0]
    assert int(http["inference_count"]) == stats.inference_count, "gRPC and HTTP statistics agree"
    raises(lambda: client.get_inference_statistics("nope"), "StatusCode.INVALID_ARGUMENT",
           "requested model 'nope' is not available")
    index = client.get_model_repository_index().models
    assert {(m.name, m.version, m.state) for m in index} >= {("add_sub", "1", "READY"), ("mlp", "1", "READY")}
    raises(lambda: client.load_model("add_sub"), "StatusCode.UNAVAILABLE",
           "explicit model load / unload is not allowed")


def test_explicit_load_unload_over_grpc(start_server, repo_copy):
    srv = start_server(repo_copy(["add_sub", "identity_fp32"]), args=["--model-control-mode", "explicit"])
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        assert not c.is_model_ready("add_sub")
        c.load_model("add_sub")
        assert c.is_model_ready("add_sub")
        raises(lambda: c.load_model("nope"), "StatusCode.INVALID_ARGUMENT",
               "failed to load 'nope', failed to poll from model repository")
        c.unload_model("nope")  # OK, as in Triton
        c.infer("add_sub", add_sub_inputs(rand(), rand()))
        c.unload_model("add_sub")
        assert not c.is_model_ready("add_sub")
        entry = [m for m in c.get_model_repository_index().models if m.name == "add_sub"][0]
        assert (entry.state, entry.reason) == ("UNAVAILABLE", "unloaded")
    finally:
        c.close()


def test_stream_answers_by_id_and_survives_errors(client):
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("nope", add_sub_inputs(rand(), rand()), request_id="s1")
        bad = [grpcclient.InferInput("INPUT0", [1, 16], "FP32")]
        bad[0].set_data_from_numpy(rand())
        client.async_stream_infer("add_sub", bad, request_id="s2")
        sent = {}
        for k in range(20):
            a, b = rand(seed=k), rand(seed=100 + k)
            sent[f"ok{k}"] = a + b
            client.async_stream_infer("add_sub", add_sub_inputs(a, b), request_id=f"ok{k}")
        errors, results = [], {}
        for _ in range(22):
            result, error = answers.get(timeout=30)
            if error is not None:
                errors.append(error.message())
            else:
                results[result.get_response().id] = result.as_numpy("OUTPUT0")
        assert any("Request for unknown model: 'nope' is not found" in e for e in errors), errors
        assert any("missing required input(s) ['INPUT1']" in e for e in errors), errors
        assert set(results) == set(sent)
        for rid, value in sent.items():
            np.testing.assert_allclose(results[rid], value, rtol=1e-6)
    finally:
        client.stop_stream()


def test_asyncio_client_under_concurrency(server):
    async def main():
        c = grpcaio.InferenceServerClient(server.grpc_url)
        try:
            pairs = [(rand(seed=k), rand(seed=1000 + k)) for k in range(64)]
            results = await asyncio.gather(*(c.infer("add_sub", add_sub_inputs(a, b)) for a, b in pairs))
            for (a, b), r in zip(pairs, results):
                np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        finally:
            await c.close()
    asyncio.run(main())


def test_gzip_requests_are_accepted(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        a, b = rand(), rand()
        res = c.infer("add_sub", add_sub_inputs(a, b), compression_algorithm="gzip")
        np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    finally:
        c.close()


def test_system_shared_memory_inputs_and_outputs(client):
    a, b = rand(seed=7), rand(seed=8)
    key = f"/tritium_test_{time.monotonic_ns()}"
    handle = shm.create_shared_memory_region("tritium_io", key, 64 * 4)
    try:
        shm.set_shared_memory_region(handle, [a, b])
        client.register_system_shared_memory("tritium_io", key, 64 * 4)
        status = client.get_system_shared_memory_status("tritium_io")
        assert status.regions["tritium_io"].byte_size == 256
        ins = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        ins[0].set_shared_memory("tritium_io", 64, offset=0)
        ins[1].set_shared_memory("tritium_io", 64, offset=64)
        outs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
        outs[0].set_shared_memory("tritium_io", 64, offset=128)
        outs[1].set_shared_memory("tritium_io", 64, offset=192)
        res = client.infer("add_sub", ins, outputs=outs)
        got0 = shm.get_contents_as_numpy(handle, np.float32, [1, 16], offset=128)
        got1 = shm.get_contents_as_numpy(handle, np.float32, [1, 16], offset=192)
        np.testing.assert_allclose(got0, a + b, rtol=1e-6)
        np.testing.assert_allclose(got1, a - b, rtol=1e-6)
        assert res.get_output("OUTPUT0").parameters["shared_memory_region"].string_param == "tritium_io"

        # Out of range and unknown regions are clear errors.
        bad = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        bad[0].set_shared_memory("tritium_io", 64, offset=224)
        bad[1].set_shared_memory("nope_region", 64)
        raises(lambda: client.infer("add_sub", bad), "StatusCode.INVALID_ARGUMENT", "tritium_io")
        # Triton answers INTERNAL "Unable to open shared memory region" for a key that is not there.
        raises(lambda: client.register_system_shared_memory("other", "/no_such_key_tritium", 64),
               "StatusCode.INTERNAL", "Unable to open shared memory region: '/no_such_key_tritium'")
        raises(lambda: client.register_system_shared_memory("tritium_io", key, 64),
               "StatusCode.ALREADY_EXISTS", "already in manager")
    finally:
        client.unregister_system_shared_memory("tritium_io")
        shm.destroy_shared_memory_region(handle)
    assert "tritium_io" not in client.get_system_shared_memory_status().regions


def test_cuda_shared_memory_is_a_clear_error_without_a_gpu(client):
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    with pytest.raises(InferenceServerException) as info:
        client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64)
    assert "CUDA shared memory is not available" in info.value.message()
    # As Triton without a GPU: unregistering all, or a name never registered, succeeds.
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never_registered")
    assert len(client.get_cuda_shared_memory_status().regions) == 0


def test_grpc_health_service(server):
    """grpc.health.v1.Health/Check, with its two tiny messages encoded by hand (no extra
    package): HealthCheckRequest{1: service}, HealthCheckResponse{1: status}, SERVING = 1."""
    channel = grpc.insecure_channel(server.grpc_url)
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda service: (b"\x0a" + bytes([len(service)]) + service.encode()) if service else b"",
                                response_deserializer=lambda raw: raw)
    try:
        assert check("") == b"\x08\x01"
        assert check("inference.GRPCInferenceService") == b"\x08\x01"
        with pytest.raises(grpc.RpcError) as info:
            check("nope")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        channel.close()


def test_cancelled_requests_leave_nothing_behind(start_server, tmp_path):
    srv = start_server(slow_repo(tmp_path))
    channel = grpc.insecure_channel(srv.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

    def request():
        r = service_pb2.ModelInferRequest(model_name="slow")
        r.inputs.add(name="INPUT0", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
        return r

    try:
        # Two instances busy for 1.5 s each, six more queued; cancel them all.
        calls = [stub.ModelInfer.future(request()) for _ in range(8)]
        time.sleep(0.3)
        for c in calls:
            c.cancel()
        # A stream closed with requests queued.
        reqs = queue.Queue()
        responses = stub.ModelStreamInfer(iter(reqs.get, None))
        for _ in range(4):
            reqs.put(request())
        time.sleep(0.2)
        responses.cancel()
        reqs.put(None)

        def pending():
            stats = srv.client.get_inference_statistics("slow")["model_stats"][0]
            return stats
        # Everything drains: the queued requests were dropped, not run (2 running at a time,
        # 1.5 s each: running all 12 would take 9 s).
        deadline = time.monotonic() + 6
        import requests as rq
        while time.monotonic() < deadline:
            text = rq.get(srv.metrics_url, timeout=5).text
            line = [l for l in text.splitlines() if l.startswith("nv_inference_pending_request_count{") and 'model="slow"' in l]
            if line and float(line[0].split()[-1]) == 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"pending requests did not return to 0: {line}")
        executed = int(pending()["execution_count"])
        assert executed <= 6, f"cancelled requests were dropped, not run ({executed} executions)"
        # And the model still serves.
        assert stub.ModelInfer(request()).outputs[0].name == "OUTPUT0"
    finally:
        channel.close()


def int_input(name, values, datatype="INT32"):
    dt = {"INT32": np.int32, "UINT32": np.uint32}[datatype]
    t = grpcclient.InferInput(name, [len(values)], datatype)
    t.set_data_from_numpy(np.array(values, dtype=dt))
    return t


def collect_stream(client, model, inputs, request_id, count, enable_empty_final=False, timeout=30):
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(model, inputs, request_id=request_id,
                                  enable_empty_final_response=enable_empty_final)
        got = [answers.get(timeout=timeout) for _ in range(count)]
        time.sleep(0.2)
        assert answers.empty(), "no more responses than expected"
        return got
    finally:
        client.stop_stream()


def test_decoupled_repeat_sends_n_responses_in_order_with_the_final_flag(client):
    values = [4, -1, 7, 0, 12]
    got = collect_stream(client, "repeat_int32",
                         [int_input("IN", values), int_input("DELAY", [5] * 5, "UINT32")], "rep",
                         count=len(values) + 1, enable_empty_final=True)
    assert all(error is None for _, error in got), [e for _, e in got]
    responses = [r.get_response() for r, _ in got]
    assert all(r.id == "rep" for r in responses)
    flags = [r.parameters["triton_final_response"].bool_param for r in responses]
    assert flags == [False] * len(values) + [True]
    data = [(int(r.as_numpy("OUT")[0]), int(r.as_numpy("IDX")[0])) for r, _ in got[:-1]]
    assert data == [(v, i) for i, v in enumerate(values)]
    assert len(responses[-1].outputs) == 0, "the final flag comes in an empty response"


def test_decoupled_square_and_zero_responses(client):
    got = collect_stream(client, "square_int32", [int_input("IN", [3])], "sq", count=3)
    assert [int(r.as_numpy("OUT")[0]) for r, _ in got] == [3, 3, 3]
    # n = 0: no response at all without the empty final response ...
    assert collect_stream(client, "square_int32", [int_input("IN", [0])], "sq0", count=0) == []
    # ... and only the final flag with it.
    (r, error), = collect_stream(client, "square_int32", [int_input("IN", [0])], "sq0", count=1, enable_empty_final=True)
    assert error is None and r.get_response().parameters["triton_final_response"].bool_param


def test_decoupled_models_refuse_unary_and_http(client, server):
    raises(lambda: client.infer("repeat_int32", [int_input("IN", [1])]), "StatusCode.UNIMPLEMENTED",
           "doesn't support models with decoupled transaction policy")
    r = server.post("/v2/models/repeat_int32/infer",
                    {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]})
    assert r.status_code == 400 or r.status_code == 501
    assert "decoupled" in r.json()["error"]


def test_thousand_interleaved_requests_on_one_stream(client):
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    sent = {}
    try:
        for k in range(1000):
            a = np.full((1, 16), k, dtype=np.float32)
            b = np.full((1, 16), 0.5, dtype=np.float32)
            sent[f"i{k}"] = a + b
            client.async_stream_infer("add_sub", add_sub_inputs(a, b), request_id=f"i{k}")
        got = {}
        for _ in range(1000):
            result, error = answers.get(timeout=60)
            assert error is None, error
            got[result.get_response().id] = result.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    assert set(got) == set(sent)
    for rid, value in sent.items():
        np.testing.assert_array_equal(got[rid], value)


def test_closing_a_stream_mid_way_stops_a_decoupled_request(client, server):
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    # Both instances of repeat_int32 busy with 50 responses 100 ms apart: 5 s each if run out.
    for rid in ("long1", "long2"):
        client.async_stream_infer("repeat_int32", [int_input("IN", list(range(50))), int_input("DELAY", [100] * 50, "UINT32")],
                                  request_id=rid)
    firsts = {answers.get(timeout=10)[0].get_response().id for _ in range(2)}
    assert firsts == {"long1", "long2"}
    client.stop_stream(cancel_requests=True)
    # The instances stop at their next response, so a new request is served within a second or
    # so instead of after the 5 s the cancelled ones would have taken.
    started = time.monotonic()
    got = collect_stream(client, "repeat_int32", [int_input("IN", [9])], "after", count=1, timeout=10)
    assert got[0][1] is None and int(got[0][0].as_numpy("OUT")[0]) == 9
    assert time.monotonic() - started < 2.5, time.monotonic() - started
    stats = server.client.get_inference_statistics("repeat_int32")["model_stats"][0]
    assert int(stats["inference_stats"]["fail"]["count"]) >= 2, "the cancelled requests count as failed"
