"""Triton's OpenTelemetry trace mode (`--trace-config mode=opentelemetry`) against the real
binary: the spans it exports over OTLP/HTTP are received by an in-test receiver on loopback
(tests/otlp_receiver.py, which decodes them with the official `opentelemetry-proto` definitions;
no collector or Jaeger runs here) and checked for Triton's layout: an `InferRequest` root span
with the frontend's points, the model's span with REQUEST_START/QUEUE_START/REQUEST_END and the
`triton.*` attributes, its `compute` span, an ensemble's composing models under the ensemble's
span, the client's W3C `traceparent` (HTTP header, gRPC metadata) as the root's parent, the
rate and count, the trace extension, and a collector that is down."""
import queue
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import free_ports, run_to_exit, wait_until
from otlp_receiver import Receiver, attributes

MODELS = ["add_sub", "identity_fp32", "add_sub_pipeline"]
CLIENT_TRACE = "0af7651916cd43dd8448eb211c12666c"
CLIENT_SPAN = "b7ad6b7169242424"


def traceparent():
    """The client's context as W3C trace context headers (a new dict: tritonclient's HTTP client
    adds its own headers to the one it is given)."""
    return {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}


SPAN_KIND_SERVER = 2
REQUEST_POINTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_POINTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
HTTP_ROOT = ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
GRPC_ROOT = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"]


def otel_args(url, *extra):
    flags = ["mode=opentelemetry", f"opentelemetry,url={url}", "opentelemetry,resource=service.name=test_triton",
             "opentelemetry,resource=test.key=test.value", "opentelemetry,bsp_schedule_delay=50",
             "level=TIMESTAMPS", *extra]
    return sum((["--trace-config", f] for f in flags), [])


def inputs(proto, model="add_sub"):
    a, b = (np.arange(16, dtype=np.float32).reshape(1, 16) for _ in range(2))
    names = ("IN0", "IN1") if model == "add_sub_pipeline" else ("INPUT0", "INPUT1")
    out = [proto.InferInput(n, [1, 16], "FP32") for n in names]
    out[0].set_data_from_numpy(a)
    out[1].set_data_from_numpy(b)
    return out


def event_names(span):
    return [e.name for e in span.events]


def check_ordered(span):
    """The span's events are in time order and inside the span."""
    times = [e.time_unix_nano for e in span.events]
    assert times == sorted(times), f"{span.name}: events out of order {event_names(span)}"
    if times:
        assert span.start_time_unix_nano <= times[0] and times[-1] <= span.end_time_unix_nano, span.name


def by_parent(spans):
    ids = {s.span_id: s for s in spans}
    return {s.name: ids.get(s.parent_span_id) for s in spans}, ids


def check_model_span(span, parent, model, version, parent_trace_id=0, request_id=None):
    assert span.parent_span_id == parent.span_id, f"{model} is not under {parent.name}"
    assert span.kind == SPAN_KIND_SERVER
    assert event_names(span) == REQUEST_POINTS, (model, event_names(span))
    attrs = attributes(span.attributes)
    assert attrs["triton.model_name"] == model and attrs["triton.model_version"] == version
    assert attrs["triton.trace_id"] > 0 and attrs["triton.trace_parent_id"] == parent_trace_id
    assert attrs.get("triton.request_id") == request_id
    check_ordered(span)
    assert parent.start_time_unix_nano <= span.start_time_unix_nano <= span.end_time_unix_nano <= parent.end_time_unix_nano
    return attrs["triton.trace_id"]


def check_compute(spans, model_span):
    compute = [s for s in spans if s.name == "compute" and s.parent_span_id == model_span.span_id]
    assert len(compute) == 1, f"{model_span.name}: {len(compute)} compute spans"
    c = compute[0]
    assert event_names(c) == COMPUTE_POINTS, event_names(c)
    check_ordered(c)
    assert model_span.start_time_unix_nano <= c.start_time_unix_nano <= c.end_time_unix_nano <= model_span.end_time_unix_nano


def only_trace(receiver, expected_spans):
    traces = receiver.traces(1)
    assert len(traces) == 1, f"{len(traces)} traces"
    (spans,) = traces.values()
    wait_until(lambda: len(receiver.all()) >= expected_spans, timeout=10, what=f"{expected_spans} spans")
    spans = [s for _, _, s in receiver.all()]
    assert len(spans) == expected_spans, [s.name for s in spans]
    return spans


