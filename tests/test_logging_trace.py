"""Triton's logging and trace extensions against the real binary, with tritonclient unchanged:
the log settings (read, changed live, bad values refused) over HTTP and gRPC, each request's id
in its log lines at --log-verbose 1 and none at 0, the trace settings (global and per model),
and the trace file: Triton's records, the points in the order a request passes them, sampling
by rate and count, per-model overrides, and nothing written while tracing is OFF."""
import json
import queue
import re
import time

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from helpers import error_text, wait_until

MODELS = ["add_sub", "identity_fp32"]

LOG_DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
                "log_verbose_level": 0, "log_format": "default"}

HTTP_POINTS = ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
               "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
               "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
GRPC_POINTS = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"] + HTTP_POINTS[2:10] + ["GRPC_SEND_START", "GRPC_SEND_END"]



def http_add_sub(client, request_id=""):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    ins = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    res = client.infer("add_sub", ins, request_id=request_id)
    np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + a)


def grpc_inputs(model):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    names = ["INPUT0", "INPUT1"] if model == "add_sub" else ["INPUT0"]
    ins = [grpcclient.InferInput(n, [1, 16], "FP32") for n in names]
    for i in ins:
        i.set_data_from_numpy(a)
    return ins


def http_identity(client, request_id=""):
    i = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    i.set_data_from_numpy(np.ones((1, 3), np.float32))
    client.infer("identity_fp32", [i], request_id=request_id)


def grpc_client(srv):
    return grpcclient.InferenceServerClient(srv.grpc_url)


def grpc_log_dict(response):
    return {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in response.settings.items()}


def grpc_trace_dict(response):
    return {k: list(v.value) for k, v in response.settings.items()}


def traces(path):
    """{request_id or trace id: (header, [(name, ns)...])} of a trace file, which must be JSON."""
    records = json.loads(path.read_text())
    headers = {r["id"]: r for r in records if "model_name" in r}
    points = {}
    for r in records:
        if "timestamps" in r:
            for t in r["timestamps"]:
                points.setdefault(r["id"], []).append((t["name"], t["ns"]))
    return {h.get("request_id", h["id"]): (h, points.get(i, [])) for i, h in headers.items()}


def trace_ids(path):
    return set(traces(path)) if path.exists() else set()


# ---------------------------------------------------------------- logging


def test_server_metadata_lists_logging_and_trace(start_server, repo_copy):
    srv = start_server(repo_copy(["identity_fp32"]))
    extensions = srv.client.get_server_metadata()["extensions"]
    assert "logging" in extensions and "trace" in extensions
    assert {"logging", "trace"} <= set(grpc_client(srv).get_server_metadata().extensions)


def test_log_settings_defaults_then_changed_live_over_both_protocols(start_server, repo_copy):
    srv = start_server(repo_copy(MODELS))
    http, grpc_c = srv.client, grpc_client(srv)
    assert http.get_log_settings() == LOG_DEFAULTS
    assert grpc_log_dict(grpc_c.get_log_settings()) == LOG_DEFAULTS

    changed = http.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601", "log_info": False})
    assert changed == {**LOG_DEFAULTS, "log_verbose_level": 1, "log_format": "ISO8601", "log_info": False}
    assert grpc_log_dict(grpc_c.get_log_settings()) == changed
    http_add_sub(http, "iso-line-1")
    line = wait_until(lambda: [l for l in srv.log_tail(100_000).splitlines() if "iso-line-1" in l], what="a log line")[0]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ \S+:\d+\] ", line), line

    # gRPC changes what HTTP reads; null / unset values change nothing.
    got = grpc_log_dict(grpc_c.update_log_settings({"log_format": "default", "log_warning": False, "log_info": True}))
    assert got == {**changed, "log_format": "default", "log_warning": False, "log_info": True}
    assert http.update_log_settings({"log_error": None}) == got
    http_add_sub(http, "default-line-1")
    line = wait_until(lambda: [l for l in srv.log_tail(100_000).splitlines() if "default-line-1" in l], what="a log line")[0]
    assert re.match(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ \S+:\d+\] ", line), line
    http.update_log_settings(LOG_DEFAULTS | {"log_file": None})
    assert http.get_log_settings() == LOG_DEFAULTS


