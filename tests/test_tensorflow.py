"""The TensorFlow backend (SavedModels through TensorFlow's C API, cargo feature `tensorflow`)
against the real binary, with tritonclient over HTTP and gRPC: the SavedModels of
examples/tensorflow_models/ (made by model_repository/generate_savedmodel.py), the config's
names mapped to the serving signature, auto-complete from the signature, every datatype with
BYTES elements holding NUL and invalid UTF-8, dynamic batching, instances, an ensemble of an ONNX,
a TensorFlow and a PyTorch step, a TorchScript model and a SavedModel under load in one process,
the init ops of TF_INIT_OPS_FILE, GraphDef models, and bad models and bad requests that fail alone with
TensorFlow's reason.

A binary built without the feature skips this module, except under CI (CI=true), where it fails:
.ci/run builds with the feature."""
import os
import shutil
import subprocess
import threading

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import BUNDLED_REPO, REPO_ROOT, Server, wait_until

TF_REPO = REPO_ROOT / "examples" / "tensorflow_models"
TF_MODELS = ["tf_add_sub", "tf_autocomplete", "tf_types", "tf_checked", "tf_scale", "tf_mlp", "keyword_spotter",
             "mlp_three_frameworks"]
# Models of model_repository/ served beside them: the ensemble's ONNX and PyTorch steps, and a
# TorchScript model for the two-framework load test.
OTHER_MODELS = ["mlp", "torch_mlp", "torch_add_sub", "add_sub"]


def make_repo(dest, tf_models=TF_MODELS, others=OTHER_MODELS):
    if not (TF_REPO / "tf_add_sub" / "1" / "model.savedmodel" / "saved_model.pb").is_file():
        raise FileNotFoundError(f"{TF_REPO} has no SavedModels: run scripts/setup.sh first")
    dest.mkdir(parents=True, exist_ok=True)
    for name in tf_models:
        shutil.copytree(TF_REPO / name, dest / name)
    for name in others:
        shutil.copytree(BUNDLED_REPO / name, dest / name)
    return dest


def settled(srv, repo):
    """The repository index once every model of `repo` has loaded or failed (the endpoints are
    live while models load)."""
    names = {d.name for d in repo.iterdir() if d.is_dir()}

    def done():
        index = {m["name"]: m for m in srv.index()}
        if names <= set(index) and all(index[n].get("state") in ("READY", "UNAVAILABLE") for n in names):
            return index
        return None

    return wait_until(done, timeout=120, what="every model loaded or failed")


def skip_without_tensorflow(index, model="tf_add_sub"):
    """Skips (fails under CI) when the binary was built without the feature (`model`, a
    SavedModel of the index, failed to load for that reason)."""
    bad = [m for m in index.values() if m.get("name") == model and m.get("state") != "READY"]
    if bad and "has no TensorFlow backend" in bad[0].get("reason", ""):
        if os.environ.get("CI") == "true":
            pytest.fail("CI's tritium binary has no TensorFlow backend: build with --features tensorflow")
        pytest.skip("this tritium binary was built without --features tensorflow")


@pytest.fixture(scope="module")
def tf_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("tf")
    repo = make_repo(base / "models")
    # --exit-on-error=false: a binary without the feature serves on, to say so (and be skipped).
    srv = Server(repo, args=["--exit-on-error=false"], log_dir=base).start(wait_for="live", timeout=120)
    try:
        index = settled(srv, repo)
        skip_without_tensorflow(index)
        not_ready = [m for m in index.values() if m.get("state") != "READY"]
        assert not not_ready, f"{not_ready}\n{srv.log_tail()}"
        yield srv
    finally:
        assert srv.stop() == 0, srv.log_tail()


