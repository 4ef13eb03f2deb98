"""The PyTorch backend (libtorch through tch) against the real binary, with tritonclient: the
bundled TorchScript models (made by model_repository/generate_torchscript.py) over HTTP and gRPC,
Triton's naming conventions, every datatype libtorch has and BYTES as List[str], dynamic
batching, a sequence model whose state the engine keeps, and bad models and bad requests that
fail alone with libtorch's message while everything else keeps serving."""
import queue
import sys
import threading

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "model_repository"))
from torchscript import module_source, write_archive  # noqa: E402

TORCH_MODELS = ["torch_add_sub", "torch_mixed", "torch_accumulate", "torch_checked", "add_sub", "silero_vad_torch",
                "mlp", "torch_mlp"]


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory):
    from helpers import Server, copy_bundled_repo
    base = tmp_path_factory.mktemp("torch")
    srv = Server(copy_bundled_repo(base / "models", TORCH_MODELS), log_dir=base).start()
    yield srv
    assert srv.stop() == 0, srv.log_tail()


def add_sub_inputs(proto, a, b):
    ins = [proto.InferInput("INPUT__0", list(a.shape), "FP32"), proto.InferInput("INPUT__1", list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def test_naming_convention_over_http_and_grpc(torch_server):
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    res = torch_server.client.infer("torch_add_sub", add_sub_inputs(httpclient, a, b))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__1"), a - b)
    client = grpcclient.InferenceServerClient(torch_server.grpc_url)
    res = client.infer("torch_add_sub", add_sub_inputs(grpcclient, a, b),
                       outputs=[grpcclient.InferRequestedOutput("OUTPUT__1")])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__1"), a - b)
    assert res.as_numpy("OUTPUT__0") is None, "only the requested output"
    meta = client.get_model_metadata("torch_add_sub")
    assert meta.platform == "pytorch_libtorch"
    client.close()


def test_torch_mlp_computes_what_the_onnx_mlp_does(torch_server):
    """The same network and weights on both backends (the benchmarks compare them)."""
    x = np.random.default_rng(3).standard_normal((5, 256)).astype(np.float32)
    onnx_in = httpclient.InferInput("INPUT0", [5, 256], "FP32")
    onnx_in.set_data_from_numpy(x)
    torch_in = httpclient.InferInput("INPUT__0", [5, 256], "FP32")
    torch_in.set_data_from_numpy(x)
    want = torch_server.client.infer("mlp", [onnx_in]).as_numpy("OUTPUT0")
    got = torch_server.client.infer("torch_mlp", [torch_in]).as_numpy("OUTPUT__0")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dynamic_batching_merges_concurrent_requests(torch_server):
    c = torch_server.client
    before = c.get_inference_statistics("torch_add_sub")["model_stats"][0]
    errors = []

    def worker(k):
        client = httpclient.InferenceServerClient(torch_server.http_url)
        for i in range(25):
            a = np.full((1, 16), k * 100 + i, dtype=np.float32)
            b = np.ones((1, 16), dtype=np.float32)
            out = client.infer("torch_add_sub", add_sub_inputs(httpclient, a, b)).as_numpy("OUTPUT__0")
            if not np.array_equal(out, a + b):
                errors.append((k, i, out))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    after = c.get_inference_statistics("torch_add_sub")["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 200
    assert executions < inferences, f"{executions} executions for {inferences} requests: nothing was batched"


def test_every_libtorch_datatype_and_bytes_as_a_list_of_strings(torch_server):
    values = {
        "IMAGE": np.array([1, 2, 3, 250], dtype=np.uint8),
        "SCALE": np.array([0.5, 1.5, -2, 4], dtype=np.float16),
        "MASK": np.array([True, False, True, True]),
        "IDS": np.array([10, 20, 30, 1 << 40], dtype=np.int64),
        "SMALL": np.array([-128, -1, 0, 127], dtype=np.int8),
        "SHORT": np.array([-300, 3, 0, 30000], dtype=np.int16),
        "COUNT": np.array([7, -7, 1 << 30, 0], dtype=np.int32),
        "WIDE": np.array([1e300, -0.25, 3, 0], dtype=np.float64),
        "BRAIN": np.array([1.5, -2, 64, 0.25]).astype(ml_dtypes.bfloat16),
        "TEXT": np.array(["héllo".encode(), b"tritium", b""], dtype=np.object_),
    }
    types = {"IMAGE": "UINT8", "SCALE": "FP16", "MASK": "BOOL", "IDS": "INT64", "SMALL": "INT8", "SHORT": "INT16",
             "COUNT": "INT32", "WIDE": "FP64", "BRAIN": "BF16", "TEXT": "BYTES"}
    expected = {
        "MASKED": values["IMAGE"].astype(np.float32) * values["SCALE"].astype(np.float32) * values["MASK"],
        "TOTAL": values["IDS"] + values["SMALL"] + values["SHORT"] + values["COUNT"],
        "DOUBLED": values["WIDE"] * 2,
        "BRAIN_PLUS_ONE": (values["BRAIN"].astype(np.float32) + 1).astype(ml_dtypes.bfloat16),
        "NOT_MASK": ~values["MASK"],
        "IMAGE_PLUS_ONE": (values["IMAGE"] + np.uint8(1)).astype(np.uint8),
        "NEG_SMALL": (-values["SMALL"].astype(np.int16)).astype(np.int8),
    }
    for proto, binary in ((httpclient, True), (grpcclient, None)):
        inputs = []
        for name, v in values.items():
            t = proto.InferInput(name, list(v.shape), types[name])
            if binary is None:
                t.set_data_from_numpy(v)
            else:
                t.set_data_from_numpy(v, binary_data=True)
            inputs.append(t)
        if proto is httpclient:
            outs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in list(expected) + ["SHOUTED"]]
            res = torch_server.client.infer("torch_mixed", inputs, outputs=outs)
        else:
            client = grpcclient.InferenceServerClient(torch_server.grpc_url)
            res = client.infer("torch_mixed", inputs)
            client.close()
        for name, want in expected.items():
            got = res.as_numpy(name)
            if name == "BRAIN_PLUS_ONE" and got.dtype != ml_dtypes.bfloat16:
                got = got.view(ml_dtypes.bfloat16) if got.dtype.itemsize == 2 else got.astype(ml_dtypes.bfloat16)
            np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=name)
        # TorchScript's str.upper() changes ASCII letters only.
        assert list(res.as_numpy("SHOUTED")) == ["HéLLO!".encode(), b"TRITIUM!", b"!"]


def test_sequences_keep_their_state_in_the_engine(torch_server):
    client = grpcclient.InferenceServerClient(torch_server.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        ids = [5001, 5002, "chat-5003"]
        steps = 10
        for i in range(steps):
            for n, seq in enumerate(ids):
                t = grpcclient.InferInput("INPUT__0", [1, 1], "INT32")
                t.set_data_from_numpy(np.array([[n + 1]], dtype=np.int32))
                client.async_stream_infer("torch_accumulate", [t], request_id=f"{n}:{i}", sequence_id=seq,
                                          sequence_start=i == 0, sequence_end=i == steps - 1)
        got = {}
        for _ in range(steps * len(ids)):
            result, error = answers.get(timeout=60)
            assert error is None, error
            got[result.get_response().id] = int(result.as_numpy("OUTPUT__0")[0][0])
        for n in range(len(ids)):
            assert [got[f"{n}:{i}"] for i in range(steps)] == [(n + 1) * (i + 1) for i in range(steps)]
    finally:
        client.stop_stream()
        client.close()
    # The state output is the engine's, not the client's.
    out = torch_server.client.infer("torch_accumulate", [_http_int(7)], sequence_id=77, sequence_start=True,
                                    sequence_end=True)
    assert out.as_numpy("OUTPUT__0")[0][0] == 7 and out.as_numpy("ACC_OUT__1") is None


def _http_int(v):
    t = httpclient.InferInput("INPUT__0", [1, 1], "INT32")
    t.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    return t


def test_a_forward_that_raises_fails_that_request_only(torch_server):
    c = torch_server.client
    bad = httpclient.InferInput("INPUT__0", [4], "FP32")
    bad.set_data_from_numpy(np.array([1, -1, 2, 3], dtype=np.float32))
    with pytest.raises(InferenceServerException) as info:
        c.infer("torch_checked", [bad])
    assert "torch_checked: negative input" in info.value.message()
    assert "PyTorch execute failure" in info.value.message()
    good = httpclient.InferInput("INPUT__0", [4], "FP32")
    good.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float32))
    np.testing.assert_array_equal(c.infer("torch_checked", [good]).as_numpy("OUTPUT__0"), [2, 4, 6, 8])
    assert c.is_model_ready("torch_checked") and c.is_server_live()


