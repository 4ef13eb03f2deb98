"""Triton's restricted API categories (issue 16, point 1): `--http-restricted-api` and
`--grpc-restricted-protocol`, per category and protocol, with real clients.

Each category is put in its own group with its own header, so a test can show that a request
passes with its category's header and value, and is refused — with Triton 2.51's answer, taken
from the real server — without the header, with a wrong value, or with another category's header.
A refused request changes nothing (no model loaded or unloaded, no region registered, no setting
changed).
"""
import json
import uuid

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import Server, copy_bundled_repo, free_ports, run_to_exit

CATEGORIES = ["health", "metadata", "inference", "shared-memory", "model-config",
              "model-repository", "statistics", "trace", "logging"]


def key(category):
    return f"x-{category}-key"


def secret(category):
    return f"s3cret-{category}"


def http_headers(category):
    return {key(category): secret(category)}


def grpc_headers(category):
    return {f"triton-grpc-protocol-{key(category)}": secret(category)}


def refusal_http(category):
    return {"error": f"This API is restricted, expecting header '{key(category)}'"}


def refusal_grpc(category):
    return f"This protocol is restricted, expecting header 'triton-grpc-protocol-{key(category)}'"


@pytest.fixture(scope="module")
def restricted(tmp_path_factory):
    """One server, every category restricted by its own header; add_sub loaded, add_sub_nobatch
    in the repository but not loaded."""
    base = tmp_path_factory.mktemp("restricted")
    repo = copy_bundled_repo(base / "models", ["add_sub", "add_sub_nobatch"])
    args = ["--model-control-mode=explicit", "--load-model=add_sub"]
    for c in CATEGORIES:
        args += [f"--http-restricted-api={c}:{key(c)}={secret(c)}",
                 f"--grpc-restricted-protocol={c}:{key(c)}={secret(c)}"]
    srv = Server(repo, args=args, log_dir=base).start(headers=http_headers("health"))
    yield srv
    assert srv.stop() == 0, srv.log_tail()


