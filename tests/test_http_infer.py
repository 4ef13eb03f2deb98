"""Inference over HTTP the way tritonclient users run it: JSON and binary tensors, per-output
binary_data, many requests in flight, every datatype through identity models, a real ONNX MLP
checked against onnxruntime, and the classification extension. Expected values from numpy.
"""
import json

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from helpers import REPO_ROOT, binary_request, split_binary_response


def add_sub_inputs(a, b, binary=True):
    ins = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
           httpclient.InferInput("INPUT1", list(b.shape), "FP32")]
    ins[0].set_data_from_numpy(a, binary_data=binary)
    ins[1].set_data_from_numpy(b, binary_data=binary)
    return ins


@pytest.fixture
def ab():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((1, 16)).astype(np.float32),
            rng.standard_normal((1, 16)).astype(np.float32))


@pytest.mark.parametrize("binary_in", [False, True])
@pytest.mark.parametrize("binary_out", [False, True])
def test_add_sub_json_and_binary(server, ab, binary_in, binary_out):
    a, b = ab
    outs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary_out)]
    res = server.client.infer("add_sub", add_sub_inputs(a, b, binary_in), outputs=outs)
    np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    resp = res.get_response()
    assert resp["model_name"] == "add_sub"
    assert resp["model_version"] == "1"
    by_name = {o["name"]: o for o in resp["outputs"]}
    binary_name = "OUTPUT0" if binary_out else "OUTPUT1"
    json_name = "OUTPUT1" if binary_out else "OUTPUT0"
    assert by_name[binary_name]["parameters"] == {"binary_data_size": 64}
    assert "data" not in by_name[binary_name]
    assert len(by_name[json_name]["data"]) == 16
    assert by_name[json_name]["shape"] == [1, 16]


def test_full_batch_of_eight(server):
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    b = np.full((8, 16), 0.5, dtype=np.float32)
    res = server.client.infer("add_sub", add_sub_inputs(a, b))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)


def test_only_requested_output_is_returned(server, ab):
    a, b = ab
    res = server.client.infer("add_sub", add_sub_inputs(a, b),
                              outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert [o["name"] for o in res.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_request_id_is_echoed_and_omitted_when_absent(server, ab):
    a, b = ab
    res = server.client.infer("add_sub", add_sub_inputs(a, b), request_id="req-42")
    assert res.get_response()["id"] == "req-42"
    res = server.client.infer("add_sub", add_sub_inputs(a, b))
    assert "id" not in res.get_response()


def test_raw_json_response_shape(server):
    body = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [[1.0] * 16]}]}
    r = server.post("/v2/models/add_sub/versions/1/infer", body)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert "Inference-Header-Content-Length" not in r.headers
    out = r.json()
    assert out["model_name"] == "add_sub" and out["model_version"] == "1"
    assert out["outputs"][0] == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16],
                                 "data": [float(i + 1) for i in range(16)]}
    assert out["outputs"][1]["data"] == [float(i - 1) for i in range(16)]


def test_infer_paths_with_escapes_or_a_bad_version_answer_as_the_router_does(server):
    """The plain infer paths are matched before actix's router; a path with a percent-escape
    goes to the router, which decodes it, and a version that is not a number is a 404 on both
    ways. Sent with http.client, which sends the path as written (requests unescapes %5F)."""
    import http.client
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]})

    def post(path):
        c = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        try:
            c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"{}")
        finally:
            c.close()

    for path in ["/v2/models/add_sub/infer", "/v2/models/add%5Fsub/infer",
                 "/v2/models/add_sub/versions/1/infer", "/v2/models/add_sub/versions/%31/infer"]:
        status, out = post(path)
        assert status == 200, (path, out)
        assert out["model_name"] == "add_sub" and out["model_version"] == "1", path
        assert out["outputs"][0]["data"] == [float(i + 1) for i in range(16)], path
    for path in ["/v2/models/add_sub/versions/x/infer", "/v2/models/add_sub/versions/%78/infer"]:
        status, out = post(path)
        assert status == 404 and out["error"], (path, out)
    status, out = post("/v2/models/no_such_model/infer")
    assert (status, out["error"]) == (404, "Request for unknown model: 'no_such_model' is not found")