def test_a_list_of_strings_refuses_nul_and_non_utf8_bytes_clearly(torch_server):
    for element, text in ((b"he\x00llo", "NUL"), (b"\xff\xfe", "not UTF-8")):
        inputs = []
        for name, dt, v in (("TEXT", "BYTES", np.array([element], dtype=np.object_)),):
            t = httpclient.InferInput(name, [1], dt)
            t.set_data_from_numpy(v, binary_data=True)
            inputs.append(t)
        for name, dt, npdt in (("IDS", "INT64", np.int64), ("IMAGE", "UINT8", np.uint8), ("SCALE", "FP16", np.float16),
                               ("MASK", "BOOL", np.bool_), ("SMALL", "INT8", np.int8), ("SHORT", "INT16", np.int16),
                               ("COUNT", "INT32", np.int32), ("WIDE", "FP64", np.float64)):
            t = httpclient.InferInput(name, [4], dt)
            t.set_data_from_numpy(np.zeros(4, dtype=npdt))
            inputs.append(t)
        t = httpclient.InferInput("BRAIN", [4], "BF16")
        t.set_data_from_numpy(np.zeros(4, dtype=ml_dtypes.bfloat16), binary_data=True)
        inputs.append(t)
        with pytest.raises(InferenceServerException) as info:
            torch_server.client.infer("torch_mixed", inputs)
        assert text in info.value.message() and "input 'TEXT'" in info.value.message()
        assert info.value.status() == "400"