def add_sub_body():
    data = list(range(16))
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": data},
                       {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": data}]}


# (category, method, path, body, expected status with the header)
HTTP_CASES = [
    ("health", "GET", "/v2/health/live", None, 200),
    ("health", "GET", "/v2/health/ready", None, 200),
    ("health", "GET", "/v2/models/add_sub/ready", None, 200),
    ("health", "GET", "/v2/models/add_sub/versions/1/ready", None, 200),
    ("metadata", "GET", "/v2", None, 200),
    ("metadata", "GET", "/v2/models/add_sub", None, 200),
    ("inference", "POST", "/v2/models/add_sub/infer", add_sub_body(), 200),
    ("inference", "POST", "/v2/models/add_sub/versions/1/infer", add_sub_body(), 200),
    ("shared-memory", "GET", "/v2/systemsharedmemory/status", None, 200),
    ("shared-memory", "GET", "/v2/cudasharedmemory/status", None, 200),
    ("shared-memory", "POST", "/v2/systemsharedmemory/unregister", None, 200),
    ("model-config", "GET", "/v2/models/add_sub/config", None, 200),
    ("model-repository", "POST", "/v2/repository/index", None, 200),
    ("statistics", "GET", "/v2/models/stats", None, 200),
    ("statistics", "GET", "/v2/models/add_sub/stats", None, 200),
    ("trace", "GET", "/v2/trace/setting", None, 200),
    ("trace", "GET", "/v2/models/add_sub/trace/setting", None, 200),
    ("logging", "GET", "/v2/logging", None, 200),
]


@pytest.mark.parametrize("category,method,path,body,ok", HTTP_CASES,
                         ids=[f"{c[0]}:{c[1]} {c[2]}" for c in HTTP_CASES])
def test_http_category_needs_its_header(restricted, category, method, path, body, ok):
    url = restricted.base + path
    data = json.dumps(body) if body is not None else None
    allowed = requests.request(method, url, data=data, headers=http_headers(category), timeout=30)
    assert allowed.status_code == ok, allowed.text
    other = next(c for c in CATEGORIES if c != category)
    for headers in [{}, {key(category): "wrong"}, {key(category): secret(category)[:-1]},
                    http_headers(other)]:
        r = requests.request(method, url, data=data, headers=headers, timeout=30)
        assert r.status_code == 403, (headers, r.status_code, r.text)
        assert r.json() == refusal_http(category), r.text
        assert r.headers["content-type"] == "text/plain", "Triton answers before it sets a type"
    # Header names are case-insensitive (as in Triton); values are not.
    upper = requests.request(method, url, data=data, timeout=30,
                             headers={key(category).upper(): secret(category)})
    assert upper.status_code == ok, upper.text


def test_http_refusals_change_nothing(restricted):
    base = restricted.base
    repo = http_headers("model-repository")

    def index():
        r = requests.post(base + "/v2/repository/index", headers=repo, timeout=30)
        return {m["name"]: m.get("state") for m in r.json()}

    before = index()
    assert before == {"add_sub": "READY", "add_sub_nobatch": None} or before["add_sub"] == "READY", before
    r = requests.post(base + "/v2/repository/models/add_sub_nobatch/load", timeout=30)
    assert r.status_code == 403 and r.json() == refusal_http("model-repository")
    r = requests.post(base + "/v2/repository/models/add_sub/unload", timeout=30)
    assert r.status_code == 403
    assert index() == before, "a refused load or unload changed the repository"

    shm = http_headers("shared-memory")
    name = f"restricted-{uuid.uuid4().hex[:8]}"
    r = requests.post(base + f"/v2/systemsharedmemory/region/{name}/register", timeout=30,
                      data=json.dumps({"key": "/nonexistent", "offset": 0, "byte_size": 64}))
    assert r.status_code == 403 and r.json() == refusal_http("shared-memory")
    assert requests.get(base + "/v2/systemsharedmemory/status", headers=shm, timeout=30).json() == []

    logging = http_headers("logging")
    settings = requests.get(base + "/v2/logging", headers=logging, timeout=30).json()
    r = requests.post(base + "/v2/logging", data=json.dumps({"log_verbose_level": 3}), timeout=30)
    assert r.status_code == 403 and r.json() == refusal_http("logging")
    assert requests.get(base + "/v2/logging", headers=logging, timeout=30).json() == settings

    trace = http_headers("trace")
    before_trace = requests.get(base + "/v2/trace/setting", headers=trace, timeout=30).json()
    r = requests.post(base + "/v2/trace/setting", data=json.dumps({"trace_rate": "7"}), timeout=30)
    assert r.status_code == 403
    assert requests.get(base + "/v2/trace/setting", headers=trace, timeout=30).json() == before_trace


def test_unknown_paths_and_metrics_are_not_restricted(restricted):
    r = requests.get(restricted.base + "/v2/nothing/here", timeout=30)
    assert r.status_code == 404 and r.json() == {"error": "Not Found"}
    assert requests.get(restricted.metrics_url, timeout=30).status_code == 200


def test_tritonclient_http_with_and_without_headers(restricted):
    c = httpclient.InferenceServerClient(restricted.http_url)
    try:
        assert not c.is_server_live(), "tritonclient reads a refused health check as not live"
        assert c.is_server_live(headers=http_headers("health"))
        with pytest.raises(InferenceServerException) as e:
            c.get_model_repository_index()
        assert "This API is restricted, expecting header 'x-model-repository-key'" in str(e.value)
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        ins = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a, binary_data=True)
        with pytest.raises(InferenceServerException) as e:
            c.infer("add_sub", ins)
        assert e.value.status() == "403"
        res = c.infer("add_sub", ins, headers=http_headers("inference"))
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + a)
    finally:
        c.close()


