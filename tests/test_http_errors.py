"""Every bad request a client can send over HTTP, answered with Triton's status and text
(docs/triton-reference.md), and the server still serving afterwards.

Raw `requests` is used for bodies tritonclient would never build. Where Triton 2.51 answers 500
for a client's malformed JSON, Tritium answers 400 (see the reference doc); everywhere else the
status is Triton's.
"""
import json
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import binary_request, error_text, wait_until

ADD_SUB = "/v2/models/add_sub/infer"


def tensor(name, shape, data, datatype="FP32"):
    return {"name": name, "shape": list(shape), "datatype": datatype, "data": data}


def good_inputs(shape=(1, 16)):
    n = int(np.prod(shape))
    return [tensor("INPUT0", shape, [float(i) for i in range(n)]),
            tensor("INPUT1", shape, [1.0] * n)]


def assert_error(resp, status, *fragments):
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text}"
    text = error_text(resp)
    assert text, "the error names the problem"
    for f in fragments:
        assert f in text, f"{f!r} not in {text!r}"
    return text


def assert_still_serves(server):
    assert server.alive(), server.log_tail()
    r = server.post(ADD_SUB, {"inputs": good_inputs()})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"][:3] == [1.0, 2.0, 3.0]


def test_unknown_model(server):
    r = server.post("/v2/models/nope/infer", {"inputs": good_inputs()})
    assert_error(r, 404, "Request for unknown model: 'nope' is not found")


def test_unknown_version(server):
    r = server.post("/v2/models/add_sub/versions/7/infer", {"inputs": good_inputs()})
    assert_error(r, 404, "Request for unknown model: 'add_sub' version 7 is not found")


@pytest.mark.parametrize("body, fragment", [
    ('{"inputs": [', "failed to parse the request JSON buffer"),
    ("[1,2]", "inputs"),
    ('{"id": "x"}', "Unable to parse 'inputs'"),
    ('{"inputs": {}}', "Unable to parse 'inputs'"),
    ("\xff\xfe not json", "failed to parse the request JSON buffer"),
], ids=["truncated", "array", "no-inputs", "inputs-object", "garbage"])
def test_malformed_json_is_400(server, body, fragment):
    r = server.post(ADD_SUB, body.encode("latin-1"), headers={"Content-Type": "application/json"})
    assert_error(r, 400, fragment)


def test_empty_inputs(server):
    r = server.post(ADD_SUB, {"inputs": []})
    assert_error(r, 400, "expected 2 inputs but got 0 inputs for model 'add_sub'")


def test_missing_input(server):
    r = server.post(ADD_SUB, {"inputs": good_inputs()[:1]})
    assert_error(r, 400, "expected 2 inputs but got 1 inputs for model 'add_sub'",
                 "missing required input(s) ['INPUT1']")
    with pytest.raises(InferenceServerException, match="INPUT1"):
        x = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        x.set_data_from_numpy(np.zeros((1, 16), np.float32))
        server.client.infer("add_sub", [x])


def test_unknown_input_name(server):
    ins = good_inputs()
    ins[1]["name"] = "INPUTX"
    assert_error(server.post(ADD_SUB, {"inputs": ins}), 400,
                 "unexpected inference input 'INPUTX' for model 'add_sub'")


def test_duplicate_input(server):
    r = server.post(ADD_SUB, {"inputs": good_inputs() + good_inputs()[:1]})
    assert_error(r, 400, "input 'INPUT0' already exists in request")


def test_wrong_datatype(server):
    ins = good_inputs()
    ins[0] = tensor("INPUT0", [1, 16], list(range(16)), "INT32")
    assert_error(server.post(ADD_SUB, {"inputs": ins}), 400,
                 "inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'")


def test_invalid_datatype_name(server):
    ins = good_inputs()
    ins[0]["datatype"] = "FLOAT99"
    assert_error(server.post(ADD_SUB, {"inputs": ins}), 400, "datatype", "INPUT0")


def test_wrong_shape(server):
    r = server.post(ADD_SUB, {"inputs": good_inputs((1, 15))})
    assert_error(r, 400, "unexpected shape for input", "for model 'add_sub'",
                 "Expected [-1,16], got [1,15]")


@pytest.mark.parametrize("count", [15, 17, 0])
def test_wrong_element_count_in_json_data(server, count):
    ins = good_inputs()
    ins[0]["data"] = [1.0] * count
    assert_error(server.post(ADD_SUB, {"inputs": ins}), 400, "'data'")


def test_data_of_wrong_json_type(server):
    ins = good_inputs()
    ins[0]["data"] = ["a"] * 16
    assert_error(server.post(ADD_SUB, {"inputs": ins}), 400, "Unable to parse 'data'")


@pytest.mark.parametrize("field", ["shape", "datatype"])
def test_input_missing_a_field(server, field):
    ins = good_inputs()
    del ins[0][field]
    assert_error(server.post(ADD_SUB, {"inputs": ins}), 400, f"Unable to parse '{field}'")