def test_raw_binary_response_headers(server):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    hdr = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT1", "parameters": {"binary_data": True}}]}
    body, headers = binary_request(hdr, [a.tobytes(), b.tobytes()])
    r = server.post("/v2/models/add_sub/infer", body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/octet-stream"
    header, tail = split_binary_response(r)
    assert int(r.headers["Inference-Header-Content-Length"]) + 128 == len(r.content)
    assert [o["parameters"] for o in header["outputs"]] == [{"binary_data_size": 64}] * 2
    np.testing.assert_array_equal(np.frombuffer(tail[:64], np.float32), (a + b).ravel())
    np.testing.assert_array_equal(np.frombuffer(tail[64:], np.float32), (a - b).ravel())


def test_binary_data_output_request_parameter(server):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    hdr = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}],
        "parameters": {"binary_data_output": True}}
    body, headers = binary_request(hdr, [a.tobytes(), a.tobytes()])
    r = server.post("/v2/models/add_sub/infer", body, headers=headers)
    assert r.status_code == 200, r.text
    header, tail = split_binary_response(r)
    assert len(tail) == 128
    np.testing.assert_array_equal(np.frombuffer(tail[:64], np.float32), (2 * a).ravel())


def test_binary_inputs_without_binary_outputs_answer_plain_json(server):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    hdr = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}]}
    body, headers = binary_request(hdr, [a.tobytes(), a.tobytes()])
    r = server.post("/v2/models/add_sub/infer", body, headers=headers)
    assert r.status_code == 200, r.text
    assert "Inference-Header-Content-Length" not in r.headers
    assert r.json()["outputs"][1]["data"] == [0.0] * 16


def test_64_async_requests_in_flight(server):
    rng = np.random.default_rng(1)
    pending = []
    for i in range(64):
        batch = 1 + i % 8
        a = rng.standard_normal((batch, 16)).astype(np.float32)
        b = rng.standard_normal((batch, 16)).astype(np.float32)
        pending.append((a, b, server.client.async_infer("add_sub", add_sub_inputs(a, b),
                                                        request_id=str(i))))
    for i, (a, b, req) in enumerate(pending):
        res = req.get_result(timeout=60)
        assert res.get_response()["id"] == str(i)
        np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_identity_fp32_variable_length(server, n):
    meta = server.client.get_model_metadata("identity_fp32")
    iname, oname = meta["inputs"][0]["name"], meta["outputs"][0]["name"]
    x = np.linspace(-3, 3, n, dtype=np.float32)
    inp = httpclient.InferInput(iname, [1, n], "FP32")  # max_batch_size 8: [batch, -1]
    inp.set_data_from_numpy(x.reshape(1, n))
    res = server.client.infer("identity_fp32", [inp])
    np.testing.assert_array_equal(res.as_numpy(oname), x.reshape(1, n))


def sample(datatype, shape, rng):
    if datatype == "BYTES":
        return np.array([f"s{i}-é".encode() for i in range(int(np.prod(shape)))],
                        dtype=np.object_).reshape(shape)
    dt = triton_to_np_dtype(datatype)
    if dt == bool:
        return (rng.integers(0, 2, shape) == 1)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def concrete(shape, max_batch_size):
    dims = [3 if d < 0 else d for d in shape[1 if max_batch_size > 0 else 0:]]
    return ([2] if max_batch_size > 0 else []) + dims


def identity_type_models(server):
    names = sorted({m["name"] for m in server.index() if m["name"].startswith("identity_types")})
    assert names, "the bundled repository has identity_types model(s)"
    return names