def add_sub_inputs(proto, a, b):
    ins = [proto.InferInput("INPUT0", list(a.shape), "FP32"), proto.InferInput("INPUT1", list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def test_savedmodel_over_http_and_grpc(tf_server):
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    res = tf_server.client.infer("tf_add_sub", add_sub_inputs(httpclient, a, b))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    client = grpcclient.InferenceServerClient(tf_server.grpc_url)
    res = client.infer("tf_add_sub", add_sub_inputs(grpcclient, a, b),
                       outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    assert res.as_numpy("OUTPUT0") is None, "only the requested output"
    meta = client.get_model_metadata("tf_add_sub")
    assert meta.platform == "tensorflow_savedmodel"
    config = client.get_model_config("tf_add_sub").config
    assert config.backend == "tensorflow" and config.default_model_filename == "model.savedmodel"
    client.close()


def test_config_is_completed_from_the_signature(tf_server):
    config = tf_server.client.get_model_config("tf_autocomplete")
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert config["platform"] == "tensorflow_savedmodel"
    inputs = {i["name"]: (i["data_type"], i["dims"]) for i in config["input"]}
    outputs = {o["name"]: (o["data_type"], o["dims"]) for o in config["output"]}
    assert inputs == {"INPUT0": ("TYPE_FP32", ["16"]), "INPUT1": ("TYPE_FP32", ["16"])} or \
        inputs == {"INPUT0": ("TYPE_FP32", [16]), "INPUT1": ("TYPE_FP32", [16])}, inputs
    assert set(outputs) == {"OUTPUT0", "OUTPUT1"}
    a = np.ones((3, 16), dtype=np.float32)
    res = tf_server.client.infer("tf_autocomplete", add_sub_inputs(httpclient, a, a))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a * 2)


TYPES = {
    "BOOL": np.array([True, False, True]),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "INT16": np.array([-300, 3, 30000], dtype=np.int16),
    "INT32": np.array([7, -7, 1 << 30], dtype=np.int32),
    "INT64": np.array([10, -20, 1 << 40], dtype=np.int64),
    "UINT8": np.array([0, 1, 255], dtype=np.uint8),
    "UINT16": np.array([0, 1, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 1, (1 << 32) - 1], dtype=np.uint32),
    "UINT64": np.array([0, 1, (1 << 64) - 1], dtype=np.uint64),
    "FP16": np.array([0.5, -2, 65504], dtype=np.float16),
    "BF16": np.array([1.5, -2, 64]).astype(ml_dtypes.bfloat16),
    "FP32": np.array([1e-30, -0.25, 3.0e38], dtype=np.float32),
    "FP64": np.array([1e300, -0.25, 3], dtype=np.float64),
}
# NUL bytes, invalid UTF-8, an empty element and a long one (TensorFlow keeps short strings inline).
STRINGS = np.array([b"he\x00llo", b"\xff\xfe\x00 not utf-8", b"", "héllo".encode() * 20], dtype=np.object_)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_datatype_and_arbitrary_bytes_pass_unchanged(tf_server, protocol):
    proto = httpclient if protocol == "http" else grpcclient
    inputs = []
    for name, v in {**TYPES, "STRING": STRINGS}.items():
        t = proto.InferInput(f"{name}_in", list(v.shape), "BYTES" if name == "STRING" else name)
        if proto is httpclient:
            t.set_data_from_numpy(v, binary_data=True)
        else:
            t.set_data_from_numpy(v)
        inputs.append(t)
    if proto is httpclient:
        outs = [httpclient.InferRequestedOutput(f"{n}_out", binary_data=True) for n in list(TYPES) + ["STRING"]]
        outs.append(httpclient.InferRequestedOutput("STRING_len", binary_data=True))
        res = tf_server.client.infer("tf_types", inputs, outputs=outs)
    else:
        client = grpcclient.InferenceServerClient(tf_server.grpc_url)
        res = client.infer("tf_types", inputs)
        client.close()
    for name, want in TYPES.items():
        got = res.as_numpy(f"{name}_out")
        if name == "BF16" and got.dtype != ml_dtypes.bfloat16:
            got = got.view(ml_dtypes.bfloat16) if got.dtype.itemsize == 2 else got.astype(ml_dtypes.bfloat16)
        assert got.dtype == want.dtype or name == "BF16", (name, got.dtype)
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert list(res.as_numpy("STRING_out")) == list(STRINGS)
    assert list(res.as_numpy("STRING_len")) == [len(s) for s in STRINGS]


def test_dynamic_batching_merges_concurrent_requests(tf_server):
    c = tf_server.client
    before = c.get_inference_statistics("tf_add_sub")["model_stats"][0]
    errors = []

    def worker(k):
        client = httpclient.InferenceServerClient(tf_server.http_url)
        for i in range(20):
            a = np.full((1, 16), k * 100 + i, dtype=np.float32)
            b = np.ones((1, 16), dtype=np.float32)
            out = client.infer("tf_add_sub", add_sub_inputs(httpclient, a, b)).as_numpy("OUTPUT0")
            if not np.array_equal(out, a + b):
                errors.append((k, i, out))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    after = c.get_inference_statistics("tf_add_sub")["model_stats"][0]
    requests = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert requests == 160
    assert executions < requests, f"{executions} executions for {requests} requests: nothing was batched"


def test_ensemble_of_onnx_tensorflow_and_pytorch_steps(tf_server):
    """mlp (ONNX) -> tf_scale (TensorFlow) -> torch_mlp (PyTorch, the same weights as mlp),
    against each step called alone and against numpy for the TensorFlow step."""
    import sys
    sys.path.insert(0, str(REPO_ROOT / "model_repository"))
    x = np.random.default_rng(5).standard_normal((3, 256)).astype(np.float32)
    c = tf_server.client

    def call(model, name, out, value):
        t = httpclient.InferInput(name, list(value.shape), "FP32")
        t.set_data_from_numpy(value)
        return c.infer(model, [t]).as_numpy(out)

    onnx_out = call("mlp", "INPUT0", "OUTPUT0", x)
    rng = np.random.default_rng(27)
    gain = rng.uniform(0.5, 1.5, size=256).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, size=256).astype(np.float32)
    tf_out = call("tf_scale", "INPUT0", "OUTPUT0", onnx_out)
    np.testing.assert_allclose(tf_out, np.maximum(onnx_out * gain + bias, 0), rtol=1e-6, atol=1e-6)
    want = call("mlp", "INPUT0", "OUTPUT0", tf_out)
    got = call("mlp_three_frameworks", "INPUT0", "OUTPUT0", x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    client = grpcclient.InferenceServerClient(tf_server.grpc_url)
    t = grpcclient.InferInput("INPUT0", [3, 256], "FP32")
    t.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("mlp_three_frameworks", [t]).as_numpy("OUTPUT0"), want, rtol=1e-4, atol=1e-4)
    client.close()


def test_tf_mlp_computes_what_the_onnx_mlp_does(tf_server):
    """The same network and weights on TensorFlow and ONNX Runtime (the figures compare them)."""
    x = np.random.default_rng(3).standard_normal((5, 256)).astype(np.float32)
    t = httpclient.InferInput("INPUT0", [5, 256], "FP32")
    t.set_data_from_numpy(x)
    want = tf_server.client.infer("mlp", [t]).as_numpy("OUTPUT0")
    got = tf_server.client.infer("tf_mlp", [t]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


REFERENCE = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import tensorflow as tf
from generate_savedmodel import kws_audio
audio = kws_audio(3, seed=11)
fn = tf.saved_model.load(sys.argv[2]).signatures["serving_default"]
out = fn(AUDIO=tf.constant(audio))
np.savez(sys.argv[3], audio=audio, **{k: v.numpy() for k, v in out.items()})
"""


def test_keyword_spotter_matches_tensorflow_in_process(tf_server, tmp_path):
    """The served keyword spotter (log-mel features computed in the graph, two convolutions)
    against the same SavedModel called in-process by TensorFlow itself, over HTTP and gRPC."""
    ref = tmp_path / "ref.npz"
    subprocess.run([str(REPO_ROOT / ".tensorflow" / "venv" / "bin" / "python"), "-c", REFERENCE,
                    str(REPO_ROOT / "model_repository"),
                    str(TF_REPO / "keyword_spotter" / "1" / "model.savedmodel"), str(ref)],
                   check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True)
    want = np.load(ref)
    audio = want["audio"]
    labels = (TF_REPO / "keyword_spotter" / "labels.txt").read_text().split()
    for proto in (httpclient, grpcclient):
        client = tf_server.client if proto is httpclient else grpcclient.InferenceServerClient(tf_server.grpc_url)
        t = proto.InferInput("AUDIO", list(audio.shape), "FP32")
        t.set_data_from_numpy(audio)
        res = client.infer("keyword_spotter", [t])
        np.testing.assert_allclose(res.as_numpy("LOGMEL"), want["LOGMEL"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(res.as_numpy("LOGITS"), want["LOGITS"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(res.as_numpy("KEYWORD"), want["KEYWORD"])
        # The classification extension names the top keyword from labels.txt.
        top = proto.InferRequestedOutput("LOGITS", class_count=1)
        res = client.infer("keyword_spotter", [t], outputs=[top])
        got = [row[0].decode() if isinstance(row[0], bytes) else row[0] for row in res.as_numpy("LOGITS")]
        assert [g.split(":")[-1] for g in got] == [labels[int(k)] for k in want["KEYWORD"][:, 0]], got
        if proto is grpcclient:
            client.close()


def test_torchscript_and_savedmodel_under_load_in_one_process(tf_server):
    """libtorch and TensorFlow (each with its own protobuf, absl, oneDNN and thread pools) in one
    process, both under concurrent load over gRPC, every answer checked."""
    errors = []

    def torch_worker():
        client = grpcclient.InferenceServerClient(tf_server.grpc_url)
        for i in range(40):
            a = np.full((2, 16), i, dtype=np.float32)
            b = np.ones((2, 16), dtype=np.float32)
            ins = [grpcclient.InferInput("INPUT__0", [2, 16], "FP32"), grpcclient.InferInput("INPUT__1", [2, 16], "FP32")]
            ins[0].set_data_from_numpy(a)
            ins[1].set_data_from_numpy(b)
            out = client.infer("torch_add_sub", ins).as_numpy("OUTPUT__0")
            if not np.array_equal(out, a + b):
                errors.append(("torch", i))
        client.close()

    def tf_worker(model):
        client = grpcclient.InferenceServerClient(tf_server.grpc_url)
        for i in range(40):
            a = np.full((2, 16), i, dtype=np.float32)
            b = np.ones((2, 16), dtype=np.float32)
            out = client.infer(model, add_sub_inputs(grpcclient, a, b)).as_numpy("OUTPUT1")
            if not np.array_equal(out, a - b):
                errors.append((model, i))
        client.close()

    threads = [threading.Thread(target=torch_worker) for _ in range(3)]
    threads += [threading.Thread(target=tf_worker, args=("tf_add_sub",)) for _ in range(3)]
    threads += [threading.Thread(target=tf_worker, args=("add_sub",))]  # ONNX Runtime too
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert tf_server.alive()


def test_a_request_tensorflow_refuses_is_a_400_with_its_text(tf_server):
    x = httpclient.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array([[-1, 4, 9, 16]], dtype=np.float32))
    with pytest.raises(InferenceServerException) as info:
        tf_server.client.infer("tf_checked", [x])
    assert "x must be non-negative" in info.value.message(), info.value.message()
    assert info.value.status() in ("400", 400), info.value.status()
    client = grpcclient.InferenceServerClient(tf_server.grpc_url)
    g = grpcclient.InferInput("x", [1, 4], "FP32")
    g.set_data_from_numpy(np.array([[-1, 4, 9, 16]], dtype=np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("tf_checked", [g])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "non-negative" in info.value.message()
    # The instance keeps serving.
    g.set_data_from_numpy(np.array([[1, 4, 9, 16]], dtype=np.float32))
    np.testing.assert_allclose(client.infer("tf_checked", [g]).as_numpy("y"), [[1, 2, 3, 4]])
    client.close()


def write_config(repo, name, text):
    (repo / name / "config.pbtxt").write_text(text)


def test_bad_models_fail_alone_with_tensorflows_reason(start_server, tmp_path):
    repo = make_repo(tmp_path / "models", ["tf_add_sub"], ["add_sub", "torch_add_sub"])
    # Not a SavedModel at all.
    broken = repo / "tf_broken" / "1" / "model.savedmodel"
    broken.mkdir(parents=True)
    (broken / "saved_model.pb").write_bytes(b"\x0a\xff\xff not a protobuf")
    write_config(repo, "tf_broken", 'platform: "tensorflow_savedmodel"\n')
    # A signature the SavedModel does not have.
    shutil.copytree(repo / "tf_add_sub", repo / "tf_no_signature")
    text = (repo / "tf_add_sub" / "config.pbtxt").read_text().replace('"tf_add_sub"', '"tf_no_signature"')
    write_config(repo, "tf_no_signature",
                 text + 'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "classify" } }\n')
    # A tensor the signature lacks.
    shutil.copytree(repo / "tf_add_sub", repo / "tf_wrong_tensor")
    write_config(repo, "tf_wrong_tensor", text.replace('"tf_no_signature"', '"tf_wrong_tensor"')
                 .replace('"INPUT1"', '"INPUT9"'))
    # A wrong datatype.
    shutil.copytree(repo / "tf_add_sub", repo / "tf_wrong_type")
    write_config(repo, "tf_wrong_type", text.replace('"tf_no_signature"', '"tf_wrong_type"')
                 .replace("TYPE_FP32", "TYPE_INT32", 1))
    srv = start_server(repo, args=["--exit-on-error=false"], wait_for="live", timeout=120)
    index = settled(srv, repo)
    skip_without_tensorflow(index)
    expected = {
        "tf_broken": "TensorFlow could not load",
        "tf_no_signature": "has no signature 'classify'",
        "tf_wrong_tensor": "unexpected inference input 'INPUT9'",
        "tf_wrong_type": "expects datatype TYPE_INT32 for input 'INPUT0', model provides TYPE_FP32",
    }
    for name, text in expected.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert text in index[name]["reason"], index[name]
    assert "serving_default" in index["tf_no_signature"]["reason"], "it lists the signatures there are"
    assert "its inputs: INPUT0, INPUT1" in index["tf_wrong_tensor"]["reason"]
    # Everything else serves.
    for name in ("tf_add_sub", "add_sub", "torch_add_sub"):
        assert index[name]["state"] == "READY", index[name]
    a = np.ones((1, 16), dtype=np.float32)
    res = srv.client.infer("tf_add_sub", add_sub_inputs(httpclient, a, a))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a * 2)


def test_init_ops_file_runs_its_ops_when_each_session_loads(start_server, tmp_path):
    """TF_INIT_OPS_FILE as Triton reads it: a JSON file of operations, in the version folder or
    else the model folder, run once per session after load. tf_init_ops multiplies by a variable
    saved as 1; its ops set_scale_3 / set_scale_5 assign 3 / 5."""
    repo = make_repo(tmp_path / "models", ["tf_init_ops", "tf_add_sub"], [])
    text = (repo / "tf_init_ops" / "config.pbtxt").read_text()

    def variant(name, config, version_file=None, model_file=None):
        shutil.copytree(repo / "tf_init_ops" / "1", repo / name / "1")
        write_config(repo, name, config.replace('"tf_init_ops"', f'"{name}"'))
        if version_file is not None:
            (repo / name / "1" / "init_ops.json").write_text(version_file)
        if model_file is not None:
            (repo / name / "init_ops.json").write_text(model_file)

    no_parameter = "\n".join(ln for ln in text.splitlines() if "TF_INIT_OPS_FILE" not in ln) + "\n"
    variant("tf_no_init", no_parameter)
    variant("tf_version_wins", text, '{"init_ops": ["set_scale_5"]}', '{"init_ops": ["set_scale_3"]}')
    variant("tf_init_missing", text)
    variant("tf_init_unknown_op", text, model_file='{"init_ops": ["set_scale_7"]}')
    variant("tf_init_not_json", text, model_file="set_scale_3")
    instances = text + "instance_group [ { kind: KIND_CPU count: 2 } ]\n"
    variant("tf_init_two_sessions", instances, model_file='{"init_ops": ["set_scale_5"]}')
    srv = start_server(repo, args=["--exit-on-error=false"], wait_for="live", timeout=120)
    index = settled(srv, repo)
    skip_without_tensorflow(index)
    failed = {
        "tf_init_missing": "TF_INIT_OPS_FILE 'init_ops.json' is in neither",
        "tf_init_unknown_op": "init op 'set_scale_7'",
        "tf_init_not_json": "not JSON",
    }
    for name, why in failed.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert why in index[name]["reason"], index[name]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    scales = {"tf_init_ops": 3, "tf_no_init": 1, "tf_version_wins": 5, "tf_init_two_sessions": 5}
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        for proto, client in ((httpclient, srv.client), (grpcclient, grpc)):
            for name, scale in scales.items():
                assert index[name]["state"] == "READY", index[name]
                # Several calls: with two instances each session must have run the ops.
                for _ in range(4):
                    t = proto.InferInput("INPUT0", [2, 4], "FP32")
                    t.set_data_from_numpy(x)
                    np.testing.assert_array_equal(client.infer(name, [t]).as_numpy("OUTPUT0"), x * scale)
    finally:
        grpc.close()
    assert index["tf_add_sub"]["state"] == "READY", index["tf_add_sub"]


def test_graphdef_models_by_node_name(start_server, tmp_path):
    """platform tensorflow_graphdef: config tensors named after the graph's nodes; a GraphDef
    whose variable only its init op sets serves once TF_INIT_OPS_FILE names that op, and fails
    each request with TensorFlow's reason without it; bad GraphDefs fail alone."""
    repo = make_repo(tmp_path / "models", ["tf_graphdef_add_sub", "tf_graphdef_init", "tf_add_sub"], [])
    add_sub = (repo / "tf_graphdef_add_sub" / "config.pbtxt").read_text()
    init = (repo / "tf_graphdef_init" / "config.pbtxt").read_text()

    def variant(name, source, config):
        shutil.copytree(repo / source / "1", repo / name / "1")
        write_config(repo, name, config.replace(f'"{source}"', f'"{name}"'))

    variant("tf_graphdef_uninit", "tf_graphdef_init",
            "\n".join(ln for ln in init.splitlines() if "TF_INIT_OPS_FILE" not in ln) + "\n")
    variant("tf_graphdef_no_node", "tf_graphdef_add_sub", add_sub.replace('"INPUT1"', '"INPUT9"'))
    variant("tf_graphdef_bad_index", "tf_graphdef_add_sub", add_sub.replace('"OUTPUT1"', '"OUTPUT1:3"'))
    variant("tf_graphdef_no_io", "tf_graphdef_add_sub",
            'name: "tf_graphdef_no_io"\nplatform: "tensorflow_graphdef"\nmax_batch_size: 8\n')
    variant("tf_graphdef_corrupt", "tf_graphdef_add_sub", add_sub)
    (repo / "tf_graphdef_corrupt" / "1" / "model.graphdef").write_bytes(b"\x0a\xff\xff not a protobuf")
    srv = start_server(repo, args=["--exit-on-error=false"], wait_for="live", timeout=120)
    index = settled(srv, repo)
    skip_without_tensorflow(index)
    failed = {
        "tf_graphdef_no_node": "the GraphDef has no node 'INPUT9'",
        "tf_graphdef_bad_index": "node 'OUTPUT1' has 1 output(s)",
        "tf_graphdef_corrupt": "could not import",
        "tf_graphdef_no_io": "must specify at least one 'input'",
    }
    for name, why in failed.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert why in index[name]["reason"], index[name]
    for name in ("tf_graphdef_add_sub", "tf_graphdef_init", "tf_graphdef_uninit", "tf_add_sub"):
        assert index[name]["state"] == "READY", index[name]
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.float32)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        for proto, client in ((httpclient, srv.client), (grpcclient, grpc)):
            res = client.infer("tf_graphdef_add_sub", add_sub_inputs(proto, a, b))
            np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
            t = proto.InferInput("INPUT0", [2, 4], "FP32")
            t.set_data_from_numpy(x)
            np.testing.assert_array_equal(client.infer("tf_graphdef_init", [t]).as_numpy("OUTPUT0"), 2 * x)
            with pytest.raises(InferenceServerException, match="uninitialized"):
                client.infer("tf_graphdef_uninit", [t])
        # The model whose runs TensorFlow refused is still ready (and the others served on above).
        states = {m["name"]: m.get("state") for m in srv.index()}
        assert states["tf_graphdef_uninit"] == "READY", states
        meta = srv.client.get_model_metadata("tf_graphdef_add_sub")
        assert meta["platform"] == "tensorflow_graphdef", meta
    finally:
        grpc.close()


def test_strict_config_is_not_completed(start_server, tmp_path):
    repo = make_repo(tmp_path / "models", ["tf_add_sub", "tf_autocomplete"], [])
    srv = start_server(repo, args=["--strict-model-config=true", "--exit-on-error=false"], wait_for="live", timeout=120)
    index = settled(srv, repo)
    skip_without_tensorflow(index)
    assert index["tf_add_sub"]["state"] == "READY"
    assert index["tf_autocomplete"]["state"] == "UNAVAILABLE", index["tf_autocomplete"]


def test_instances_and_thread_parameters(start_server, tmp_path):
    """Two instances of one SavedModel with Triton's thread parameters, and two instances
    sharing one session (MAX_SESSION_SHARE_COUNT); every answer is right."""
    repo = make_repo(tmp_path / "models", ["tf_add_sub"], [])
    text = (repo / "tf_add_sub" / "config.pbtxt").read_text()
    text = text.replace("count: 1", "count: 2")
    shutil.copytree(repo / "tf_add_sub", repo / "tf_shared")
    write_config(repo, "tf_add_sub", text + "\n".join([
        'parameters { key: "TF_NUM_INTRA_THREADS" value { string_value: "1" } }',
        'parameters { key: "TF_NUM_INTER_THREADS" value { string_value: "1" } }',
        'parameters { key: "TF_USE_PER_SESSION_THREADS" value { string_value: "true" } }', ""]))
    write_config(repo, "tf_shared", text.replace('"tf_add_sub"', '"tf_shared"') +
                 'parameters { key: "MAX_SESSION_SHARE_COUNT" value { string_value: "2" } }\n')
    srv = start_server(repo, args=["--exit-on-error=false"], wait_for="live", timeout=120)
    index = settled(srv, repo)
    skip_without_tensorflow(index)
    assert all(m["state"] == "READY" for m in index.values()), index
    errors = []

    def worker(model, k):
        client = httpclient.InferenceServerClient(srv.http_url)
        for i in range(10):
            a = np.full((1, 16), k + i, dtype=np.float32)
            if not np.array_equal(client.infer(model, add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT0"), a * 2):
                errors.append((model, k, i))

    threads = [threading.Thread(target=worker, args=(m, k)) for m in ("tf_add_sub", "tf_shared") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = srv.client.get_inference_statistics("tf_shared")["model_stats"][0]
    assert stats["inference_count"] == 40
