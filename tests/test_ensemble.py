"""Ensembles (`platform: "ensemble"`): a linear chain, a diamond, a batching step under
concurrent load, each kind of broken graph, a failing step, composing-model unload and
reload, statistics per model, and a sequence through an ensemble."""
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def inputs(proto, a, b, names=("IN0", "IN1")):
    ins = [proto.InferInput(names[0], list(a.shape), "FP32"), proto.InferInput(names[1], list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def rand(seed, shape=(1, 16)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def ensemble_config(name, steps, inputs=("IN0", "IN1"), outputs=("OUT",), dims="16", dtype="TYPE_FP32", max_batch=8):
    ins = ",\n".join(f'  {{ name: "{n}" data_type: {dtype} dims: [ {dims} ] }}' for n in inputs)
    outs = ",\n".join(f'  {{ name: "{n}" data_type: TYPE_FP32 dims: [ {dims} ] }}' for n in outputs)
    step_text = []
    for model, imap, omap in steps:
        maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in imap.items())
        maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in omap.items())
        step_text.append(f'{{ model_name: "{model}" model_version: -1{maps} }}')
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch}\ninput [\n{ins}\n]\noutput [\n{outs}\n]\n'
            f'ensemble_scheduling {{ step [ {", ".join(step_text)} ] }}\n')


def add_ensemble(repo, name, text):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text)


DIAMOND = [
    ("add_sub", {"INPUT0": "IN0", "INPUT1": "IN1"}, {"OUTPUT0": "s"}),
    ("add_sub", {"INPUT0": "IN1", "INPUT1": "IN0"}, {"OUTPUT1": "d"}),
    ("add_sub", {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "OUT"}),
]


def test_chain_over_http_and_grpc(server):
    a, b = rand(1), rand(2)
    res = server.client.infer("add_sub_pipeline", inputs(httpclient, a, b))
    np.testing.assert_allclose(res.as_numpy("OUT"), a + b, rtol=1e-6)
    np.testing.assert_allclose(res.as_numpy("DIFF"), a - b, rtol=1e-6)
    only = server.client.infer("add_sub_pipeline", inputs(httpclient, a, b), outputs=[httpclient.InferRequestedOutput("DIFF")])
    assert [o["name"] for o in only.get_response()["outputs"]] == ["DIFF"]
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        res = g.infer("add_sub_pipeline", inputs(grpcclient, a, b))
        np.testing.assert_allclose(res.as_numpy("OUT"), a + b, rtol=1e-6)
        assert g.get_model_metadata("add_sub_pipeline").platform == "ensemble"
    finally:
        g.close()


def test_a_batching_step_batches_under_concurrent_load(server):
    def stats(m):
        s = server.client.get_inference_statistics(m)["model_stats"][0]
        return int(s["inference_count"]), int(s["execution_count"])
    before = {m: stats(m) for m in ("add_sub_pipeline", "identity_fp32", "add_sub")}
    errors = []

    def worker(k):
        c = httpclient.InferenceServerClient(server.http_url)
        try:
            for i in range(20):
                a, b = rand(k * 100 + i), rand(k * 100 + i + 1)
                res = c.infer("add_sub_pipeline", inputs(httpclient, a, b))
                np.testing.assert_allclose(res.as_numpy("OUT"), a + b, rtol=1e-6)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    after = {m: stats(m) for m in before}
    d = {m: (after[m][0] - before[m][0], after[m][1] - before[m][1]) for m in before}
    assert d["add_sub_pipeline"][0] == 320, "statistics are kept for the ensemble"
    assert d["add_sub"][0] == 320 and d["identity_fp32"][0] == 320, "and for each composing model"
    assert d["identity_fp32"][1] < d["identity_fp32"][0], f"the dynamic-batching step batched: {d['identity_fp32']}"


