"""GPU instance groups on a machine without GPU execution (this one: the CPU libtorch and the CPU
ONNX Runtime from PyPI): a KIND_GPU model fails its own load saying exactly what is missing,
KIND_AUTO runs on the CPU, and every other model keeps serving. What runs on a GPU is checked on
a GPU machine by loadtests/gpu/run.sh."""
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def variant(repo, source, name, extra):
    """A copy of model `source` named `name`, its instance groups replaced by `extra`."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    for f in (repo / source / "1").iterdir():
        (folder / "1" / f.name).write_bytes(f.read_bytes())
    text = (repo / source / "config.pbtxt").read_text().replace(f'name: "{source}"', f'name: "{name}"')
    text = "\n".join(line for line in text.splitlines() if not line.startswith("instance_group"))
    (folder / "config.pbtxt").write_text(text + "\n" + extra + "\n")


def add_sub_inputs(a, names=("INPUT__0", "INPUT__1")):
    ins = [httpclient.InferInput(n, list(a.shape), "FP32") for n in names]
    for i in ins:
        i.set_data_from_numpy(a)
    return ins


def load_error(client, name):
    with pytest.raises(InferenceServerException) as info:
        client.load_model(name)
    return info.value.message()


def test_a_pytorch_gpu_instance_without_cuda_fails_its_load_with_the_reason(start_server, repo_copy):
    repo = repo_copy(["torch_add_sub"])
    variant(repo, "torch_add_sub", "torch_gpu", "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]")
    variant(repo, "torch_add_sub", "torch_auto", "instance_group [ { kind: KIND_AUTO } ]")
    variant(repo, "torch_add_sub", "torch_any_gpu", "instance_group [ { kind: KIND_GPU } ]")
    srv = start_server(repo, args=["--model-control-mode", "explicit", "--load-model", "torch_add_sub"])
    c = srv.client
    message = load_error(c, "torch_gpu")
    assert "asks for GPU 0, but CUDA is off" in message and "libtorch_cuda.so does not exist" in message, message
    message = load_error(c, "torch_any_gpu")
    assert "asks for KIND_GPU on every GPU, but no GPU is usable here for 'pytorch' models" in message, message
    c.load_model("torch_auto")
    kinds = [g["kind"] for g in c.get_model_config("torch_auto")["instance_group"]]
    assert kinds == ["KIND_CPU"], kinds
    a = np.ones((1, 16), dtype=np.float32)
    for name in ("torch_add_sub", "torch_auto"):
        np.testing.assert_array_equal(c.infer(name, add_sub_inputs(a)).as_numpy("OUTPUT__0"), a + a)
    assert "CUDA off for PyTorch models" in srv.log_path.read_text(errors="replace")


def test_an_onnx_gpu_instance_needs_the_provider_in_the_loaded_library(start_server, repo_copy):
    repo = repo_copy(["add_sub"])
    variant(repo, "add_sub", "onnx_gpu", "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]")
    variant(repo, "add_sub", "onnx_trt", "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n"
            'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }')
    variant(repo, "add_sub", "onnx_bad_accel", 'optimization { execution_accelerators { '
            'gpu_execution_accelerator: [ { name: "warp_drive" } ] } }')
    variant(repo, "add_sub", "onnx_auto", "instance_group [ { kind: KIND_AUTO } ]")
    srv = start_server(repo, args=["--model-control-mode", "explicit", "--load-model", "add_sub"])
    c = srv.client
    message = load_error(c, "onnx_gpu")
    assert "needs ONNX Runtime's CUDAExecutionProvider (KIND_GPU)" in message, message
    message = load_error(c, "onnx_trt")
    assert "needs ONNX Runtime's TensorrtExecutionProvider (gpu_execution_accelerator 'tensorrt')" in message, message
    assert "unknown GPU execution accelerator 'warp_drive'" in load_error(c, "onnx_bad_accel")
    c.load_model("onnx_auto")
    assert [g["kind"] for g in c.get_model_config("onnx_auto")["instance_group"]] == ["KIND_CPU"]
    a = np.ones((1, 16), dtype=np.float32)
    for name in ("add_sub", "onnx_auto"):
        res = c.infer(name, add_sub_inputs(a, ("INPUT0", "INPUT1")))
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + a)