def test_input_without_data(server):
    ins = good_inputs()
    del ins[0]["data"]
    assert_error(server.post(ADD_SUB, {"inputs": ins}), 400,
                 "Input must set only one of the following fields")


def test_negative_shape(server):
    body = {"inputs": [tensor("INPUT0", [-2], [])]}
    r = server.post("/v2/models/identity_fp32/infer", body)
    # Triton's text (its tail is RapidJSON's wording), with 400 where Triton answers 500.
    assert_error(r, 400, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer")


def test_unknown_requested_output(server):
    r = server.post(ADD_SUB, {"inputs": good_inputs(), "outputs": [{"name": "OUTPUTX"}]})
    assert_error(r, 400, "unexpected inference output 'OUTPUTX' for model 'add_sub'")


def test_batch_larger_than_max_batch_size(server):
    r = server.post(ADD_SUB, {"inputs": good_inputs((9, 16))})
    assert_error(r, 400, "inference request batch-size must be <= 8 for 'add_sub'")


def test_missing_batch_dimension(server):
    r = server.post(ADD_SUB, {"inputs": good_inputs((16,))})
    # Triton reads the 16 as the batch size.
    assert_error(r, 400, "inference request batch-size must be <= 8 for 'add_sub'")


@pytest.mark.parametrize("shape", [[2**62, 2**62], [2**62], [2**63 - 1], [2**64], [2**31, 2**31, 2**31]],
                         ids=["2^62x2^62", "2^62", "2^63-1", "2^64", "2^31^3"])
def test_absurd_shapes_are_rejected_without_allocating(server, shape):
    model = server.client.get_model_metadata("identity_fp32")["inputs"][0]["name"]
    r = server.post("/v2/models/identity_fp32/infer", {"inputs": [tensor(model, shape, [1.0])]})
    assert r.status_code == 400, r.text
    assert_still_serves(server)


def binary_add_sub(sizes=(64, 64), blobs=None, extra_header=None):
    a = np.arange(16, dtype=np.float32).tobytes()
    hdr = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": sizes[0]}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": sizes[1]}}]}
    hdr.update(extra_header or {})
    return binary_request(hdr, blobs if blobs is not None else [a, a])


def test_binary_header_length_larger_than_body(server):
    body, h = binary_add_sub()
    h["Inference-Header-Content-Length"] = str(len(body) + 10)
    assert_error(server.post(ADD_SUB, body, headers=h), 400,
                 f"inference header size should be in range (0, {len(body)}), got: {len(body) + 10}")


def test_binary_header_length_negative(server):
    body, h = binary_add_sub()
    h["Inference-Header-Content-Length"] = "-5"
    assert_error(server.post(ADD_SUB, body, headers=h), 400, "inference header size")


def test_binary_body_shorter_than_sizes(server):
    a = np.arange(16, dtype=np.float32).tobytes()
    body, h = binary_add_sub(blobs=[a, a[:60]])
    assert_error(server.post(ADD_SUB, body, headers=h), 400,
                 "unexpected size for input 'INPUT1', expecting 4 additional bytes for model 'add_sub'")


def test_binary_body_longer_than_sizes(server):
    a = np.arange(16, dtype=np.float32).tobytes()
    body, h = binary_add_sub(blobs=[a, a, b"extra"])
    assert_error(server.post(ADD_SUB, body, headers=h), 400,
                 "unexpected additional input data for model 'add_sub'")


def test_binary_size_disagreeing_with_shape(server):
    body, h = binary_add_sub(sizes=(60, 68))
    assert_error(server.post(ADD_SUB, body, headers=h), 400,
                 "input byte size mismatch for input", "for model 'add_sub'")


def test_binary_size_overrunning_the_body(server):
    body, h = binary_add_sub(sizes=(2**62, 64))
    assert_error(server.post(ADD_SUB, body, headers=h), 400, "unexpected size for input 'INPUT0'")
    body, h = binary_add_sub(sizes=(2**64 - 1, 64))
    assert server.post(ADD_SUB, body, headers=h).status_code == 400
    assert_still_serves(server)


def test_binary_size_negative(server):
    body, h = binary_add_sub(sizes=(-1, 64))
    assert_error(server.post(ADD_SUB, body, headers=h), 400, "binary_data_size")


def test_both_data_and_binary(server):
    a = np.arange(16, dtype=np.float32)
    hdr = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.tolist(),
         "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}]}
    body, h = binary_request(hdr, [a.tobytes(), a.tobytes()])
    assert_error(server.post(ADD_SUB, body, headers=h), 400,
                 "Input must set only one of the following fields", "'data' 'binary_data_size'")


def test_binary_sizes_without_the_header_length(server):
    body, h = binary_add_sub()
    del h["Inference-Header-Content-Length"]
    assert server.post(ADD_SUB, body, headers=h).status_code == 400


