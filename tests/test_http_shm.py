"""System shared memory over HTTP with tritonclient.http: register, infer with inputs and outputs
in the region, status, unregister, and the error cases; a region registered over HTTP is usable
over gRPC (one registry)."""
import os
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from helpers import error_text


@pytest.fixture
def region():
    key = f"/tritium_http_{time.monotonic_ns()}"
    handle = shm.create_shared_memory_region("io", key, 256)
    yield handle, key
    shm.destroy_shared_memory_region(handle)


def shm_inputs(proto):
    ins = [proto.InferInput("INPUT0", [1, 16], "FP32"), proto.InferInput("INPUT1", [1, 16], "FP32")]
    ins[0].set_shared_memory("io", 64, offset=0)
    ins[1].set_shared_memory("io", 64, offset=64)
    return ins


def test_inputs_and_outputs_in_shared_memory(server, region):
    handle, key = region
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2.0, dtype=np.float32)
    shm.set_shared_memory_region(handle, [a, b])
    c = server.client
    c.register_system_shared_memory("io", key, 256)
    try:
        status = c.get_system_shared_memory_status()
        assert {"name": "io", "key": key, "offset": 0, "byte_size": 256} in status
        assert c.get_system_shared_memory_status("io") == [{"name": "io", "key": key, "offset": 0, "byte_size": 256}]
        outs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
        outs[0].set_shared_memory("io", 64, offset=128)
        outs[1].set_shared_memory("io", 64, offset=192)
        res = c.infer("add_sub", shm_inputs(httpclient), outputs=outs)
        out0 = res.get_output("OUTPUT0")
        # Triton 2.51's answer for an output written to shared memory: name, datatype, shape.
        assert out0 == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}, out0
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 16], offset=128), a + b)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 16], offset=192), a - b)

        # The same region over gRPC: one registry for both protocols.
        g = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            shm.set_shared_memory_region(handle, [b, a])
            res = g.infer("add_sub", shm_inputs(grpcclient))
            np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
        finally:
            g.close()
    finally:
        c.unregister_system_shared_memory("io")
    assert c.get_system_shared_memory_status() == []


def test_shared_memory_errors(server, region):
    handle, key = region
    c = server.client
    r = server.get("/v2/systemsharedmemory/region/io/status")
    assert r.status_code == 404 and "Unable to find system shared memory region: 'io'" in error_text(r)
    r = server.post("/v2/systemsharedmemory/region/x/register", {"key": "/tritium_no_such_key", "offset": 0, "byte_size": 8})
    assert r.status_code == 500 and "Unable to open shared memory region: '/tritium_no_such_key'" in error_text(r)
    r = server.post("/v2/systemsharedmemory/region/x/register", {"key": key})
    assert r.status_code == 400 and "byte_size" in error_text(r)
    r = server.post("/v2/systemsharedmemory/region/x/register", {"key": key, "offset": 0, "byte_size": 1 << 20})
    assert r.status_code >= 400, "a region larger than the shm object is refused"
    c.register_system_shared_memory("io", key, 256)
    try:
        with pytest.raises(InferenceServerException) as info:
            c.register_system_shared_memory("io", key, 256)
        assert "already in manager" in info.value.message()
        # Offsets past the region, regions too small for the output, unknown regions.
        bad = shm_inputs(httpclient)
        bad[1].set_shared_memory("io", 64, offset=224)
        with pytest.raises(InferenceServerException) as info:
            c.infer("add_sub", bad)
        assert "io" in info.value.message()
        outs = [httpclient.InferRequestedOutput("OUTPUT0")]
        outs[0].set_shared_memory("io", 16, offset=0)
        with pytest.raises(InferenceServerException) as info:
            c.infer("add_sub", shm_inputs(httpclient), outputs=outs)
        assert "OUTPUT0" in info.value.message() or "io" in info.value.message()
        unknown = shm_inputs(httpclient)
        unknown[0].set_shared_memory("nope", 64)
        with pytest.raises(InferenceServerException) as info:
            c.infer("add_sub", unknown)
        assert "nope" in info.value.message()
    finally:
        c.unregister_system_shared_memory()
    # Still serving.
    assert c.is_server_live()


def test_a_region_truncated_after_registering_is_a_clear_error_not_a_crash(server):
    """A client registers 1 MiB, shrinks its object to nothing, then sends requests that read and
    write the region: each is a 400 naming the region (the server used to die of SIGBUS, taking
    every model with it), over HTTP and gRPC, and the server keeps serving everyone else."""
    key = f"/tritium_trunc_{time.monotonic_ns()}"
    handle = shm.create_shared_memory_region("shrunk", key, 1 << 20)
    c = server.client
    try:
        c.register_system_shared_memory("shrunk", key, 1 << 20)
        fd = os.open(f"/dev/shm/{key.lstrip('/')}", os.O_RDWR)
        os.ftruncate(fd, 0)
        os.close(fd)
        ins = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        ins[0].set_shared_memory("shrunk", 64, offset=4096)
        ins[1].set_shared_memory("shrunk", 64, offset=8192)
        with pytest.raises(InferenceServerException) as info:
            c.infer("add_sub", ins)
        assert info.value.status() == "400"
        assert "shared memory region 'shrunk'" in info.value.message()
        assert "smaller than when it was registered" in info.value.message()
        g = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            with pytest.raises(InferenceServerException) as info:
                g.infer("add_sub", [_shm_input(grpcclient, "INPUT0"), _shm_input(grpcclient, "INPUT1")])
            assert "smaller than when it was registered" in info.value.message()
        finally:
            g.close()
        # An output written to the shrunk region is refused too, and does not grow it back.
        a = np.ones((1, 16), dtype=np.float32)
        plain = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        plain[0].set_data_from_numpy(a)
        plain[1].set_data_from_numpy(a)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("shrunk", 64, offset=0)
        with pytest.raises(InferenceServerException) as info:
            c.infer("add_sub", plain, outputs=[out])
        assert "smaller than when it was registered" in info.value.message()
        assert os.stat(f"/dev/shm/{key.lstrip('/')}").st_size == 0
        # Everyone else is still served.
        res = c.infer("add_sub", plain)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + a)
        assert c.is_server_live()
    finally:
        c.unregister_system_shared_memory("shrunk")
        shm.destroy_shared_memory_region(handle)


def _shm_input(proto, name):
    t = proto.InferInput(name, [1, 16], "FP32")
    t.set_shared_memory("shrunk", 64, offset=4096)
    return t


def test_cuda_shared_memory_without_a_gpu(server):
    assert server.client.get_cuda_shared_memory_status() == []
    r = server.post("/v2/cudasharedmemory/region/g/register", {"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8})
    assert r.status_code == 501 and "CUDA shared memory is not available" in error_text(r)
    # As Triton without a GPU: unregistering all, or a name never registered, succeeds (Triton's
    # shared-memory examples begin this way), and the status still lists nothing.
    server.client.unregister_cuda_shared_memory()
    server.client.unregister_cuda_shared_memory("never_registered")
    for path in ("/v2/cudasharedmemory/unregister", "/v2/cudasharedmemory/region/g/unregister"):
        r = server.post(path, None)
        assert r.status_code == 200, (path, r.text)
    assert server.client.get_cuda_shared_memory_status() == []
    r = requests.get(f"{server.base}/v2/cudasharedmemory/region/g/status")
    assert r.status_code == 404 and error_text(r) == "Unable to find cuda shared memory region: 'g'"
