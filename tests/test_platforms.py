"""The SageMaker and Vertex AI frontends (issue 28), called with plain HTTP as the platforms call
them: SageMaker's `GET /ping` and `POST /invocations` (its default model from
SAGEMAKER_TRITON_DEFAULT_MODEL_NAME), Vertex AI's health and predict routes from AIP_HEALTH_ROUTE
and AIP_PREDICT_ROUTE with the default model and the X-Vertex-Ai-Triton-Redirect header.
"""
import json
import socket
import subprocess

import numpy as np
import pytest
import requests

from helpers import Server, binary_request, free_ports, split_binary_response, tritium_bin, wait_until

SAGEMAKER_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
VERTEX_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="

A = list(range(16))
B = [1.0] * 16
ADD_SUB = {"inputs": [
    {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": A},
    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": B},
]}


def outputs(body):
    return {o["name"]: o["data"] for o in body["outputs"]}


def check_add_sub(body):
    out = outputs(body)
    assert out["OUTPUT0"] == [a + 1 for a in A] and out["OUTPUT1"] == [a - 1 for a in A], body


def binary_add_sub():
    header = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
    ], "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
    body, headers = binary_request(header, [np.array(A, np.float32).tobytes(), np.array(B, np.float32).tobytes()])
    return body, len(json.dumps(header).encode())