def test_every_datatype_round_trips_through_identity(server):
    rng = np.random.default_rng(3)
    seen = set()
    for model in identity_type_models(server):
        meta = server.client.get_model_metadata(model)
        cfg = server.client.get_model_config(model)
        mbs = cfg.get("max_batch_size", 0)
        for binary in (True, False):
            ins, expected = [], {}
            for i, o in zip(meta["inputs"], meta["outputs"]):
                shape = concrete(i["shape"], mbs)
                t = httpclient.InferInput(i["name"], shape, i["datatype"])
                if i["datatype"] == "BF16":
                    # numpy has no bfloat16: tritonclient takes ml_dtypes.bfloat16 arrays,
                    # binary only (JSON has no BF16 form); these values are exact in BF16.
                    x = (rng.integers(-64, 64, shape) / 4).astype(ml_dtypes.bfloat16)
                    t.set_data_from_numpy(x, binary_data=True)
                else:
                    x = sample(i["datatype"], shape, rng)
                    t.set_data_from_numpy(x, binary_data=binary)
                ins.append(t)
                expected[o["name"]] = x
                seen.add(i["datatype"])
            outs = [httpclient.InferRequestedOutput(n, binary_data=binary or n.endswith("BF16")) for n in expected]
            res = server.client.infer(model, ins, outputs=outs)
            for name, x in expected.items():
                got = res.as_numpy(name)
                assert got.dtype == x.dtype or x.dtype == np.object_, (model, name, got.dtype)
                if x.dtype == np.object_ and not binary:
                    # JSON carries BYTES as strings, and tritonclient hands them back as str
                    # (as it does against Triton).
                    x = np.vectorize(lambda b: b.decode(), otypes=[object])(x)
                np.testing.assert_array_equal(got, x, err_msg=f"{model}/{name} binary={binary}")
    for dt in ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64",
               "FP16", "BF16", "FP32", "FP64", "BYTES"):
        assert dt in seen, f"no identity model for {dt}"


def test_mlp_matches_onnxruntime(server):
    import onnxruntime as ort
    from helpers import BUNDLED_REPO
    files = sorted((BUNDLED_REPO / "mlp").rglob("*.onnx"))
    assert files, "model_repository/mlp has an .onnx file (scripts/setup.sh)"
    sess = ort.InferenceSession(str(files[-1]), providers=["CPUExecutionProvider"])
    meta = server.client.get_model_metadata("mlp")
    cfg = server.client.get_model_config("mlp")
    mbs = cfg.get("max_batch_size", 0)
    rng = np.random.default_rng(11)
    feeds, ins = {}, []
    for i in meta["inputs"]:
        shape = concrete(i["shape"], mbs)
        x = rng.standard_normal(shape).astype(triton_to_np_dtype(i["datatype"]))
        feeds[i["name"]] = x
        t = httpclient.InferInput(i["name"], shape, i["datatype"])
        t.set_data_from_numpy(x)
        ins.append(t)
    expected = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    res = server.client.infer("mlp", ins)
    for o in meta["outputs"]:
        np.testing.assert_allclose(res.as_numpy(o["name"]), expected[o["name"]], rtol=1e-5, atol=1e-6)


def test_classification_without_labels(server):
    a = np.array([[0.1, 0.7, 0.05, 0.9] + [0.0] * 12], dtype=np.float32)
    b = np.zeros((1, 16), dtype=np.float32)
    res = server.client.infer("add_sub", add_sub_inputs(a, b), outputs=[
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=3)])
    out = res.get_response()["outputs"][0]
    assert out["datatype"] == "BYTES"
    assert out["shape"] == [1, 3]
    assert out["data"] == ["0.900000:3", "0.700000:1", "0.100000:0"]
    res = server.client.infer("add_sub", add_sub_inputs(a, b), outputs=[
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True, class_count=2)])
    assert [s.decode() for s in res.as_numpy("OUTPUT0").ravel()] == ["0.900000:3", "0.700000:1"]


def test_classification_with_labels(server):
    """`classify` (OUTPUT0 = softmax(INPUT0), labels.txt) with class_count 2 over tritonclient:
    "<value>:<index>:<label>" strings, best first, the label being line <index> of labels.txt."""
    labels = (REPO_ROOT / "model_repository" / "classify" / "labels.txt").read_text().split()
    assert labels == ["cat", "dog", "bird", "fish"]
    x = np.array([0.1, 0.7, 0.05, 0.9], dtype=np.float32)
    p = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    expected = [f"{p[i]:f}:{i}:{labels[i]}" for i in (3, 1)]
    assert expected[0].endswith(":3:fish") and expected[1].endswith(":1:dog")
    inp = httpclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(x)

    def strings(res, name):
        return [v.decode() if isinstance(v, bytes) else v for v in res.as_numpy(name).ravel()]
    for binary in (False, True):
        res = server.client.infer("classify", [inp], outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=2)])
        out = res.get_output("OUTPUT0")
        assert out["datatype"] == "BYTES" and out["shape"] == [2], out
        assert strings(res, "OUTPUT0") == expected, binary
    # A class_count above the element count gives every class; OUTPUT1 has no labels.
    res = server.client.infer("classify", [inp], outputs=[
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=9),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False, class_count=1)])
    assert strings(res, "OUTPUT0") == [f"{p[i]:f}:{i}:{labels[i]}" for i in (3, 1, 0, 2)]
    assert strings(res, "OUTPUT1") == ["0.900000:3"]