def test_http_request_spans_follow_tritons_layout(start_server, repo_copy):
    with Receiver() as rx:
        srv = start_server(repo_copy(MODELS), args=otel_args(rx.url, "rate=1"))
        srv.client.infer("add_sub", inputs(httpclient), request_id="r-1")
        spans = only_trace(rx, 3)
        assert not rx.bad, rx.bad
        resource, scope, _ = rx.all()[0]
        assert resource["service.name"] == "test_triton" and resource["test.key"] == "test.value"
        assert scope == "triton-server"
        names, _ = by_parent(spans)
        root = next(s for s in spans if s.name == "InferRequest")
        model = next(s for s in spans if s.name == "add_sub")
        assert root.parent_span_id == b"" and root.kind == SPAN_KIND_SERVER
        assert event_names(root) == HTTP_ROOT, event_names(root)
        check_ordered(root)
        check_model_span(model, root, "add_sub", 1, request_id="r-1")
        check_compute(spans, model)
        assert names == {"InferRequest": None, "add_sub": root, "compute": model}


def test_grpc_and_stream_requests_take_the_clients_traceparent(start_server, repo_copy):
    with Receiver() as rx:
        srv = start_server(repo_copy(MODELS), args=otel_args(rx.url, "rate=1"))
        with grpcclient.InferenceServerClient(srv.grpc_url) as g:
            g.infer("add_sub", inputs(grpcclient), headers=traceparent())
            spans = only_trace(rx, 3)
            root = next(s for s in spans if s.name == "InferRequest")
            assert root.trace_id.hex() == CLIENT_TRACE and root.parent_span_id.hex() == CLIENT_SPAN
            assert event_names(root) == GRPC_ROOT, event_names(root)
            check_ordered(root)
            model = next(s for s in spans if s.name == "add_sub")
            check_model_span(model, root, "add_sub", 1)
            check_compute(spans, model)
            # A stream's metadata is the parent of each of its requests.
            answers = queue.Queue()
            g.start_stream(callback=lambda result, error: answers.put(error or result),
                           headers={"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"})
            g.async_stream_infer("add_sub", inputs(grpcclient))
            assert not isinstance(answers.get(timeout=30), InferenceServerException)
            g.stop_stream()
        traces = rx.traces(2)
        stream = traces["1" * 32]
        root = next(s for s in stream if s.name == "InferRequest")
        assert root.parent_span_id.hex() == "2" * 16 and event_names(root) == GRPC_ROOT
        assert sorted(s.name for s in stream) == ["InferRequest", "add_sub", "compute"]


def test_ensemble_steps_are_spans_under_the_ensembles_span(start_server, repo_copy):
    with Receiver() as rx:
        srv = start_server(repo_copy(MODELS), args=otel_args(rx.url, "rate=1"))
        srv.client.infer("add_sub_pipeline", inputs(httpclient, "add_sub_pipeline"), headers=traceparent())
        spans = only_trace(rx, 6)
        assert sorted(s.name for s in spans) == \
            ["InferRequest", "add_sub", "add_sub_pipeline", "compute", "compute", "identity_fp32"]
        assert {s.trace_id.hex() for s in spans} == {CLIENT_TRACE}
        root = next(s for s in spans if s.name == "InferRequest")
        assert root.parent_span_id.hex() == CLIENT_SPAN and event_names(root) == HTTP_ROOT
        ensemble = next(s for s in spans if s.name == "add_sub_pipeline")
        ensemble_id = check_model_span(ensemble, root, "add_sub_pipeline", 1)
        # Triton: an ensemble's span has the composing models under it and no compute span.
        assert not [s for s in spans if s.name == "compute" and s.parent_span_id == ensemble.span_id]
        steps = {}
        for name in ("add_sub", "identity_fp32"):
            step = next(s for s in spans if s.name == name)
            steps[name] = step
            check_model_span(step, ensemble, name, 1, parent_trace_id=ensemble_id)
            check_compute(spans, step)
        # identity_fp32 reads add_sub's output: it starts after add_sub has answered.
        assert steps["add_sub"].end_time_unix_nano <= steps["identity_fp32"].start_time_unix_nano