@pytest.fixture
def clean_env(monkeypatch):
    for var in ["AIP_MODE", "AIP_HTTP_PORT", "AIP_PREDICT_ROUTE", "AIP_HEALTH_ROUTE",
                "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", "SAGEMAKER_TRITON_PING_MODE", "SAGEMAKER_TRITON_INFERENCE_TYPE"]:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_sagemaker_ping_and_invocations(start_server, repo_copy, clean_env):
    clean_env.setenv("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", "add_sub")
    port = free_ports(1)[0]
    srv = start_server(repo_copy(["add_sub", "identity_fp32"]),
                       args=["--allow-sagemaker=true", f"--sagemaker-port={port}"])
    base = f"http://127.0.0.1:{port}"
    r = requests.get(f"{base}/ping", timeout=10)
    assert r.status_code == 200 and r.content == b""
    r = requests.post(f"{base}/invocations", json=ADD_SUB, timeout=30)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json", r.text
    check_add_sub(r.json())
    # Binary tensors: the JSON header's size in the content type, both ways.
    body, n = binary_add_sub()
    r = requests.post(f"{base}/invocations", data=body, headers={"Content-Type": f"{SAGEMAKER_MIME}{n}"}, timeout=30)
    assert r.status_code == 200, r.text
    header, tail = split_binary_response(r)
    assert r.headers["Content-Type"] == f"{SAGEMAKER_MIME}{r.headers['Inference-Header-Content-Length']}"
    assert np.frombuffer(tail, np.float32).tolist() == [a + 1 for a in A]
    r = requests.post(f"{base}/invocations", data=body, headers={"Content-Type": f"{SAGEMAKER_MIME}x"}, timeout=30)
    assert r.status_code == 400 and "Unable to parse inference header size" in r.json()["error"]
    r = requests.post(f"{base}/invocations", data="{", timeout=30)
    assert r.status_code == 400 and "error" in r.json()
    # Anything else is a bad request, as from Triton.
    assert requests.get(f"{base}/v2", timeout=10).status_code == 400
    assert requests.get(f"{base}/invocations", timeout=10).status_code == 400
    # The statistics show the SageMaker requests as any other.
    stats = srv.get("/v2/models/add_sub/stats").json()["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 2


def test_sagemaker_without_default_model_names_the_variable(start_server, repo_copy, clean_env):
    port = free_ports(1)[0]
    start_server(repo_copy(["add_sub"]), args=["--allow-sagemaker=true", f"--sagemaker-port={port}"])
    r = requests.post(f"http://127.0.0.1:{port}/invocations", json=ADD_SUB, timeout=30)
    assert r.status_code in (400, 404) and "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME" in r.json()["error"]


def test_sagemaker_ping_follows_readiness(start_server, repo_copy, clean_env):
    port = free_ports(1)[0]
    repo = repo_copy(["add_sub"])
    (repo / "add_sub" / "config.pbtxt").write_text("not_a_field: 1\n")
    start_server(repo, args=["--allow-sagemaker=true", f"--sagemaker-port={port}", "--exit-on-error=false"],
                 wait_for="live")
    assert requests.get(f"http://127.0.0.1:{port}/ping", timeout=10).status_code == 400


def vertex_env(env, port=None):
    env.setenv("AIP_PREDICT_ROUTE", "/v1/endpoints/[0-9]+/deployedModels/[0-9]+:predict")
    env.setenv("AIP_HEALTH_ROUTE", "/health")
    if port:
        env.setenv("AIP_HTTP_PORT", str(port))


def test_vertex_ai_predict_health_and_redirect(start_server, repo_copy, clean_env):
    port = free_ports(1)[0]
    vertex_env(clean_env, port)  # the port from AIP_HTTP_PORT, as Vertex AI sets it
    start_server(repo_copy(["add_sub", "identity_fp32"]),
                 args=["--allow-vertex-ai=true", "--vertex-ai-default-model=add_sub"])
    base = f"http://127.0.0.1:{port}"
    predict = f"{base}/v1/endpoints/1/deployedModels/2:predict"
    r = requests.get(f"{base}/health", timeout=10)
    assert r.status_code == 200 and r.content == b""
    r = requests.post(predict, json=ADD_SUB, timeout=30)
    assert r.status_code == 200, r.text
    check_add_sub(r.json())
    body, n = binary_add_sub()
    r = requests.post(predict, data=body, headers={"Content-Type": f"{VERTEX_MIME}{n}"}, timeout=30)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith(VERTEX_MIME), r.text
    assert np.frombuffer(split_binary_response(r)[1], np.float32).tolist() == [a + 1 for a in A]
    # The redirect header reaches the read-only v2 endpoints.
    redirect = lambda target, **kw: requests.post(predict, headers={"X-Vertex-Ai-Triton-Redirect": target}, timeout=30, **kw)
    r = redirect("v2/models/identity_fp32/infer",
                 json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [3, 4]}]})
    assert r.status_code == 200 and outputs(r.json())["OUTPUT0"] == [3, 4], r.text
    assert redirect("v2/models/add_sub/config").json()["max_batch_size"] == 8
    assert redirect("v2/models/add_sub").json()["name"] == "add_sub"
    assert redirect("v2/models/add_sub/versions/1/ready").status_code == 200
    assert redirect("v2").json()["name"] == "triton"
    assert redirect("v2/health/ready").status_code == 200
    assert {m["name"] for m in redirect("v2/repository/index").json()} == {"add_sub", "identity_fp32"}
    assert redirect("v2/models/stats").status_code == 200
    assert redirect("v2/systemsharedmemory/status").status_code == 200
    # Changes go through the HTTP endpoint only.
    assert redirect("v2/repository/models/add_sub/unload").status_code == 403
    assert redirect("v2/systemsharedmemory/region/r/register", json={}).status_code == 403
    assert redirect("v2/nothing").status_code == 400
    r = redirect("v2/models/nope/infer", json=ADD_SUB)
    assert r.status_code == 404 and "nope" in r.json()["error"]
    # Routes: only the two, and predict is POST.
    assert requests.get(predict, timeout=10).status_code == 405
    assert requests.post(f"{base}/v1/endpoints/x/deployedModels/2:predict", json=ADD_SUB, timeout=10).status_code == 400
    assert requests.get(f"{base}/v2/health/ready", timeout=10).status_code == 400


def test_vertex_ai_single_model_is_the_default(start_server, repo_copy, clean_env):
    port = free_ports(1)[0]
    vertex_env(clean_env)
    start_server(repo_copy(["add_sub"]), args=["--allow-vertex-ai=true", f"--vertex-ai-port={port}"])
    r = requests.post(f"http://127.0.0.1:{port}/v1/endpoints/1/deployedModels/2:predict", json=ADD_SUB, timeout=30)
    assert r.status_code == 200
    check_add_sub(r.json())