def test_a_lone_requests_steps_run_on_the_ensembles_thread(start_server, repo_copy):
    """One client at a time: each step is all its request waits for, its model's instance is free,
    and ONNX Runtime's small models run on the ensemble instance's thread (the actor tree's
    `here` counts batches run on the submitting thread)."""
    srv = start_server(repo_copy(["add_sub", "identity_fp32", "add_sub_pipeline"]))

    def here():
        tree = requests.get(f"http://127.0.0.1:{srv.metrics_port}/v2/actors", timeout=10).json()
        return {m["name"]: m["scheduler"]["here"] for m in tree["models"] if m["name"] in ("add_sub", "identity_fp32")}

    def run(n):
        for i in range(n):
            a, b = rand(500 + i), rand(600 + i)
            res = srv.client.infer("add_sub_pipeline", inputs(httpclient, a, b))
            np.testing.assert_allclose(res.as_numpy("OUT"), a + b, rtol=1e-6)

    run(5)  # each model's first execution, unmeasured, runs on its instance's thread
    time.sleep(0.05)
    before = here()
    run(20)
    after = here()
    # Most, not all: one slow execution (a busy machine) sends the next few to the instance's
    # thread until the recent average is short again.
    for m in ("add_sub", "identity_fp32"):
        assert after[m] - before[m] >= 15, f"{m}: {before} -> {after}"


def test_diamond_runs_both_branches_and_joins(start_server, repo_copy):
    repo = repo_copy(["add_sub"])
    add_ensemble(repo, "diamond", ensemble_config("diamond", DIAMOND))
    srv = start_server(repo)
    a, b = rand(3), rand(4)
    res = srv.client.infer("diamond", inputs(httpclient, a, b))
    np.testing.assert_allclose(res.as_numpy("OUT"), 2 * b, rtol=1e-5, atol=1e-6)


BROKEN = {
    "unknown_tensor": ([("add_sub", {"INPUT0": "IN0", "INPUT1": "nope"}, {"OUTPUT0": "OUT"})],
                       "step 1 ('add_sub') input 'INPUT1' reads tensor 'nope'"),
    "two_producers": ([("add_sub", {"INPUT0": "IN0", "INPUT1": "IN1"}, {"OUTPUT0": "OUT"}),
                       ("add_sub", {"INPUT0": "IN0", "INPUT1": "IN1"}, {"OUTPUT1": "OUT"})],
                      "writes tensor 'OUT', but step 1 ('add_sub') writes it too"),
    "cycle": ([("add_sub", {"INPUT0": "IN0", "INPUT1": "q"}, {"OUTPUT0": "p"}),
               ("add_sub", {"INPUT0": "p", "INPUT1": "IN1"}, {"OUTPUT0": "q", "OUTPUT1": "OUT"})], "cycle"),
    "missing_model": ([("no_such_model", {"X": "IN0"}, {"Y": "OUT"})], "'no_such_model'"),
    "unknown_model_input": ([("add_sub", {"INPUTX": "IN0", "INPUT1": "IN1"}, {"OUTPUT0": "OUT"})],
                            "model 'add_sub' has no input 'INPUTX'"),
}


def test_broken_graphs_are_unavailable_with_a_reason_naming_step_and_tensor(start_server, repo_copy):
    repo = repo_copy(["add_sub"])
    for name, (steps, _) in BROKEN.items():
        add_ensemble(repo, f"broken_{name}", ensemble_config(f"broken_{name}", steps))
    add_ensemble(repo, "broken_dtype", ensemble_config("broken_dtype", [
        ("add_sub", {"INPUT0": "IN0", "INPUT1": "IN1"}, {"OUTPUT0": "OUT"})], dtype="TYPE_INT32"))
    srv = start_server(repo, args=["--exit-on-error=false"], wait_for="live")
    import time
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        index = {e["name"]: e for e in srv.index()}
        if all(index.get(f"broken_{n}", {}).get("state") == "UNAVAILABLE" for n in list(BROKEN) + ["dtype"]):
            break
        time.sleep(0.2)
    for name, (_, fragment) in BROKEN.items():
        e = index[f"broken_{name}"]
        assert e["state"] == "UNAVAILABLE" and fragment in e["reason"], (name, e)
    e = index["broken_dtype"]
    assert "step 1 ('add_sub') input 'INPUT0' is FP32, but tensor 'IN0' is INT32" in e["reason"], e
    assert index["add_sub"]["state"] == "READY", "the composing model serves on"


