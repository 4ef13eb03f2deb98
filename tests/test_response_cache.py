"""The response cache (issue 21): `--cache-config local,size=<bytes>` with
`response_cache { enable: true }`. A repeated request is a hit (the model does not run again)
with identical bytes, a changed input is a miss, the least recently used answers are evicted at
the size, the statistics extension (HTTP and gRPC) counts `cache_hit` / `cache_miss`, and the
metrics endpoint has Triton's `nv_cache_*_per_model` families. Sequence and decoupled models are
refused, as Triton refuses them.
"""
import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import identity_config

ELEMENTS = 256
# One answer's cost: 4 * 256 bytes of OUTPUT0, its name (7) and 8 bytes for its one dimension.
ENTRY = 4 * ELEMENTS + 7 + 8
CACHED = 'response_cache { enable: true }\n'


def add_model(repo, name, config):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)


def infer(client, model, value, elements=ELEMENTS):
    x = np.full(elements, value, dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [elements], "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    out = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    return out.as_numpy("OUTPUT0")


def stats(client, model):
    s = client.get_inference_statistics(model)["model_stats"][0]
    return {
        "exec": s["execution_count"],
        "inferences": s["inference_count"],
        "success": s["inference_stats"]["success"]["count"],
        "hit": s["inference_stats"]["cache_hit"]["count"],
        "miss": s["inference_stats"]["cache_miss"]["count"],
        "compute": s["inference_stats"]["compute_infer"]["count"],
        "hit_ns": s["inference_stats"]["cache_hit"]["ns"],
    }


def test_hits_misses_eviction_and_their_statistics(start_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, "cached", identity_config("cached", extra=CACHED))
    add_model(repo, "plain", identity_config("plain"))
    # Room for two answers, not three.
    srv = start_server(repo, args=[f"--cache-config=local,size={2 * ENTRY + ENTRY // 2}",
                                   "--metrics-config=summary_latencies=true"])
    c = srv.client

    first = infer(c, "cached", 1.0)
    assert stats(c, "cached")["exec"] == 1
    again = infer(c, "cached", 1.0)
    assert again.tobytes() == first.tobytes(), "a hit returns the bytes the model gave"
    s = stats(c, "cached")
    assert s == {**s, "exec": 1, "inferences": 1, "success": 2, "hit": 1, "miss": 1, "compute": 1}, s
    assert s["hit_ns"] > 0

    # A changed input is a miss; a third answer evicts the least recently used one (1.0).
    infer(c, "cached", 2.0)
    assert stats(c, "cached")["exec"] == 2
    infer(c, "cached", 3.0)
    assert stats(c, "cached")["exec"] == 3
    np.testing.assert_array_equal(infer(c, "cached", 2.0), np.full(ELEMENTS, 2.0, dtype=np.float32))
    assert stats(c, "cached")["exec"] == 3, "2.0 is still cached"
    infer(c, "cached", 1.0)
    s = stats(c, "cached")
    assert (s["exec"], s["hit"], s["miss"], s["success"]) == (4, 2, 4, 6), s

    # A model that does not ask for the cache runs every request, and counts no cache figures.
    infer(c, "plain", 1.0)
    infer(c, "plain", 1.0)
    p = stats(c, "plain")
    assert (p["exec"], p["hit"], p["miss"]) == (2, 0, 0), p

    # gRPC's statistics carry the same figures.
    g = grpcclient.InferenceServerClient(srv.grpc_url).get_inference_statistics("cached", as_json=True)
    inference = g["model_stats"][0]["inference_stats"]
    assert int(inference["cache_hit"]["count"]) == 2 and int(inference["cache_miss"]["count"]) == 4, inference

    # Triton's per-model cache families, for the cached model only.
    metrics = requests.get(srv.metrics_url, timeout=10).text
    assert 'nv_cache_num_hits_per_model{model="cached",version="1"} 2' in metrics, metrics
    assert 'nv_cache_num_misses_per_model{model="cached",version="1"} 4' in metrics, metrics
    assert 'nv_cache_hit_duration_per_model{model="cached",version="1"}' in metrics
    assert 'nv_cache_miss_duration_per_model{model="cached",version="1"}' in metrics
    assert 'model="plain"' in metrics and 'nv_cache_num_hits_per_model{model="plain"' not in metrics
    assert 'nv_inference_exec_count{model="cached",version="1"} 4' in metrics
    assert 'nv_inference_request_success{model="cached",version="1"} 6' in metrics
    # With summary_latencies: Triton's cache summaries, and no request summary for a cached model.
    assert 'nv_cache_hit_summary_per_model_count{model="cached",version="1"} 2' in metrics, metrics
    assert 'nv_cache_miss_summary_per_model_count{model="cached",version="1"} 4' in metrics, metrics
    assert 'nv_inference_queue_summary_us_count{model="cached",version="1"} 6' in metrics, metrics
    assert 'nv_inference_request_summary_us_count{model="cached"' not in metrics
    assert 'nv_inference_request_summary_us_count{model="plain",version="1"} 2' in metrics
    # The cache's own gauges, as Triton 2.51 serves them (it leaves most at 0; these are live).
    gauges = {l.split()[0]: float(l.split()[1]) for l in metrics.splitlines() if l.startswith("nv_cache_") and "{" not in l}
    assert gauges["nv_cache_num_entries"] == 2 and gauges["nv_cache_num_evictions"] == 2, gauges
    assert gauges["nv_cache_num_lookups"] == 6 and gauges["nv_cache_num_hits"] == 2, gauges
    assert gauges["nv_cache_num_misses"] == 4, gauges
    assert abs(gauges["nv_cache_util"] - 2 * ENTRY / (2 * ENTRY + ENTRY // 2)) < 1e-9, gauges
    assert {"nv_cache_lookup_duration", "nv_cache_insertion_duration"} <= set(gauges), gauges


def test_an_answer_larger_than_the_cache_is_never_kept(start_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, "cached", identity_config("cached", extra=CACHED))
    srv = start_server(repo, args=[f"--response-cache-byte-size={ENTRY - 1}"])
    for _ in range(3):
        infer(srv.client, "cached", 5.0)
    s = stats(srv.client, "cached")
    assert (s["exec"], s["hit"], s["miss"]) == (3, 0, 3), s


def test_sequence_and_decoupled_models_refuse_the_cache_and_without_a_server_cache_it_is_said(
        start_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, "seq", identity_config("seq", max_batch_size=1, extra=CACHED + "sequence_batching { }\n"))
    add_model(repo, "dec", identity_config("dec", extra=CACHED + "model_transaction_policy { decoupled: true }\n"))
    add_model(repo, "cached", identity_config("cached", extra=CACHED))
    srv = start_server(repo, args=["--exit-on-error=false", "--strict-readiness=false"])
    index = {m["name"]: m for m in srv.index()}
    assert index["seq"]["state"] == "UNAVAILABLE"
    assert ("Response Cache does not currently support model seq with sequence batching scheduler. "
            "Please disable the response cache.") in index["seq"]["reason"], index["seq"]
    assert index["dec"]["state"] == "UNAVAILABLE"
    assert "Response Cache does not currently support model dec with 'decoupled' transaction policy" \
        in index["dec"]["reason"], index["dec"]
    # No --cache-config: the model serves uncached, and the log says so.
    infer(srv.client, "cached", 1.0)
    infer(srv.client, "cached", 1.0)
    s = stats(srv.client, "cached")
    assert (s["exec"], s["hit"], s["miss"]) == (2, 0, 0), s
    assert "response_cache is enabled in its config, but the server has no response cache" in srv.log_tail(100_000)


def test_an_unknown_cache_is_refused_at_start(tmp_path):
    from helpers import run_to_exit
    code, out = run_to_exit(["--model-repository", str(tmp_path), "--cache-config=redis,host=localhost"])
    assert code != 0 and "Tritium has no 'redis' cache" in out, out


def test_a_reloaded_model_never_answers_from_its_previous_load(start_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, "cached", identity_config("cached", extra=CACHED))
    srv = start_server(repo, args=["--model-control-mode=explicit", "--load-model=cached",
                                   "--cache-config=local,size=1048576"])
    infer(srv.client, "cached", 1.0)
    infer(srv.client, "cached", 1.0)
    assert stats(srv.client, "cached")["hit"] == 1
    srv.client.load_model("cached")
    infer(srv.client, "cached", 1.0)
    s = stats(srv.client, "cached")
    assert (s["exec"], s["hit"], s["miss"]) == (1, 0, 1), s