@pytest.mark.parametrize("body, status, fragment", [
    ({"log_info": "false"}, 400, "expect boolean for 'log_info'"),
    ({"log_warning": 1}, 400, "expect boolean for 'log_warning'"),
    ({"log_verbose_level": -1}, 400, "non-negative integer"),
    ({"log_verbose_level": "1"}, 400, "non-negative integer"),
    ({"log_verbose_level": 1.5}, 400, "non-negative integer"),
    ({"log_format": "json"}, 400, "invalid argument for --log_format, got: json"),
    ({"log_colour": True}, 400, "unknown log setting 'log_colour'"),
    ([1, 2], 400, "JSON object"),
    ({"log_file": "/tmp/elsewhere.log"}, 501, "log file location can not be updated"),
])
def test_bad_log_settings_are_refused_over_http(server, body, status, fragment):
    # A good value in the same request is not applied either.
    if isinstance(body, dict):
        body = {"log_verbose_level": 3, **body} if "log_verbose_level" not in body else body
    r = server.post("/v2/logging", body)
    assert r.status_code == status, r.text
    assert fragment in error_text(r)
    assert server.get("/v2/logging").json() == LOG_DEFAULTS


def test_bad_log_settings_are_refused_over_grpc(server):
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
    cases = [("log_info", "string_param", "true", "expect boolean for 'log_info'"),
             ("log_verbose_level", "bool_param", True, "non-negative integer"),
             ("log_format", "string_param", "json", "invalid argument for --log_format"),
             ("verbosity", "uint32_param", 1, "unknown log setting 'verbosity'")]
    for key, field, value, fragment in cases:
        request = service_pb2.LogSettingsRequest()
        setattr(request.settings[key], field, value)
        with pytest.raises(grpc.RpcError) as e:
            stub.LogSettings(request)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, key
        assert fragment in e.value.details()
    with pytest.raises(InferenceServerException, match="log file location can not be updated"):
        grpcclient.InferenceServerClient(server.grpc_url).update_log_settings({"log_file": "/tmp/x.log"})
    assert server.get("/v2/logging").json() == LOG_DEFAULTS


def test_request_ids_in_log_lines_at_verbose_1_and_not_at_0(start_server, repo_copy):
    srv = start_server(repo_copy(MODELS))
    http, grpc_c = srv.client, grpc_client(srv)
    http_add_sub(http, "quiet-http-1")
    grpc_c.infer("add_sub", grpc_inputs("add_sub"), request_id="quiet-grpc-1")

    http.update_log_settings({"log_verbose_level": 1})
    http_add_sub(http, "loud-http-7")
    grpc_c.infer("add_sub", grpc_inputs("add_sub"), request_id="loud-grpc-7")
    http_add_sub(http)  # no id: the server makes one up for its lines
    results = queue.Queue()
    grpc_c.start_stream(callback=lambda result, error: results.put((result, error)))
    grpc_c.async_stream_infer("add_sub", grpc_inputs("add_sub"), request_id="loud-stream-7")
    assert results.get(timeout=30)[1] is None
    grpc_c.stop_stream()

    http.update_log_settings({"log_verbose_level": 0})
    http_add_sub(http, "quiet-http-2")

    log = srv.log_tail(1_000_000)
    for rid in ["loud-http-7", "loud-grpc-7", "loud-stream-7"]:
        lines = [l for l in log.splitlines() if f"id={rid}" in l]
        assert any("received" in l for l in lines) and any("answered" in l for l in lines), (rid, log[-3000:])
        assert all("model=add_sub" in l for l in lines)
    assert re.search(r"request\{id=tritium-\d+ model=add_sub\}: HTTP infer request received", log)
    for rid in ["quiet-http-1", "quiet-grpc-1", "quiet-http-2"]:
        assert rid not in log


def test_log_flags_file_format_and_levels(start_server, repo_copy, tmp_path):
    log_file = tmp_path / "tritium.log"
    srv = start_server(repo_copy(MODELS), args=["--log-file", str(log_file), "--log-format", "ISO8601",
                                                "--log-info", "false", "--log-verbose", "1"])
    settings = srv.client.get_log_settings()
    assert settings == {**LOG_DEFAULTS, "log_file": str(log_file), "log_format": "ISO8601",
                        "log_info": False, "log_verbose_level": 1}
    http_add_sub(srv.client, "to-the-file-3")
    text = wait_until(lambda: "to-the-file-3" in log_file.read_text() and log_file.read_text(), what="the log file")
    lines = [l for l in text.splitlines() if "to-the-file-3" in l]
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I ", l) for l in lines), lines
    assert "successfully loaded" not in text  # an info line, and --log-info is false
    assert "to-the-file-3" not in srv.log_tail(100_000)  # not on stderr


# ---------------------------------------------------------------- trace settings


def trace_args(path, *extra):
    return ["--trace-config", f"triton,file={path}", *sum((["--trace-config", e] for e in extra), [])]