BROKEN = {
    # Not a TorchScript archive at all.
    "torch_not_torchscript": (None, "unable to load"),
    # Valid TorchScript whose result does not match the config.
    "torch_wrong_type": (("WrongType", module_source("WrongType", "INPUT__0: Tensor) -> Tensor",
                                                     "    return torch.to(INPUT__0, 4)\n")), "is INT64, the config says FP32"),
    "torch_too_few_outputs": (("TooFew", module_source("TooFew", "INPUT__0: Tensor) -> Tensor",
                                                       "    return INPUT__0\n")), "element 1 of forward's result"),
    "torch_wrong_shape": (("WrongShape", module_source("WrongShape", "INPUT__0: Tensor) -> Tensor",
                                                       "    return torch.cat([INPUT__0, INPUT__0])\n")),
                          "has shape [8], the config expects [4]"),
}


def broken_model(repo, name, archive):
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    outputs = '{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }'
    if name == "torch_too_few_outputs":
        outputs += ', { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }'
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }} ]\noutput [ {outputs} ]\n')
    if archive is None:
        (folder / "1" / "model.pt").write_bytes(b"this is not a TorchScript file")
    else:
        write_archive(folder / "1" / "model.pt", *archive, root=name)


def test_bad_models_fail_alone_with_libtorchs_message(start_server, repo_copy):
    repo = repo_copy(["torch_add_sub"])
    for name, (archive, _) in BROKEN.items():
        broken_model(repo, name, archive)
    (repo / "torch_no_config" / "1").mkdir(parents=True)
    write_archive(repo / "torch_no_config" / "1" / "model.pt", "Bare",
                  module_source("Bare", "x: Tensor,\n    y: Tensor) -> Tensor", "    return x\n"), root="bare")
    # Inputs for forward's first and third arguments only: a config error, refused at load.
    (repo / "torch_gap" / "1").mkdir(parents=True)
    (repo / "torch_gap" / "config.pbtxt").write_text(
        'name: "torch_gap"\nplatform: "pytorch_libtorch"\nmax_batch_size: 0\n'
        'input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "c" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
    write_archive(repo / "torch_gap" / "1" / "model.pt", "Gap",
                  module_source("Gap", "a: Tensor,\n    b: Tensor,\n    c: Tensor) -> Tensor",
                                "    return torch.add(a, c)\n"), root="gap")
    srv = start_server(repo, args=["--model-control-mode", "explicit", "--load-model", "torch_add_sub"])
    c = srv.client
    with pytest.raises(InferenceServerException) as info:
        c.load_model("torch_not_torchscript")
    assert "failed to load 'torch_not_torchscript'" in info.value.message() or "unable to load" in info.value.message()
    assert "as TorchScript" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        c.load_model("torch_no_config")
    message = info.value.message()
    assert "cannot be completed from its TorchScript file" in message and "forward takes: x, y" in message, message
    with pytest.raises(InferenceServerException) as info:
        c.load_model("torch_gap")
    assert "no input of the config goes to argument 1 ('b') of forward" in info.value.message()
    x = httpclient.InferInput("INPUT__0", [4], "FP32")
    x.set_data_from_numpy(np.arange(4, dtype=np.float32))
    for name, (archive, text) in BROKEN.items():
        if archive is None:
            continue
        c.load_model(name)
        with pytest.raises(InferenceServerException) as info:
            c.infer(name, [x])
        assert text in info.value.message(), (name, info.value.message())
    # Everything else kept serving.
    a = np.ones((1, 16), dtype=np.float32)
    res = c.infer("torch_add_sub", add_sub_inputs(httpclient, a, a))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT__0"), a + a)
    assert c.is_server_live()


def test_silero_vad_torchscript_matches_the_onnx_model(torch_server):
    """The real Silero VAD TorchScript file (wrapped so the engine keeps its state) against the
    bundled ONNX Silero VAD run in-process on the same audio: 4 conversations interleaved on
    one gRPC stream, every chunk's probability compared."""
    from test_silero_vad import audio, inputs, reference
    convs = {f"conv-{k}": audio(100 + k, 10) for k in range(4)}
    expected = {cid: reference(chunks) for cid, chunks in convs.items()}
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(torch_server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        n = 10
        for i in range(n):
            for cid, chunks in convs.items():
                client.async_stream_infer("silero_vad_torch", inputs(grpcclient, chunks[i]), request_id=f"{cid}/{i}",
                                          sequence_id=cid, sequence_start=i == 0, sequence_end=i == n - 1)
        got = {}
        for _ in range(n * len(convs)):
            result, error = answers.get(timeout=60)
            assert error is None, error
            got[result.get_response().id] = float(result.as_numpy("output")[0][0])
    finally:
        client.stop_stream()
        client.close()
    worst = 0.0
    for cid in convs:
        mine = np.array([got[f"{cid}/{i}"] for i in range(n)])
        worst = max(worst, float(np.max(np.abs(mine - np.array(expected[cid])))))
        np.testing.assert_allclose(mine, expected[cid], atol=1e-4, err_msg=cid)
    print(f"silero_vad_torch vs ONNX: max abs difference {worst:.2e}")



def _environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_libtorchs_threads_sleep_when_idle_unless_the_user_says_otherwise(tmp_path, repo_copy, given):
    """Started without OMP_WAIT_POLICY, the server executes itself again with PASSIVE (libgomp
    reads it only when it is loaded), keeping its process id; a value the user gave is kept."""
    import os
    from helpers import Server
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    srv = Server(repo_copy(["torch_add_sub"]), log_dir=tmp_path, env=env).start()
    try:
        environ = _environ(srv.proc.pid)
        assert environ.get(b"OMP_WAIT_POLICY") == (given or "PASSIVE").encode()
        with open(f"/proc/{srv.proc.pid}/cmdline", "rb") as f:
            assert b"--model-repository" in f.read()
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        with httpclient.InferenceServerClient(srv.http_url) as client:
            out = client.infer("torch_add_sub", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT__0")
        np.testing.assert_array_equal(out, a + a)
    finally:
        assert srv.stop() == 0, srv.log_tail()
