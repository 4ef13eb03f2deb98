"""The figures Tritium shows beyond Triton, and the `--metrics-config` families, read from a
real server's /metrics (parsed with test_metrics.parse_exposition): the sequence actor's active
sequences, slots, state bytes and backlog; the batcher's batch-size and wait histograms; the
ensemble's per-step latency; Triton's optional summaries and first-response histogram; and
`counter_latencies=false`."""
import queue
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import Server
from test_metrics import all_stats, scrape

ACC_STATE_BYTES = 4  # accumulate's state: one INT32


def acc_step(client, seq, v, start=False, end=False):
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    res = client.infer("accumulate", [inp], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(res.as_numpy("OUTPUT")[0][0])


def pipeline(client, i):
    a = np.full((1, 16), i, dtype=np.float32)
    ins = [httpclient.InferInput("IN0", [1, 16], "FP32"), httpclient.InferInput("IN1", [1, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    res = client.infer("add_sub_pipeline", ins)
    np.testing.assert_array_equal(res.as_numpy("OUT"), a + a)


@pytest.fixture
def srv(start_server, repo_copy):
    repo = repo_copy(["accumulate", "add_sub", "identity_fp32", "add_sub_pipeline", "repeat_int32"])
    return start_server(repo, args=["--metrics-config", "summary_latencies=true",
                                    "--metrics-config", "summary_quantiles=0.5:0.05,0.99:0.001",
                                    "--metrics-config", "histogram_latencies=true",
                                    "--metrics-interval-ms", "100"])


def test_sequence_actor_figures_follow_the_conversations(srv):
    c = srv.client
    labels = {"model": "accumulate", "version": "1"}
    for seq in (11, 12, 13):
        assert acc_step(c, seq, seq, start=True) == seq
    m = scrape(srv)
    assert m["tritium_sequence_active"].type == "gauge"
    assert m["tritium_sequence_active"].value(**labels) == 3
    assert m["tritium_sequence_backlog"].value(**labels) == 0
    assert m["tritium_sequence_state_bytes"].value(**labels) == 3 * ACC_STATE_BYTES
    assert m["tritium_sequence_idle_releases_total"].type == "counter"
    assert m["tritium_sequence_idle_releases_total"].value(**labels) == 0
    slots = m["tritium_instance_sequence_slots_used"]
    per_instance = [v for l, v in slots.series() if l["model"] == "accumulate"]
    assert len(per_instance) == 2 and sum(per_instance) == 3, slots.series()
    assert all(l["model"] == "accumulate" for l, _ in slots.series()), "only sequence models have slots"
    assert all(l["model"] == "accumulate" for l, _ in m["tritium_sequence_active"].series())
    for seq in (11, 12, 13):
        assert acc_step(c, seq, 1, end=True) == seq + 1
    m = scrape(srv)
    assert m["tritium_sequence_active"].value(**labels) == 0
    assert m["tritium_sequence_state_bytes"].value(**labels) == 0
    assert sum(v for l, v in m["tritium_instance_sequence_slots_used"].series()) == 0
    # Triton's families agree with the statistics extension for sequence traffic too.
    s = all_stats(srv)[("accumulate", "1")]
    assert m["nv_inference_request_success"].value(**labels) == int(s["inference_stats"]["success"]["count"]) == 6
    assert m["nv_inference_count"].value(**labels) == int(s["inference_count"]) == 6
    assert m["nv_inference_exec_count"].value(**labels) == int(s["execution_count"])
    assert m["nv_inference_queue_duration_us"].value(**labels) == int(s["inference_stats"]["queue"]["ns"]) // 1000


def test_batcher_histograms_agree_with_its_counters(srv):
    c = srv.client
    for i in range(6):
        pipeline(c, i)
    m = scrape(srv)
    sizes, delays = m["tritium_batcher_batch_size"], m["tritium_batcher_delay_us"]
    assert sizes.type == "histogram" and delays.type == "histogram" and sizes.help and delays.help
    for model in ("add_sub", "identity_fp32", "add_sub_pipeline"):
        l = {"model": model, "version": "1"}
        batches = m["tritium_batcher_batches_total"].value(**l)
        items = m["tritium_batcher_items_total"].value(**l)
        assert batches >= 1
        assert sizes.value("_count", **l) == batches
        assert sizes.value("_sum", **l) == items
        assert sizes.value("_bucket", le="+Inf", **l) == batches
        assert delays.value("_count", **l) == batches
        assert delays.value("_sum", **l) >= 0
        buckets = sorted((float(lab["le"]), v) for lab, v in sizes.series("_bucket") if lab["model"] == model)
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), "cumulative buckets"


def test_ensemble_step_latency_per_step(srv):
    c = srv.client
    n = 5
    for i in range(n):
        pipeline(c, i)
    fam = scrape(srv)["tritium_ensemble_step_duration_us"]
    assert fam.type == "histogram"
    steps = {(l["step"], l["step_model"]): v for l, v in fam.series("_count")}
    assert steps == {("1", "add_sub"): n, ("2", "identity_fp32"): n}, steps
    assert all(l["model"] == "add_sub_pipeline" and l["version"] == "1" for l, _ in fam.series("_count"))
    ensemble_ns = int(all_stats(srv)[("add_sub_pipeline", "1")]["inference_stats"]["success"]["ns"])
    steps_us = sum(v for _, v in fam.series("_sum"))
    assert 0 < steps_us <= ensemble_ns / 1000, "sequential steps take no longer than the ensemble requests"


def test_summaries_count_each_successful_request(srv):
    c = srv.client
    for i in range(7):
        pipeline(c, i)
    m = scrape(srv)
    stats = all_stats(srv)
    for name in ("nv_inference_request_summary_us", "nv_inference_queue_summary_us",
                 "nv_inference_compute_input_summary_us", "nv_inference_compute_infer_summary_us",
                 "nv_inference_compute_output_summary_us"):
        fam = m[name]
        assert fam.type == "summary", name
        for model in ("add_sub", "add_sub_pipeline"):
            l = {"model": model, "version": "1"}
            assert fam.value("_count", **l) == int(stats[(model, "1")]["inference_stats"]["success"]["count"]), (name, model)
            quantiles = {lab["quantile"] for lab, _ in fam.series() if lab["model"] == model}
            assert quantiles == {"0.5", "0.99"}, (name, quantiles)
    l = {"model": "add_sub", "version": "1"}
    total_us = int(stats[("add_sub", "1")]["inference_stats"]["success"]["ns"]) / 1000
    assert abs(m["nv_inference_request_summary_us"].value("_sum", **l) - total_us) <= 7, "whole µs per request"
    assert m["nv_inference_request_duration_us"].value(**l) > 0, "the counters stay on by default"
    assert 0 <= m["nv_cpu_utilization"].value() <= 1


def test_first_response_histogram_for_decoupled_models(srv):
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        n = 3
        for i in range(n):
            inp = grpcclient.InferInput("IN", [2], "INT32")
            inp.set_data_from_numpy(np.array([i, i + 1], dtype=np.int32))
            client.async_stream_infer("repeat_int32", [inp], request_id=str(i),
                                      enable_empty_final_response=True)
        finals = 0
        while finals < n:
            result, error = answers.get(timeout=10)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                finals += 1
    finally:
        client.stop_stream()
        client.close()
    m = scrape(srv)
    fam = m["nv_inference_first_response_histogram_ms"]
    assert fam.type == "histogram"
    l = {"model": "repeat_int32", "version": "1"}
    assert fam.value("_count", **l) == n
    assert {lab["le"] for lab, _ in fam.series("_bucket")} == {"100", "500", "2000", "5000", "+Inf"}
    assert all(lab["model"] == "repeat_int32" for lab, _ in fam.series("_count")), "decoupled models only"


def test_counter_latencies_off_drops_the_duration_counters(start_server, repo_copy):
    srv = start_server(repo_copy(["add_sub"]), args=["--metrics-config", "counter_latencies=false"])
    a = np.ones((1, 16), dtype=np.float32)
    ins = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    srv.client.infer("add_sub", ins)
    m = scrape(srv)
    assert m["nv_inference_request_success"].value(model="add_sub", version="1") == 1
    for name in ("nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_infer_duration_us", "nv_inference_request_summary_us"):
        assert name not in m or not m[name].samples, name


def test_bad_metrics_config_stops_the_server_with_a_clear_error(repo_copy):
    s = Server(repo_copy(["add_sub"]), args=["--metrics-config", "summary_latencies=maybe"])
    proc = subprocess.run(s.command(), capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "summary_latencies" in out and "true or false" in out, out