def test_classification_per_batch_element(server):
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    body = {"inputs": [
        {"name": "INPUT0", "shape": [2, 16], "datatype": "FP32", "data": a.ravel().tolist()},
        {"name": "INPUT1", "shape": [2, 16], "datatype": "FP32", "data": b.ravel().tolist()}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}]}
    r = server.post("/v2/models/add_sub/infer", body)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["shape"] == [2, 2]
    assert out["data"] == ["16.000000:15", "15.000000:14", "32.000000:15", "31.000000:14"]


def test_request_parameters_are_accepted(server):
    body = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}],
        "parameters": {"custom": "x", "n": 3}}
    r = server.post("/v2/models/add_sub/infer", json.dumps(body))
    assert r.status_code == 200, r.text


def test_onnx_session_config_entries_pass_through(start_server, repo_copy):
    """`parameters` keys starting `session.` are ONNX Runtime session config entries (here the
    thread-pool spinning switches); a model with them loads and infers."""
    repo = repo_copy(["mlp"])
    cfg = repo / "mlp" / "config.pbtxt"
    # the bundled mlp sets intra-op spinning off: its own `parameters` lines go, and this test
    # sets the other value, so the config read back shows the test's entry
    own = [ln for ln in cfg.read_text().splitlines() if not ln.startswith("parameters")]
    cfg.write_text("\n".join(own) + "\n"
                   + 'parameters { key: "session.intra_op.allow_spinning" value: { string_value: "1" } }\n'
                   + 'parameters { key: "session.inter_op.allow_spinning" value: { string_value: "0" } }\n'
                   + 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n')
    srv = start_server(repo)
    x = np.ones((2, 256), dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [2, 256], "FP32")
    inp.set_data_from_numpy(x)
    out = srv.client.infer("mlp", [inp]).as_numpy("OUTPUT0")
    assert out.shape == (2, 256) and np.isfinite(out).all()
    cfg = srv.client.get_model_config("mlp")
    assert cfg["parameters"]["session.intra_op.allow_spinning"] == {"string_value": "1"}
    assert cfg["parameters"]["session.inter_op.allow_spinning"] == {"string_value": "0"}


def test_bytes_elements_with_nul_and_non_utf8_bytes_pass_through_onnx(server):
    """ONNX string tensors carry each element with its length: `"he\\x00llo"` (Triton's string
    examples send it), a lone NUL, an empty element and bytes that are not UTF-8 come back from
    `identity_bytes` unchanged, over HTTP (binary) and gRPC."""
    elements = [b"he\x00llo", b"\x00", b"", b"\xff\xfe\x00 raw", b"plain"]
    data = np.array([elements], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [1, len(elements)], "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    res = server.client.infer("identity_bytes", [inp],
                              outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    assert list(res.as_numpy("OUTPUT0").ravel()) == elements
    # JSON carries strings: NUL is a valid character there too.
    inp = httpclient.InferInput("INPUT0", [1, 2], "BYTES")
    inp.set_data_from_numpy(np.array([["he\x00llo", "x"]], dtype=np.object_), binary_data=False)
    res = server.client.infer("identity_bytes", [inp],
                              outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
    assert res.get_output("OUTPUT0")["data"] == ["he\x00llo", "x"]

    client = grpcclient.InferenceServerClient(server.grpc_url)
    ginp = grpcclient.InferInput("INPUT0", [1, len(elements)], "BYTES")
    ginp.set_data_from_numpy(data)
    res = client.infer("identity_bytes", [ginp])
    assert list(res.as_numpy("OUTPUT0").ravel()) == elements
    client.close()