def run_to_exit(args, env, timeout=60):
    p = subprocess.run([str(tritium_bin()), *args], capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("setup, args, message", [
    ("no routes", ["--vertex-ai-default-model=add_sub"], "AIP_PREDICT_ROUTE is not defined for Vertex AI endpoint"),
    ("two models", [], "Expect the model repository contains only a single model if default model is not specified"),
    ("unknown default", ["--vertex-ai-default-model=nope"], "Expect the default model 'nope' is loaded"),
])
def test_vertex_ai_refuses_to_start_without_routes_or_a_default_model(repo_copy, clean_env, setup, args, message):
    import os
    if setup != "no routes":
        vertex_env(clean_env)
    http, grpc, metrics, vertex = free_ports(4)
    repo = repo_copy(["add_sub", "identity_fp32"])
    code, out = run_to_exit(["--model-repository", str(repo), "--http-address=127.0.0.1", f"--http-port={http}",
                             f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--grpc-address=127.0.0.1",
                             "--allow-vertex-ai=true", f"--vertex-ai-port={vertex}", *args], dict(os.environ))
    assert code == 1 and message in out, out


def test_aip_mode_prediction_turns_vertex_ai_on_and_http_grpc_off(start_server, repo_copy, clean_env, tmp_path):
    port = free_ports(1)[0]
    vertex_env(clean_env, port)
    clean_env.setenv("AIP_MODE", "PREDICTION")
    # Asked for explicitly, HTTP stays on beside Vertex AI.
    srv = start_server(repo_copy(["add_sub"]), args=["--allow-http=true"])
    assert requests.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    assert srv.stop() == 0
    # Not asked for: only Vertex AI serves.
    lone = Server(repo_copy(["add_sub"]), log_dir=tmp_path)
    lone.proc = subprocess.Popen(lone.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _get(f"http://127.0.0.1:{port}/health") == 200, what="Vertex AI health")
        assert _get(f"{lone.base}/v2/health/live") is None, "HTTP is off"
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", lone.grpc_port), timeout=2).close()
    finally:
        lone.kill()


def _get(url):
    try:
        return requests.get(url, timeout=5).status_code
    except requests.RequestException:
        return None


def test_sagemaker_multi_model_load_invoke_list_unload(start_server, repo_copy, clean_env, tmp_path):
    import shutil
    port = free_ports(1)[0]
    srv = start_server(repo_copy(["identity_fp32"]), args=[
        "--allow-sagemaker=true", f"--sagemaker-port={port}", "--model-control-mode=explicit"])
    base = f"http://127.0.0.1:{port}"
    # SageMaker unpacks each model archive to <root>/<hash>/model/ (the model's own folder).
    source = repo_copy(["add_sub"]) / "add_sub"
    shutil.copytree(source, tmp_path / "mme" / "abc123" / "model")
    url = str(tmp_path / "mme" / "abc123" / "model")
    assert requests.get(f"{base}/models", timeout=10).json() == {"models": []}
    assert requests.get(f"{base}/models/abc123", timeout=10).status_code == 404
    r = requests.post(f"{base}/models", json={"model_name": "abc123", "url": url},
                      headers={"X-Amzn-SageMaker-Target-Model": "add_sub.tar.gz"}, timeout=60)
    assert r.status_code == 200, r.text
    # Loaded again: the repository is registered already.
    r = requests.post(f"{base}/models", json={"model_name": "abc123", "url": url},
                      headers={"X-Amzn-SageMaker-Target-Model": "add_sub.tar.gz"}, timeout=60)
    assert r.status_code == 409, r.text
    root = str(tmp_path / "mme" / "abc123")
    assert requests.get(f"{base}/models", timeout=10).json() == {"models": [{"modelName": "abc123", "modelUrl": root}]}
    assert requests.get(f"{base}/models/abc123", timeout=10).json() == {"modelName": "abc123", "modelUrl": root}
    r = requests.post(f"{base}/models/abc123/invoke", json=ADD_SUB,
                      headers={"X-Amzn-SageMaker-Target-Model": "add_sub.tar.gz"}, timeout=30)
    assert r.status_code == 200, r.text
    check_add_sub(r.json())
    # The model serves under its target name on the v2 endpoint too.
    assert srv.get("/v2/models/add_sub.tar.gz/ready").status_code == 200
    assert requests.post(f"{base}/models/nope/invoke", json=ADD_SUB, timeout=30).status_code == 404
    r = requests.delete(f"{base}/models/abc123", headers={"X-Amzn-SageMaker-Target-Model": "add_sub.tar.gz"}, timeout=60)
    assert r.status_code == 200, r.text
    assert requests.get(f"{base}/models", timeout=10).json() == {"models": []}
    assert srv.get("/v2/models/add_sub.tar.gz/ready").status_code != 200
    assert requests.delete(f"{base}/models/abc123", timeout=10).status_code == 404
    # Bad load requests.
    assert requests.post(f"{base}/models", json={"model_name": "x", "url": "/proc/self"}, timeout=10).status_code == 400
    assert requests.post(f"{base}/models", json={"model_name": "x"}, timeout=10).status_code == 400