def test_trace_settings_defaults_and_updates_over_both_protocols(start_server, repo_copy, tmp_path):
    path = tmp_path / "trace.json"
    srv = start_server(repo_copy(MODELS), args=trace_args(path, "level=TIMESTAMPS", "rate=1", "count=-1", "log_frequency=0"))
    http, grpc_c = srv.client, grpc_client(srv)
    initial = {"trace_file": str(path), "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
               "log_frequency": "0", "trace_mode": "triton"}
    assert http.get_trace_settings() == initial
    assert http.get_trace_settings(model_name="add_sub") == initial
    assert grpc_trace_dict(grpc_c.get_trace_settings()) == {k: v if isinstance(v, list) else [v] for k, v in initial.items()}

    # Model first, then global: the global change reaches only the fields the model did not set.
    assert http.update_trace_settings(model_name="add_sub", settings={"trace_rate": "12", "log_frequency": "34"}) == \
        {**initial, "trace_rate": "12", "log_frequency": "34"}
    got = grpc_trace_dict(grpc_c.update_trace_settings(settings={"trace_rate": "56", "trace_count": "78", "trace_level": ["OFF"]}))
    assert got["trace_rate"] == ["56"] and got["trace_count"] == ["78"] and got["trace_level"] == ["OFF"]
    assert http.get_trace_settings(model_name="add_sub") == \
        {**initial, "trace_rate": "12", "log_frequency": "34", "trace_count": "78", "trace_level": ["OFF"]}
    assert http.get_trace_settings(model_name="identity_fp32") == http.get_trace_settings()

    # Clearing (null / an empty gRPC value) returns a global field to its flag, a model's to global.
    assert http.update_trace_settings(settings={"trace_rate": None, "trace_count": None}) == {**initial, "trace_level": ["OFF"]}
    model = grpc_trace_dict(grpc_c.update_trace_settings(model_name="add_sub", settings={"trace_rate": None, "trace_level": None}))
    assert model["trace_rate"] == ["1"] and model["log_frequency"] == ["34"] and model["trace_level"] == ["OFF"]
    assert http.update_trace_settings(model_name="add_sub", settings={"log_frequency": None}) == http.get_trace_settings()


@pytest.mark.parametrize("settings, status, fragment", [
    ({"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
    ({"trace_rate": 5}, 400, "expect a string for 'trace_rate'"),
    ({"trace_rate": "0", "trace_level": ["TIMESTAMPS"]}, 400, "sample rate must be non-zero"),
    ({"trace_count": "-2"}, 400, "Expecting value >= -1"),
    ({"log_frequency": "often"}, 400, "Unable to parse 'log_frequency'"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "Expect only one trace level 'OFF'"),
    ({"trace_level": ["LOUD"]}, 400, "unknown trace level 'LOUD'"),
    ({"trace_sampling": "1"}, 400, "unknown trace setting 'trace_sampling'"),
    ({"trace_file": "/tmp/other.json"}, 501, "trace file location can not be updated through network protocol"),
])
def test_bad_trace_settings_are_refused_over_http(server, settings, status, fragment):
    before = server.get("/v2/trace/setting").json()
    r = server.post("/v2/trace/setting", {"log_frequency": "7", **settings})
    assert r.status_code == status, r.text
    assert fragment in error_text(r)
    assert server.get("/v2/trace/setting").json() == before


def test_trace_settings_of_an_unknown_model_and_bad_values_over_grpc(server):
    r = server.get("/v2/models/no_such_model/trace/setting")
    assert r.status_code == 400 and "Request for unknown model : no_such_model" in error_text(r)
    c = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException, match="Request for unknown model : no_such_model"):
        c.get_trace_settings(model_name="no_such_model")
    with pytest.raises(InferenceServerException, match="Unable to parse 'trace_rate', got: abc") as e:
        c.update_trace_settings(settings={"trace_rate": "abc"})
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="expect only 1 value for 'trace_count'"):
        c.update_trace_settings(settings={"trace_count": ["1", "2"]})
    with pytest.raises(InferenceServerException, match="trace file location can not be updated") as e:
        c.update_trace_settings(settings={"trace_file": "/tmp/x.json"})
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"


# ---------------------------------------------------------------- trace files


def assert_points(points, expected):
    names = [n for n, _ in points]
    assert names == expected, names
    stamps = [ns for _, ns in points]
    assert stamps == sorted(stamps) and stamps[0] > 0