def test_rate_and_count_sample_and_a_traceparent_is_always_traced(start_server, repo_copy):
    with Receiver() as rx:
        srv = start_server(repo_copy(MODELS), args=otel_args(rx.url, "rate=3", "count=2"))
        for _ in range(9):
            srv.client.infer("add_sub", inputs(httpclient))
        rx.traces(2)
        time.sleep(1.0)  # several export periods: nothing more may come
        assert rx.count("InferRequest") == 2 and rx.count("add_sub") == 2
        assert srv.client.get_trace_settings()["trace_count"] == "0"
        # Triton traces every request that carries a client's context, whatever the rate and count.
        for _ in range(3):
            srv.client.infer("add_sub", inputs(httpclient), headers=traceparent())
        traces = rx.traces(5)
        assert len(traces[CLIENT_TRACE]) == 9


def test_rate_zero_traces_only_requests_with_a_traceparent(start_server, repo_copy):
    with Receiver() as rx:
        srv = start_server(repo_copy(MODELS), args=otel_args(rx.url, "rate=0"))
        for _ in range(5):
            srv.client.infer("add_sub", inputs(httpclient))
        with grpcclient.InferenceServerClient(srv.grpc_url) as g:
            g.infer("add_sub", inputs(grpcclient), headers=traceparent())
        traces = rx.traces(1)
        time.sleep(1.0)
        assert rx.count("InferRequest") == 1 and list(traces) == [CLIENT_TRACE]


def test_trace_extension_reports_the_mode_and_changes_the_sampling(start_server, repo_copy):
    with Receiver() as rx:
        srv = start_server(repo_copy(MODELS), args=otel_args(rx.url, "rate=1000"))
        http = srv.client
        settings = http.get_trace_settings()
        assert settings["trace_mode"] == "opentelemetry" and settings["trace_rate"] == "1000"
        assert settings["trace_level"] == ["TIMESTAMPS"]
        # Turned up over gRPC for one model, then used by HTTP requests.
        with grpcclient.InferenceServerClient(srv.grpc_url) as g:
            got = g.update_trace_settings(model_name="add_sub", settings={"trace_rate": "1"}, as_json=True)
            assert got["settings"]["trace_rate"]["value"] == ["1"]
        for _ in range(2):
            http.infer("add_sub", inputs(httpclient))
        rx.traces(2)
        # The mode and the file are startup flags.
        r = requests.post(f"{srv.base}/v2/trace/setting", json={"trace_mode": "triton"})
        assert r.status_code == 501 and "startup flag" in r.json()["error"], r.text
        assert http.update_trace_settings(settings={"trace_mode": "opentelemetry"})["trace_mode"] == "opentelemetry"
        # Level OFF stops tracing.
        http.update_trace_settings(model_name="add_sub", settings={"trace_level": ["OFF"]})
        http.infer("add_sub", inputs(httpclient))
        time.sleep(1.0)
        assert rx.count("InferRequest") == 2


def test_collector_down_the_server_keeps_serving_and_logs(start_server, repo_copy):
    (dead,) = free_ports(1)
    srv = start_server(repo_copy(MODELS), args=otel_args(f"http://127.0.0.1:{dead}/v1/traces", "rate=1"))
    started = time.monotonic()
    for _ in range(40):
        out = srv.client.infer("add_sub", inputs(httpclient)).as_numpy("OUTPUT0")
        assert out.shape == (1, 16)
    with grpcclient.InferenceServerClient(srv.grpc_url) as g:
        g.infer("add_sub", inputs(grpcclient), headers=traceparent())
    # 41 requests answered while every export fails: none of them waited on the collector.
    assert time.monotonic() - started < 30
    wait_until(lambda: "OpenTelemetry trace export to" in srv.log_tail(20000), timeout=20,
               what="the failed export in the log")
    assert requests.get(f"{srv.base}/v2/health/ready").status_code == 200


@pytest.mark.parametrize("flag,text", [
    ("opentelemetry,url=localhost:4318", "expected an http:// URL"),
    ("opentelemetry,resource=service.name", "expected <key>=<value>"),
    ("opentelemetry,bsp_max_queue_size=zero", "positive whole number"),
    ("opentelemetry,sampler=always", "unknown setting 'sampler'"),
    ("mode=zipkin", "expected 'triton' or 'opentelemetry'"),
])
def test_bad_opentelemetry_flags_stop_the_server_with_a_message(repo_copy, flag, text):
    code, out = run_to_exit(["--model-repository", str(repo_copy(["add_sub"])), "--trace-config",
                             "mode=opentelemetry", "--trace-config", flag], timeout=60)
    assert code != 0 and text in out, out
