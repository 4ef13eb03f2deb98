"""Shapes that claim more elements than the request carries (issue 16, point 4): a shape's
element count is only ever checked against the bytes that arrived (the HTTP body within
`--http-max-input-size`, the gRPC message within `--grpc-max-message-size`, a registered
shared-memory region's size), so shapes such as [2^31, 2^31] and BYTES counts of 2^40 are
refused with a clear 400 / INVALID_ARGUMENT before anything in proportion to the claim is
allocated, over JSON, binary tensors, gRPC raw contents and system shared memory; and a crowd of
such requests leaves the server's peak memory where it was.
"""
import json
import mmap
import os
import struct
import threading

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
import grpc

from helpers import Server, binary_request, error_text

BIG = 2 ** 31


def config(name, dtype):
    return f"""
name: "{name}"
backend: "identity"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ -1, -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ -1, -1 ] }} ]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    base = tmp_path_factory.mktemp("claims")
    for name, dtype in [("f32", "TYPE_FP32"), ("str", "TYPE_STRING")]:
        (base / "models" / name / "1").mkdir(parents=True)
        (base / "models" / name / "config.pbtxt").write_text(config(name, dtype))
    s = Server(base / "models", log_dir=base).start()
    yield s
    assert s.stop() == 0, s.log_tail()


def post(srv, model, body, headers=None):
    return requests.post(f"{srv.base}/v2/models/{model}/infer", data=body, headers=headers, timeout=30)


def refused(r):
    assert r.status_code == 400, (r.status_code, r.text)
    return error_text(r)


def json_body(dtype, shape, data):
    return json.dumps({"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": shape, "data": data}]})


@pytest.mark.parametrize("dtype,model,data", [("FP32", "f32", [1.0, 2.0]), ("BYTES", "str", ["a", "b"])])
@pytest.mark.parametrize("shape", [[BIG, BIG], [1, 2 ** 40], [2 ** 62, 4]])
def test_json_data_shorter_than_its_shape(srv, dtype, model, data, shape):
    text = refused(post(srv, model, json_body(dtype, shape, data)))
    assert "INPUT0" in text or "shape" in text, text


@pytest.mark.parametrize("shape", [[BIG, BIG], [1, 2 ** 40], [2 ** 62, 4]])
def test_binary_tensors_shorter_than_their_shape(srv, shape):
    blob = np.ones(4, dtype=np.float32).tobytes()
    header = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": shape,
                          "parameters": {"binary_data_size": len(blob)}}]}
    body, headers = binary_request(header, [blob])
    refused(post(srv, "f32", body, headers))
    strings = struct.pack("<I", 1) + b"a" + struct.pack("<I", 1) + b"b"
    header["inputs"][0].update(datatype="BYTES", parameters={"binary_data_size": len(strings)})
    body, headers = binary_request(header, [strings])
    assert "elements" in refused(post(srv, "str", body, headers))


def grpc_raw(srv, model, dtype, shape, raw):
    channel = grpc.insecure_channel(srv.grpc_url)
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        req = service_pb2.ModelInferRequest(model_name=model)
        t = req.inputs.add()
        t.name, t.datatype = "INPUT0", dtype
        t.shape.extend(shape)
        req.raw_input_contents.append(raw)
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        return e.value.details()
    finally:
        channel.close()


@pytest.mark.parametrize("shape", [[BIG, BIG], [1, 2 ** 40], [2 ** 62, 4]])
def test_grpc_raw_contents_shorter_than_their_shape(srv, shape):
    grpc_raw(srv, "f32", "FP32", shape, np.ones(4, dtype=np.float32).tobytes())
    grpc_raw(srv, "str", "BYTES", shape, struct.pack("<I", 1) + b"a")


def test_shared_memory_shorter_than_the_shape(srv):
    key, name = f"/claims-{os.getpid()}", "claims"
    fd = os.open(f"/dev/shm{key}", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, 64)
        r = requests.post(f"{srv.base}/v2/systemsharedmemory/region/{name}/register",
                          json={"key": key, "offset": 0, "byte_size": 64}, timeout=10)
        assert r.status_code == 200, r.text
        for shape, size in [([BIG, BIG], 64), ([1, 2 ** 40], 64), ([BIG, BIG], 2 ** 62)]:
            body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": shape, "parameters": {
                "shared_memory_region": name, "shared_memory_byte_size": size}}]})
            refused(post(srv, "f32", body))
    finally:
        requests.post(f"{srv.base}/v2/systemsharedmemory/region/{name}/unregister", timeout=10)
        os.close(fd)
        os.unlink(f"/dev/shm{key}")


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_crowd_of_huge_bytes_claims_costs_no_memory(srv):
    """BYTES element counts are claims too: 32 clients each sending 50 requests whose shape
    says 2^30 elements (with 8 bytes of data) are all refused and raise the server's peak RSS by
    under 64 MiB; anything that filled memory in proportion to the claim would take gigabytes."""
    pid = srv.proc.pid
    strings = struct.pack("<I", 1) + b"a" + struct.pack("<I", 1) + b"b"
    header = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2 ** 30],
                          "parameters": {"binary_data_size": len(strings)}}]}
    body, headers = binary_request(header, [strings])
    before = vm_hwm_kib(pid)
    failures = []

    def client():
        with requests.Session() as s:
            for _ in range(50):
                r = s.post(f"{srv.base}/v2/models/str/infer", data=body, headers=headers, timeout=30)
                if r.status_code != 400:
                    failures.append(r.status_code)

    threads = [threading.Thread(target=client) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures[:5]
    grown_mib = (vm_hwm_kib(pid) - before) / 1024
    assert grown_mib < 64, f"peak RSS grew by {grown_mib:.0f} MiB"
    assert srv.alive()