# (category, rpc, request) for the raw stub; every RPC of Triton's service and the health check.
GRPC_CASES = [
    ("health", "ServerLive", service_pb2.ServerLiveRequest()),
    ("health", "ServerReady", service_pb2.ServerReadyRequest()),
    ("health", "ModelReady", service_pb2.ModelReadyRequest(name="add_sub")),
    ("metadata", "ServerMetadata", service_pb2.ServerMetadataRequest()),
    ("metadata", "ModelMetadata", service_pb2.ModelMetadataRequest(name="add_sub")),
    ("model-config", "ModelConfig", service_pb2.ModelConfigRequest(name="add_sub")),
    ("statistics", "ModelStatistics", service_pb2.ModelStatisticsRequest(name="add_sub")),
    ("model-repository", "RepositoryIndex", service_pb2.RepositoryIndexRequest()),
    ("shared-memory", "SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest()),
    ("shared-memory", "SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest()),
    ("shared-memory", "CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusRequest()),
    ("trace", "TraceSetting", service_pb2.TraceSettingRequest()),
    ("logging", "LogSettings", service_pb2.LogSettingsRequest()),
]


@pytest.mark.parametrize("category,rpc,request_", GRPC_CASES, ids=[c[1] for c in GRPC_CASES])
def test_grpc_category_needs_its_metadata(restricted, category, rpc, request_):
    with grpc.insecure_channel(restricted.grpc_url) as ch:
        call = getattr(service_pb2_grpc.GRPCInferenceServiceStub(ch), rpc)
        call(request_, metadata=list(grpc_headers(category).items()), timeout=30)
        other = next(c for c in CATEGORIES if c != category)
        for md in [[], [(f"triton-grpc-protocol-{key(category)}", "wrong")],
                   [(key(category), secret(category))],  # without Triton's prefix
                   list(grpc_headers(other).items())]:
            with pytest.raises(grpc.RpcError) as e:
                call(request_, metadata=md, timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, md
            assert e.value.details() == refusal_grpc(category), md


def test_grpc_health_check_is_health(restricted):
    with grpc.insecure_channel(restricted.grpc_url) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda x: x,
                               response_deserializer=lambda x: x)
        with pytest.raises(grpc.RpcError) as e:
            check(b"", timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert e.value.details() == refusal_grpc("health")
        assert check(b"", metadata=list(grpc_headers("health").items()), timeout=30) is not None


def grpc_inputs():
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    ins = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    return a, ins


def test_grpc_inference_unary_and_stream(restricted):
    c = grpcclient.InferenceServerClient(restricted.grpc_url)
    try:
        a, ins = grpc_inputs()
        with pytest.raises(InferenceServerException) as e:
            c.infer("add_sub", ins)
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        assert e.value.message() == refusal_grpc("inference")
        res = c.infer("add_sub", ins, headers=grpc_headers("inference"))
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + a)

        # A stream without the metadata is ended at its start with the same status (as Triton
        # does, before any request is read): the client may see it before it sends.
        results = []
        c.start_stream(callback=lambda result, error: results.append((result, error)))
        try:
            c.async_stream_infer("add_sub", ins)
        except InferenceServerException as e:
            assert "no longer in valid state" in e.message()
        c.stop_stream()
        assert len(results) == 1 and results[0][0] is None, results
        assert refusal_grpc("inference") in str(results[0][1])

        results.clear()
        c.start_stream(callback=lambda result, error: results.append((result, error)), headers=grpc_headers("inference"))
        c.async_stream_infer("add_sub", ins)
        c.stop_stream()
        assert len(results) == 1 and results[0][1] is None, results
        np.testing.assert_array_equal(results[0][0].as_numpy("OUTPUT1"), a - a)
    finally:
        c.close()


def test_grpc_refusals_change_nothing(restricted):
    c = grpcclient.InferenceServerClient(restricted.grpc_url)
    repo = grpc_headers("model-repository")
    try:
        before = c.get_model_repository_index(headers=repo, as_json=True)
        for call in [lambda: c.load_model("add_sub_nobatch"), lambda: c.unload_model("add_sub"),
                     lambda: c.register_system_shared_memory("r", "/nonexistent", 64)]:
            with pytest.raises(InferenceServerException) as e:
                call()
            assert e.value.status() == "StatusCode.UNAVAILABLE"
        assert c.get_model_repository_index(headers=repo, as_json=True) == before
        assert c.get_system_shared_memory_status(headers=grpc_headers("shared-memory"), as_json=True) == {}
        settings = c.get_log_settings(headers=grpc_headers("logging"), as_json=True)
        with pytest.raises(InferenceServerException):
            c.update_log_settings({"log_verbose_level": 3})
        assert c.get_log_settings(headers=grpc_headers("logging"), as_json=True) == settings
        # With the metadata the same calls go through.
        c.load_model("add_sub_nobatch", headers=repo)
        assert c.is_model_ready("add_sub_nobatch", headers=grpc_headers("health"))
        c.unload_model("add_sub_nobatch", headers=repo)
    finally:
        c.close()


def test_only_the_named_categories_are_restricted(start_server, repo_copy):
    """With model-repository restricted on HTTP and shared-memory on gRPC, everything else is
    open on both, and each protocol's flag restricts that protocol only."""
    srv = start_server(repo_copy(["add_sub"]), args=[
        "--http-restricted-api=model-repository:admin=yes",
        "--grpc-restricted-protocol=shared-memory:admin=yes"])
    assert requests.get(srv.base + "/v2/health/ready", timeout=30).status_code == 200
    r = requests.post(srv.base + "/v2/models/add_sub/infer", data=json.dumps(add_sub_body()), timeout=30)
    assert r.status_code == 200, r.text
    assert requests.get(srv.base + "/v2/systemsharedmemory/status", timeout=30).status_code == 200
    assert requests.post(srv.base + "/v2/repository/index", timeout=30).status_code == 403
    assert requests.post(srv.base + "/v2/repository/index", headers={"admin": "yes"}, timeout=30).status_code == 200
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        assert c.is_server_ready()
        assert c.get_model_repository_index(as_json=True)["models"][0]["name"] == "add_sub"
        with pytest.raises(InferenceServerException) as e:
            c.get_system_shared_memory_status()
        assert e.value.message() == ("This protocol is restricted, expecting header "
                                     "'triton-grpc-protocol-admin'")
        c.get_system_shared_memory_status(headers={"triton-grpc-protocol-admin": "yes"})
    finally:
        c.close()


@pytest.mark.parametrize("flag,message", [
    ("--http-restricted-api=foo:a=b", "unknown restricted api 'foo'"),
    ("--grpc-restricted-protocol=bar:a=b", "unknown restricted protocol 'bar'"),
    # Tritium's own category guards the actor page on the metrics port: HTTP only.
    ("--grpc-restricted-protocol=actors:a=b", "restricted protocol 'actors' is the actor page on the metrics port"),
    ("--http-restricted-api=health:a", "--http-restricted-api option format is "
                                       "'<config name>:<setting>=<value>'. Got health:a"),
    ("--http-restricted-api=model-repository,admin-key=secret", "option format is"),
])
def test_bad_restrictions_refuse_to_start(tmp_path, flag, message):
    http, grpc_port, metrics = free_ports(3)
    code, out = run_to_exit(["--model-repository", str(tmp_path), f"--http-port={http}",
                             f"--grpc-port={grpc_port}", f"--metrics-port={metrics}", flag])
    assert code != 0 and message in out, out
    assert "started HTTPService" not in out, out


def test_a_category_in_two_groups_refuses_to_start(tmp_path):
    code, out = run_to_exit(["--model-repository", str(tmp_path), "--http-restricted-api=health:a=b",
                             "--http-restricted-api=metadata,health:c=d"])
    assert code != 0, out
    assert "restricted api 'health' can not be specified in multiple config groups" in out, out

