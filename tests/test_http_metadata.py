"""Health, server/model metadata and model config over HTTP, as a tritonclient user sees them.

Expected shapes and texts come from docs/triton-reference.md (Triton 2.51).
"""
import socket

import pytest
import requests
from tritonclient.utils import InferenceServerException

from helpers import error_text


def test_server_is_live_and_ready(server):
    assert server.client.is_server_live()
    assert server.client.is_server_ready()
    for path in ("/v2/health/live", "/v2/health/ready"):
        r = server.get(path)
        assert r.status_code == 200
        assert r.content == b""


def test_server_metadata_names_the_extensions(server):
    meta = server.client.get_server_metadata()
    assert meta["name"]
    assert meta["version"]
    for ext in ("binary_tensor_data", "classification", "sequence", "model_repository", "statistics",
                "model_configuration", "parameters"):
        assert ext in meta["extensions"], ext


def test_add_sub_metadata_prepends_the_batch_dimension(server):
    meta = server.client.get_model_metadata("add_sub")
    assert meta["name"] == "add_sub"
    assert meta["versions"] == ["1"]
    assert meta["platform"]
    assert meta["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ]
    assert meta["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ]
    assert server.client.get_model_metadata("add_sub", "1") == meta


def test_identity_fp32_metadata_keeps_variable_dims(server):
    meta = server.client.get_model_metadata("identity_fp32")
    assert len(meta["inputs"]) == 1 and len(meta["outputs"]) == 1
    assert meta["inputs"][0]["datatype"] == "FP32"
    # max_batch_size > 0: Triton shows the batch dimension as a leading -1.
    assert meta["inputs"][0]["shape"] == [-1, -1]
    assert meta["outputs"][0]["shape"] == [-1, -1]


def test_unknown_model_metadata_is_404_with_tritons_text(server):
    r = server.get("/v2/models/nope")
    assert r.status_code == 404
    assert error_text(r) == "Request for unknown model: 'nope' is not found"
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
        server.client.get_model_metadata("nope")


def test_unknown_version_metadata_is_404(server):
    r = server.get("/v2/models/add_sub/versions/7")
    assert r.status_code == 404
    assert error_text(r) == "Request for unknown model: 'add_sub' version 7 is not found"


def test_model_readiness(server):
    assert server.client.is_model_ready("add_sub")
    assert server.client.is_model_ready("add_sub", "1")
    assert not server.client.is_model_ready("nope")
    assert server.get("/v2/models/add_sub/ready").status_code == 200
    r = server.get("/v2/models/nope/ready")
    assert r.status_code == 400
    assert not server.client.is_model_ready("add_sub", "7")


def test_add_sub_config_is_protobuf_json(server):
    cfg = server.client.get_model_config("add_sub")
    assert cfg["name"] == "add_sub"
    assert cfg["max_batch_size"] == 8
    assert [i["name"] for i in cfg["input"]] == ["INPUT0", "INPUT1"]
    assert [o["name"] for o in cfg["output"]] == ["OUTPUT0", "OUTPUT1"]
    for t in cfg["input"] + cfg["output"]:
        assert t["data_type"] == "TYPE_FP32"
        assert t["dims"] == [16], "dims are JSON numbers, not strings"
    assert cfg["instance_group"], "instance groups are completed"
    assert cfg["instance_group"][0]["kind"] in ("KIND_CPU", "KIND_GPU")


def test_unknown_model_config_is_404(server):
    r = server.get("/v2/models/nope/config")
    assert r.status_code == 404
    assert error_text(r) == "Request for unknown model: 'nope' is not found"


def test_model_without_config_is_autocompleted_from_its_file(server):
    cfg = server.client.get_model_config("autocomplete_add")
    assert cfg["name"] == "autocomplete_add"
    assert cfg["input"], "inputs completed from the ONNX file"
    assert cfg["output"], "outputs completed from the ONNX file"
    meta = server.client.get_model_metadata("autocomplete_add")
    assert [i["name"] for i in meta["inputs"]] == [i["name"] for i in cfg["input"]]


def test_unknown_route_is_404_and_wrong_method_405(server):
    assert server.get("/v2/nothing/here").status_code == 404
    assert server.get("/v2/models/add_sub/infer").status_code == 405


def refuses_connections(port) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_allow_grpc_and_metrics_false_close_those_ports(start_server, repo_copy):
    """`--allow-grpc=false --allow-metrics=false`: nothing listens on the gRPC and metrics ports
    while HTTP serves (with the defaults all three answer)."""
    srv = start_server(repo_copy(["add_sub"]), args=["--allow-grpc=false", "--allow-metrics=false"])
    assert srv.client.is_server_ready()
    assert srv.client.is_model_ready("add_sub")
    assert refuses_connections(srv.grpc_port)
    assert refuses_connections(srv.metrics_port)
    with pytest.raises(requests.ConnectionError):
        requests.get(srv.metrics_url, timeout=2)
    other = start_server(repo_copy(["add_sub"]))
    assert not refuses_connections(other.grpc_port)
    assert requests.get(other.metrics_url, timeout=5).status_code == 200