def test_bad_classification_count(server):
    r = server.post(ADD_SUB, {"inputs": good_inputs(),
                              "outputs": [{"name": "OUTPUT0", "parameters": {"classification": "two"}}]})
    assert_error(r, 400, "'classification'")


def test_server_still_serves_after_all_bad_requests(server):
    assert_still_serves(server)
    assert server.client.is_server_ready()


def test_body_over_http_max_input_size(start_server):
    srv = start_server(args=["--http-max-input-size", str(1 << 20)])
    n = (2 << 20) // 4
    hdr = {"inputs": [{"name": srv.client.get_model_metadata("identity_fp32")["inputs"][0]["name"],
                       "shape": [n], "datatype": "FP32", "parameters": {"binary_data_size": n * 4}}]}
    body, h = binary_request(hdr, [bytes(n * 4)])
    r = srv.post("/v2/models/identity_fp32/infer", body, headers=h)
    assert_error(r, 400, "exceeds the maximum allowed value")
    small = json.dumps({"inputs": good_inputs()})
    r = srv.post(ADD_SUB, small[:-1] + " " * (2 << 20) + "}")
    assert_error(r, 400, "exceeds the maximum allowed value")
    assert_still_serves(srv)


def test_bad_bodies_harm_no_concurrent_client(start_server, repo_copy):
    """Four threads keep sending good add_sub requests (checked against numpy) while one sends
    every kind of bad body, over and over: each bad one gets its 4xx, not one good one fails, and
    the server serves afterwards."""
    limit = 1 << 20
    srv = start_server(repo_copy(["add_sub", "identity_fp32"]), args=["--http-max-input-size", str(limit)])
    stop, failures, good = threading.Event(), [], [0] * 4

    def good_traffic(i):
        client = httpclient.InferenceServerClient(srv.http_url, network_timeout=60.0)
        rng = np.random.default_rng(i)
        try:
            while not stop.is_set():
                a = rng.standard_normal((1, 16)).astype(np.float32)
                ins = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
                ins[0].set_data_from_numpy(a, binary_data=bool(i % 2))
                ins[1].set_data_from_numpy(a, binary_data=False)
                try:
                    res = client.infer("add_sub", ins)
                    np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + a, rtol=1e-6)
                    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), np.zeros_like(a))
                    good[i] += 1
                except Exception as e:  # pragma: no cover - the failure case
                    failures.append(f"{type(e).__name__}: {e}")
        finally:
            client.close()

    big = (2 * limit) // 4
    over_binary = binary_request({"inputs": [{"name": "INPUT0", "shape": [big], "datatype": "FP32",
                                              "parameters": {"binary_data_size": big * 4}}]}, [bytes(big * 4)])
    small = json.dumps({"inputs": good_inputs()})
    bad = [  # (path, body, headers, fragment of the error)
        (ADD_SUB, b'{"inputs": [', None, "failed to parse the request JSON buffer"),
        (ADD_SUB, b"\xff\xfe not json", None, "failed to parse the request JSON buffer"),
        (ADD_SUB, b'{"inputs": {}}', None, "Unable to parse 'inputs'"),
        ("/v2/models/identity_fp32/infer", json.dumps({"inputs": [tensor("INPUT0", [2**62, 2**62], [1.0])]}), None, "INPUT0"),
        ("/v2/models/identity_fp32/infer", json.dumps({"inputs": [tensor("INPUT0", [1, 2**62], [1.0])]}), None, "INPUT0"),
        ("/v2/models/identity_fp32/infer", json.dumps({"inputs": [tensor("INPUT0", [2**64], [1.0])]}), None, "'shape'"),
        (ADD_SUB, *binary_add_sub(sizes=(2**62, 64)), "unexpected size for input 'INPUT0'"),
        (ADD_SUB, *binary_add_sub(sizes=(2**64 - 1, 64)), "INPUT0"),
        (ADD_SUB, *binary_add_sub(sizes=(64, 60)), "unexpected additional input data"),
        (ADD_SUB, *binary_add_sub(blobs=[bytes(64), bytes(60)]), "expecting 4 additional bytes"),
        ("/v2/models/identity_fp32/infer", *over_binary, "exceeds the maximum allowed value"),
        (ADD_SUB, small[:-1] + " " * (2 * limit) + "}", None, "exceeds the maximum allowed value"),
    ]
    threads = [threading.Thread(target=good_traffic, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: all(good), what="good traffic on all four threads")
        for _ in range(3):
            for path, body, headers, fragment in bad:
                r = srv.post(path, body, headers=headers)
                assert_error(r, 400, fragment)
        before = sum(good)
        wait_until(lambda: sum(good) > before + 4, what="good traffic to keep flowing")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not failures, f"{len(failures)} good requests failed, e.g. {failures[:3]}\n{srv.log_tail()}"
    assert sum(good) > 20
    assert_still_serves(srv)
    assert srv.client.is_server_ready() and srv.client.is_model_ready("add_sub")
