"""Model warmup (issue 21): `model_warmup` samples run on every instance before the model turns
READY, so a model whose first execution is slow answers its first client request as fast as
later ones; warmup counts in no statistic, shows in the log at verbose 1, and a failing sample
fails the load with its reason.
"""
import shutil
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import BUNDLED_REPO, identity_config

FIRST_RUN_MS = 1500
WARMUP = """
model_warmup [ {
  name: "zeros" batch_size: 2 count: 2
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
}, {
  name: "from_file" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "four_floats.bin" } }
} ]
"""


def slow_first_run(name: str, warm: bool) -> str:
    extra = f'parameters {{ key: "first_execute_delay_ms" value: {{ string_value: "{FIRST_RUN_MS}" }} }}\n'
    return identity_config(name, max_batch_size=4, count=2, extra=extra + (WARMUP if warm else ""))


def add_model(repo, name, config, warmup_file=True):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    if warmup_file:
        (repo / name / "warmup").mkdir()
        (repo / name / "warmup" / "four_floats.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())


def timed_infer(client, model):
    x = np.ones((1, 4), dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    start = time.monotonic()
    result = client.infer(model, [inp])
    elapsed = time.monotonic() - start
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    return elapsed


def test_a_warmed_model_answers_its_first_request_as_fast_as_later_ones(start_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, "warm", slow_first_run("warm", warm=True))
    add_model(repo, "cold", slow_first_run("cold", warm=False))
    srv = start_server(repo, args=["--log-verbose=1"])
    client = srv.client
    # The same first request to each: the cold model pays its first run, the warmed one paid it
    # (on both instances) before it turned READY.
    warm_first, cold_first = timed_infer(client, "warm"), timed_infer(client, "cold")
    assert cold_first >= FIRST_RUN_MS / 1000, cold_first
    assert warm_first < FIRST_RUN_MS / 1000 / 3, f"warm {warm_first:.3f}s vs cold {cold_first:.3f}s"
    later = min(timed_infer(client, "warm") for _ in range(3))
    assert warm_first < later + FIRST_RUN_MS / 1000 / 3, (warm_first, later)

    # Warmup counts in no statistic: one request, one execution.
    stats = client.get_inference_statistics("warm")["model_stats"][0]
    assert stats["inference_count"] == 4 and stats["execution_count"] == 4, stats
    assert stats["inference_stats"]["success"]["count"] == 4
    assert [b["batch_size"] for b in stats["batch_stats"]] == [1], stats["batch_stats"]
    grpc_stats = grpcclient.InferenceServerClient(srv.grpc_url).get_inference_statistics("warm", as_json=True)
    assert int(grpc_stats["model_stats"][0]["execution_count"]) == 4

    # Verbose 1 shows each sample on each instance, as Triton's log does.
    log = srv.log_tail(200_000)
    for instance in ("warm_0_0", "warm_0_1"):
        for iteration in (1, 2):
            assert f"model 'warm' instance {instance} is running warmup sample 'zeros' for iteration {iteration}" in log, log
        assert f"model 'warm' instance {instance} is running warmup sample 'from_file' for iteration 1" in log
    assert "Generating warmup sample data for 'zeros'" in log
    assert "model 'cold' instance" not in log


def test_a_failing_warmup_fails_the_load_with_the_reason(start_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    # add_sub's ONNX graph takes [batch, 16]: a sample of 15 elements fails in ONNX Runtime.
    shutil.copytree(BUNDLED_REPO / "add_sub", repo / "add_sub")
    config = (repo / "add_sub" / "config.pbtxt").read_text() + """
model_warmup [ { name: "too_short" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 15 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 15 ] random_data: true } } } ]
"""
    (repo / "add_sub" / "config.pbtxt").write_text(config)
    add_model(repo, "no_file", identity_config("no_file", max_batch_size=4) + WARMUP, warmup_file=False)
    srv = start_server(repo, args=["--exit-on-error=false", "--strict-readiness=false"])
    index = {m["name"]: m for m in srv.index()}
    assert index["add_sub"]["state"] == "UNAVAILABLE", index
    assert "failed to run warmup sample 'too_short': " in index["add_sub"]["reason"], index
    assert index["no_file"]["state"] == "UNAVAILABLE", index
    assert "four_floats.bin" in index["no_file"]["reason"], index
    assert not srv.client.is_model_ready("add_sub")