def test_a_failing_step_fails_the_request_naming_the_step(start_server, repo_copy):
    repo = repo_copy(["add_sub"])
    add_ensemble(repo, "loose", ensemble_config("loose", [
        ("add_sub", {"INPUT0": "IN0", "INPUT1": "IN1"}, {"OUTPUT0": "OUT"})], dims="-1"))
    srv = start_server(repo)
    with pytest.raises(InferenceServerException) as info:
        srv.client.infer("loose", inputs(httpclient, rand(1, (1, 8)), rand(2, (1, 8))))
    assert "in ensemble 'loose', step 1 ('add_sub')" in info.value.message()
    assert "unexpected shape for input 'INPUT0'" in info.value.message()
    res = srv.client.infer("loose", inputs(httpclient, rand(1), rand(2)))  # still serving
    assert res.as_numpy("OUT").shape == (1, 16)


def test_composing_model_unload_and_reload(start_server, repo_copy):
    srv = start_server(repo_copy(["add_sub", "identity_fp32", "add_sub_pipeline"]),
                       args=["--model-control-mode", "explicit"])
    c = srv.client
    c.load_model("add_sub_pipeline")
    assert c.is_model_ready("add_sub_pipeline")
    assert c.is_model_ready("add_sub") and c.is_model_ready("identity_fp32"), "composing models load with it"
    c.unload_model("identity_fp32")
    assert not c.is_model_ready("add_sub_pipeline"), "readiness follows the composing models"
    with pytest.raises(InferenceServerException) as info:
        c.infer("add_sub_pipeline", inputs(httpclient, rand(1), rand(2)))
    assert "identity_fp32" in info.value.message()
    c.load_model("identity_fp32")
    assert c.is_model_ready("add_sub_pipeline")
    a, b = rand(5), rand(6)
    np.testing.assert_allclose(c.infer("add_sub_pipeline", inputs(httpclient, a, b)).as_numpy("OUT"), a + b, rtol=1e-6)


def test_a_sequence_through_an_ensemble(start_server, repo_copy):
    repo = repo_copy(["accumulate"])
    text = ensemble_config("acc_pipe", [("accumulate", {"INPUT": "IN"}, {"OUTPUT": "OUT"})],
                           inputs=("IN",), dims="1", dtype="TYPE_INT32", max_batch=4).replace(
        'name: "OUT" data_type: TYPE_FP32', 'name: "OUT" data_type: TYPE_INT32')
    add_ensemble(repo, "acc_pipe", text)
    srv = start_server(repo)
    total = 0
    for i, v in enumerate([5, 7, 9]):
        x = httpclient.InferInput("IN", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        total += v
        res = srv.client.infer("acc_pipe", [x], sequence_id=77, sequence_start=i == 0, sequence_end=i == 2)
        assert int(res.as_numpy("OUT")[0][0]) == total


def test_ensemble_statistics_are_the_sums_of_its_steps(start_server, repo_copy):
    """As Triton: an ensemble's compute times are the sums of its composing models' for its
    requests, and its queue time their queue times plus its own; not its wall time."""
    srv = start_server(repo_copy(["add_sub", "identity_fp32", "add_sub_pipeline"]))
    n = 12
    for i in range(n):
        srv.client.infer("add_sub_pipeline", inputs(httpclient, rand(i), rand(i + 100)))
    stats = {s["name"]: s for s in srv.client.get_inference_statistics()["model_stats"]}
    ens, steps = stats["add_sub_pipeline"]["inference_stats"], [stats[m]["inference_stats"] for m in ("add_sub", "identity_fp32")]
    for part in ("compute_input", "compute_infer", "compute_output"):
        assert int(ens[part]["count"]) == n, part
        assert int(ens[part]["ns"]) == sum(int(s[part]["ns"]) for s in steps), part
    assert int(ens["queue"]["ns"]) >= sum(int(s["queue"]["ns"]) for s in steps)
    assert int(ens["success"]["ns"]) > int(ens["compute_infer"]["ns"]), "the request takes longer than its steps compute"
