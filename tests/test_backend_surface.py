"""Every function of Triton's backend API that Tritium provides resolves in a backend library
(tests/fixtures/backends/surface_table.c takes all their addresses; Tritium loads backends with
RTLD_NOW), and the less common ones behave as Triton's: buffer attributes, memory usage reports
shown in the statistics' `memory_usage`, an instance's optimization profiles, the execution
policy, an output read back from a response, a response parameter refused as unsupported, and
the server-wide queries (metadata, a model's config and statistics, the index) answered. A
backend that needs a function Tritium does not provide fails its own load, naming it.
"""
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT, Server, wait_until

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "backends"
HEADER_DIR = REPO_ROOT / "examples" / "custom_backend"

# Backend name -> extra compiler flags.
BUILDS = {"surface": [], "surface_server_new": ["-DSURFACE_NEEDS_SERVER_NEW"]}


def config(name, backend):
    return (f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 0\n'
            'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'instance_group [ { count: 2 kind: KIND_CPU profile: [ "p0", "p1" ] } ]\n')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("surface")
    backends = base / "backends"
    for name, flags in BUILDS.items():
        (backends / name).mkdir(parents=True)
        subprocess.run(["cc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                        "-fvisibility=hidden", f"-I{HEADER_DIR}", *flags, "-o",
                        str(backends / name / f"libtriton_{name}.so"), str(FIXTURES / "surface.c"),
                        str(FIXTURES / "surface_table.c")], check=True)
    repo = base / "models"
    for model, backend in (("surface", "surface"), ("needs_server_new", "surface_server_new")):
        (repo / model / "1").mkdir(parents=True)
        (repo / model / "config.pbtxt").write_text(config(model, backend))
    srv = Server(repo, log_dir=base, args=["--backend-directory", str(backends), "--exit-on-error=false"])
    srv.start(wait_for="live")
    wait_until(lambda: srv.get("/v2/models/surface/ready").status_code == 200, what="surface ready")
    yield srv
    assert srv.stop() == 0, srv.log_tail()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_backend_using_the_whole_surface_loads_and_answers(server, protocol):
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    try:
        for value in (7, -3):
            x = lib.InferInput("X", [1], "INT32")
            x.set_data_from_numpy(np.array([value], dtype=np.int32))
            # Every check of Execute passed, or the answer is an error naming the one that failed.
            assert client.infer("surface", [x]).as_numpy("OUT").tolist() == [value]
    finally:
        client.close()


def test_memory_usage_is_the_models_report_plus_its_instances(server):
    # The model reported 1000 bytes of CPU memory, each of its two instances 24.
    expected = [{"type": "CPU", "id": 0, "byte_size": 1048}]
    http = server.get("/v2/models/surface/stats").json()["model_stats"][0]
    assert http["memory_usage"] == expected
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        stats = client.get_inference_statistics("surface", as_json=True)["model_stats"][0]
    finally:
        client.close()
    assert [{"type": m["type"], "id": int(m.get("id", 0)), "byte_size": int(m["byte_size"])}
            for m in stats["memory_usage"]] == expected


def test_a_backend_needing_a_function_tritium_lacks_fails_its_own_load(server):
    index = {m["name"]: m for m in server.post("/v2/repository/index").json()}
    assert index["needs_server_new"]["state"] == "UNAVAILABLE", index["needs_server_new"]
    assert "TRITONSERVER_ServerNew" in index["needs_server_new"]["reason"], index["needs_server_new"]
    assert index["surface"]["state"] == "READY"
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], dtype=np.int32))
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with pytest.raises(InferenceServerException):
            client.infer("needs_server_new", [x])
    finally:
        client.close()