def test_trace_file_has_every_point_of_http_grpc_and_stream_requests(start_server, repo_copy, tmp_path):
    path = tmp_path / "trace.json"
    srv = start_server(repo_copy(MODELS), args=trace_args(path, "level=TIMESTAMPS", "rate=1"))
    http_add_sub(srv.client, "http-1")
    g = grpc_client(srv)
    g.infer("add_sub", grpc_inputs("add_sub"), request_id="grpc-1")
    results = queue.Queue()
    g.start_stream(callback=lambda result, error: results.put((result, error)))
    g.async_stream_infer("identity_fp32", grpc_inputs("identity_fp32"), request_id="stream-1")
    assert results.get(timeout=30)[1] is None
    g.stop_stream()
    wait_until(lambda: {"http-1", "grpc-1", "stream-1"} <= trace_ids(path), what="three traces")
    # The file is a closed JSON array while the server runs, and after it stops.
    got = traces(path)
    header, points = got["http-1"]
    assert header == {"id": header["id"], "model_name": "add_sub", "model_version": 1, "request_id": "http-1"}
    assert_points(points, HTTP_POINTS)
    assert_points(got["grpc-1"][1], GRPC_POINTS)
    assert got["stream-1"][0]["model_name"] == "identity_fp32"
    assert_points(got["stream-1"][1], GRPC_POINTS)
    assert len({h["id"] for h, _ in got.values()}) == 3
    assert srv.stop() == 0
    assert set(traces(path)) == {"http-1", "grpc-1", "stream-1"}


def test_generate_requests_are_traced_like_infer_requests(start_server, repo_copy, tmp_path):
    path = tmp_path / "trace.json"
    srv = start_server(repo_copy(MODELS), args=trace_args(path, "level=TIMESTAMPS", "rate=1"))
    body = {"INPUT0": [1.0] * 16, "INPUT1": [2.0] * 16}
    for route, rid in [("generate", "gen-1"), ("generate_stream", "gen-stream-1")]:
        r = requests.post(f"{srv.base}/v2/models/add_sub/{route}", json={**body, "id": rid}, timeout=30)
        assert r.status_code == 200, r.text
    wait_until(lambda: {"gen-1", "gen-stream-1"} <= trace_ids(path), what="two traces")
    got = traces(path)
    for rid in ["gen-1", "gen-stream-1"]:
        assert got[rid][0]["model_name"] == "add_sub"
        assert_points(got[rid][1], HTTP_POINTS[:10])


def test_trace_rate_and_count_are_honoured(start_server, repo_copy, tmp_path):
    path = tmp_path / "trace.json"
    srv = start_server(repo_copy(MODELS), args=trace_args(path, "level=TIMESTAMPS", "rate=3", "count=2"))
    for i in range(12):
        http_add_sub(srv.client, f"r{i}")
    # The 3rd and the 6th request; then the count is spent.
    wait_until(lambda: trace_ids(path) == {"r2", "r5"}, what="the 3rd and 6th requests' traces")
    assert srv.client.get_trace_settings()["trace_count"] == "0"
    time.sleep(0.3)
    assert trace_ids(path) == {"r2", "r5"}


def test_model_setting_overrides_global_and_off_writes_nothing(start_server, repo_copy, tmp_path):
    path = tmp_path / "trace.json"
    srv = start_server(repo_copy(MODELS), args=trace_args(path, "rate=1"))  # level OFF by default
    http = srv.client
    for i in range(3):
        http_add_sub(http, f"off-{i}")
        http_identity(http, f"off-id-{i}")
    time.sleep(0.3)
    assert not path.exists(), "tracing is OFF: no file"

    http.update_trace_settings(model_name="add_sub", settings={"trace_level": ["TIMESTAMPS"]})
    assert http.get_trace_settings()["trace_level"] == ["OFF"]
    http_add_sub(http, "model-on-1")
    http_identity(http, "global-off-1")
    grpc_client(srv).infer("add_sub", grpc_inputs("add_sub"), request_id="model-on-2")
    wait_until(lambda: {"model-on-1", "model-on-2"} <= trace_ids(path), what="the model's traces")

    # Back to the global setting (OFF): nothing more is written.
    assert http.update_trace_settings(model_name="add_sub", settings={"trace_level": None}) == http.get_trace_settings()
    http_add_sub(http, "model-off-again")
    http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    http_identity(http, "global-on-1")
    wait_until(lambda: "global-on-1" in trace_ids(path), what="the global trace")
    http.update_trace_settings(settings={"trace_level": ["OFF"]})
    http_identity(http, "global-off-2")
    time.sleep(0.3)
    assert trace_ids(path) == {"model-on-1", "model-on-2", "global-on-1"}


def test_log_frequency_writes_indexed_files(start_server, repo_copy, tmp_path):
    path = tmp_path / "trace.json"
    srv = start_server(repo_copy(MODELS), args=trace_args(path, "level=TIMESTAMPS", "rate=1", "triton,log-frequency=2"))
    for i in range(5):
        http_add_sub(srv.client, f"f{i}")
    indexed = [tmp_path / f"trace.json.{i}" for i in range(3)]
    wait_until(lambda: indexed[1].exists(), what="two indexed files")
    assert set(traces(indexed[0])) == {"f0", "f1"} and set(traces(indexed[1])) == {"f2", "f3"}
    assert not indexed[2].exists() and not path.exists()
    assert srv.stop() == 0
    assert set(traces(indexed[2])) == {"f4"}, "the rest is written at exit"
