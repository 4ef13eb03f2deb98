"""Probes a running Triton (or Tritium) with the requests docs/triton-reference.md records.

    python loadtests/triton_ref/probe.py [--http 127.0.0.1:8000] [--grpc 127.0.0.1:8001]
                                         [--metrics 127.0.0.1:8002] [--repo DIR]

The server must run in explicit mode on the model repository made by make_models.sh, with
add_sub, identity, classify and resp_params loaded. Prints, for every request, the method, path,
body, status, the headers that matter and the body, so two servers' outputs can be diffed.
"""
import argparse
import http.client
import json
import struct
import sys
import time

import numpy as np

ARGS = None


def show(title, method, path, body=None, headers=None, port_key="http", show_headers=False):
    host, port = getattr(ARGS, port_key).split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    print(f"### {title}")
    shown_body = body if body is None or len(body) < 400 else body[:400] + b"...(%d bytes)" % len(body)
    print(f"{method} {path}" + (f"  headers={headers}" if headers else "") + (f"\n  body: {shown_body!r}" if body else ""))
    print(f"-> {resp.status} {resp.reason}")
    if show_headers:
        for k, v in resp.getheaders():
            print(f"   {k}: {v}")
    else:
        ct = resp.getheader("Content-Type")
        if ct:
            print(f"   Content-Type: {ct}")
    hl = resp.getheader("Inference-Header-Content-Length")
    if hl is not None:
        n = int(hl)
        print(f"   Inference-Header-Content-Length: {hl}")
        print(f"   json: {data[:n].decode()}")
        print(f"   binary tail: {len(data) - n} bytes: {data[n:][:64].hex()}")
    else:
        text = data.decode(errors="replace")
        print("   " + (text if len(text) < 3000 else text[:3000] + "...(truncated)"))
    print()
    conn.close()
    return resp.status, data


def vec(n, start=0.0):
    return [float(start + i) for i in range(n)]


def add_sub_inputs(shape=(1, 16)):
    n = int(np.prod(shape))
    return [
        {"name": "INPUT0", "shape": list(shape), "datatype": "FP32", "data": vec(n)},
        {"name": "INPUT1", "shape": list(shape), "datatype": "FP32", "data": [1.0] * n},
    ]


def binary_body(header, blobs):
    h = json.dumps(header).encode()
    return h + b"".join(blobs), {"Inference-Header-Content-Length": str(len(h)),
                                 "Content-Type": "application/octet-stream"}


def http_probes():
    show("server metadata", "GET", "/v2")
    show("live", "GET", "/v2/health/live", show_headers=True)
    show("ready", "GET", "/v2/health/ready", show_headers=True)
    show("model metadata", "GET", "/v2/models/add_sub")
    show("model metadata, version 1", "GET", "/v2/models/add_sub/versions/1")
    show("model metadata, unknown version", "GET", "/v2/models/add_sub/versions/7")
    show("model metadata, unknown model", "GET", "/v2/models/nope")
    show("model metadata, dims [-1]", "GET", "/v2/models/identity")
    show("model ready", "GET", "/v2/models/add_sub/ready", show_headers=True)
    show("model ready, version 1", "GET", "/v2/models/add_sub/versions/1/ready")
    show("model ready, unknown version", "GET", "/v2/models/add_sub/versions/7/ready")
    show("model ready, unknown model", "GET", "/v2/models/nope/ready", show_headers=True)
    show("model ready, known but not loaded", "GET", "/v2/models/unloaded/ready")
    show("model config", "GET", "/v2/models/add_sub/config")
    show("model config, unknown model", "GET", "/v2/models/nope/config")
    show("unknown path", "GET", "/v2/nothing/here")
    show("wrong method on infer", "GET", "/v2/models/add_sub/infer")
    show("wrong method on health", "POST", "/v2/health/live")

    # Statistics after exactly 3 successful single requests and 1 failed one.
    show("stats before traffic", "GET", "/v2/models/add_sub/stats")
    for _ in range(3):
        show("infer ok (for stats)", "POST", "/v2/models/add_sub/infer", {"inputs": add_sub_inputs()})
    show("infer failing (for stats): wrong shape", "POST", "/v2/models/add_sub/infer",
         {"inputs": add_sub_inputs((1, 15))})
    show("stats after 3 ok + 1 bad", "GET", "/v2/models/add_sub/stats")
    show("stats, version 1", "GET", "/v2/models/add_sub/versions/1/stats")
    show("stats, unknown model", "GET", "/v2/models/nope/stats")
    show("stats, all models", "GET", "/v2/models/stats")

    # Repository.
    show("repository index", "POST", "/v2/repository/index")
    show("repository index, ready only", "POST", "/v2/repository/index", {"ready": True})
    show("load broken model", "POST", "/v2/repository/models/broken/load")
    show("load unknown model", "POST", "/v2/repository/models/nope/load")
    show("repository index after failed load", "POST", "/v2/repository/index")
    show("load unloaded", "POST", "/v2/repository/models/unloaded/load", show_headers=True)
    show("load already loaded", "POST", "/v2/repository/models/unloaded/load")
    show("unload", "POST", "/v2/repository/models/unloaded/unload", show_headers=True)
    show("unload again", "POST", "/v2/repository/models/unloaded/unload")
    show("unload unknown model", "POST", "/v2/repository/models/nope/unload")
    show("repository index after unload", "POST", "/v2/repository/index")
    show("model ready after unload", "GET", "/v2/models/unloaded/ready")
    show("infer after unload", "POST", "/v2/models/unloaded/infer",
         {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]})
    override = {
        "name": "unloaded", "backend": "python", "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    }
    show("load with config override", "POST", "/v2/repository/models/unloaded/load",
         {"parameters": {"config": json.dumps(override)}})
    show("config after override", "GET", "/v2/models/unloaded/config")
    show("load with invalid config override JSON", "POST", "/v2/repository/models/unloaded/load",
         {"parameters": {"config": "{not json"}})
    show("load with config override, wrong name", "POST", "/v2/repository/models/unloaded/load",
         {"parameters": {"config": json.dumps(dict(override, name="other"))}})
    show("load with malformed body", "POST", "/v2/repository/models/unloaded/load", "{oops")
    show("unload with unload_dependents", "POST", "/v2/repository/models/unloaded/unload",
         {"parameters": {"unload_dependents": True}})

    # Inference.
    show("infer ok", "POST", "/v2/models/add_sub/infer", {"inputs": add_sub_inputs()}, show_headers=True)
    show("infer ok, id echoed", "POST", "/v2/models/add_sub/infer",
         {"id": "req-42", "inputs": add_sub_inputs()})
    show("infer ok, version 1", "POST", "/v2/models/add_sub/versions/1/infer", {"inputs": add_sub_inputs()})
    show("infer ok, batch 8", "POST", "/v2/models/add_sub/infer", {"inputs": add_sub_inputs((8, 16))})
    show("infer ok, nested data", "POST", "/v2/models/identity/infer",
         {"inputs": [{"name": "INPUT0", "shape": [3], "datatype": "FP32", "data": [[1.5], [2], [3]]}]})
    show("infer ok, requested output only OUTPUT1", "POST", "/v2/models/add_sub/infer",
         {"inputs": add_sub_inputs(), "outputs": [{"name": "OUTPUT1"}]})
    show("infer ok, request parameters", "POST", "/v2/models/add_sub/infer",
         {"inputs": add_sub_inputs(), "parameters": {"custom": "x", "n": 3}})
    show("infer unknown model", "POST", "/v2/models/nope/infer", {"inputs": add_sub_inputs()})
    show("infer unknown version", "POST", "/v2/models/add_sub/versions/7/infer", {"inputs": add_sub_inputs()})
    show("infer malformed JSON", "POST", "/v2/models/add_sub/infer", '{"inputs": [')
    show("infer empty body", "POST", "/v2/models/add_sub/infer", "")
    show("infer JSON not an object", "POST", "/v2/models/add_sub/infer", "[1,2]")
    show("infer missing inputs", "POST", "/v2/models/add_sub/infer", {"id": "x"})
    show("infer inputs not an array", "POST", "/v2/models/add_sub/infer", {"inputs": {}})
    show("infer empty inputs", "POST", "/v2/models/add_sub/infer", {"inputs": []})
    ins = add_sub_inputs()
    ins[1]["name"] = "INPUTX"
    show("infer unknown input name", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs() + [{"name": "EXTRA", "shape": [1, 16], "datatype": "FP32", "data": vec(16)}]
    show("infer extra unknown input", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs()
    ins[0]["datatype"] = "INT32"
    ins[0]["data"] = list(range(16))
    show("infer wrong datatype", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs()
    ins[0]["datatype"] = "FLOAT99"
    show("infer invalid datatype name", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    show("infer wrong shape", "POST", "/v2/models/add_sub/infer", {"inputs": add_sub_inputs((1, 15))})
    show("infer wrong rank (no batch dim)", "POST", "/v2/models/add_sub/infer", {"inputs": add_sub_inputs((16,))})
    ins = add_sub_inputs()
    ins[0]["data"] = vec(15)
    show("infer wrong element count in data", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs()
    ins[0]["data"] = vec(17)
    show("infer too many elements in data", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs()
    ins[0]["data"] = ["a"] * 16
    show("infer data of wrong JSON type", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs()
    del ins[0]["data"]
    show("infer input without data", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs()
    del ins[0]["shape"]
    show("infer input without shape", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    ins = add_sub_inputs()
    del ins[0]["datatype"]
    show("infer input without datatype", "POST", "/v2/models/add_sub/infer", {"inputs": ins})
    show("infer missing input", "POST", "/v2/models/add_sub/infer", {"inputs": add_sub_inputs()[:1]})
    show("infer unknown requested output", "POST", "/v2/models/add_sub/infer",
         {"inputs": add_sub_inputs(), "outputs": [{"name": "OUTPUTX"}]})
    show("infer batch 9 > max_batch_size 8", "POST", "/v2/models/add_sub/infer",
         {"inputs": add_sub_inputs((9, 16))})
    show("infer batch 0", "POST", "/v2/models/add_sub/infer", {"inputs": add_sub_inputs((0, 16))})
    show("infer negative shape", "POST", "/v2/models/identity/infer",
         {"inputs": [{"name": "INPUT0", "shape": [-2], "datatype": "FP32", "data": []}]})
    show("infer absurd shape [2**62, 2**62]", "POST", "/v2/models/identity/infer",
         {"inputs": [{"name": "INPUT0", "shape": [2**62, 2**62], "datatype": "FP32", "data": [1.0]}]})
    show("infer duplicate input", "POST", "/v2/models/add_sub/infer",
         {"inputs": add_sub_inputs() + add_sub_inputs()[:1]})

    # Binary tensor extension.
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    hdr = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT1", "parameters": {"binary_data": False}}]}
    body, h = binary_body(hdr, [a.tobytes(), b.tobytes()])
    show("binary infer ok (OUTPUT0 binary, OUTPUT1 JSON)", "POST", "/v2/models/add_sub/infer", body, h,
         show_headers=True)
    hdr2 = dict(hdr, outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                              {"name": "OUTPUT1", "parameters": {"binary_data": True}}])
    body, h = binary_body(hdr2, [a.tobytes(), b.tobytes()])
    show("binary infer ok (both binary)", "POST", "/v2/models/add_sub/infer", body, h, show_headers=True)
    body, h = binary_body({"inputs": hdr["inputs"], "parameters": {"binary_data_output": True}},
                          [a.tobytes(), b.tobytes()])
    show("binary infer ok (binary_data_output request parameter)", "POST", "/v2/models/add_sub/infer", body, h,
         show_headers=True)
    body, h = binary_body({"inputs": hdr["inputs"]}, [a.tobytes(), b.tobytes()])
    show("binary inputs, no outputs requested", "POST", "/v2/models/add_sub/infer", body, h, show_headers=True)
    body, h = binary_body(hdr, [a.tobytes(), b.tobytes()])
    h["Inference-Header-Content-Length"] = str(len(body) + 10)
    show("binary: header length larger than body", "POST", "/v2/models/add_sub/infer", body, h)
    h["Inference-Header-Content-Length"] = "abc"
    show("binary: header length not a number", "POST", "/v2/models/add_sub/infer", body, h)
    h["Inference-Header-Content-Length"] = "-5"
    show("binary: header length negative", "POST", "/v2/models/add_sub/infer", body, h)
    body, h = binary_body(hdr, [a.tobytes(), b.tobytes()[:60]])
    show("binary: body shorter than binary_data_size sum", "POST", "/v2/models/add_sub/infer", body, h)
    body, h = binary_body(hdr, [a.tobytes(), b.tobytes(), b"extra"])
    show("binary: body longer than binary_data_size sum", "POST", "/v2/models/add_sub/infer", body, h)
    bad = json.loads(json.dumps(hdr))
    bad["inputs"][0]["parameters"]["binary_data_size"] = 60
    bad["inputs"][1]["parameters"]["binary_data_size"] = 68
    body, h = binary_body(bad, [a.tobytes(), b.tobytes()])
    show("binary: binary_data_size disagrees with shape (60/68)", "POST", "/v2/models/add_sub/infer", body, h)
    bad = json.loads(json.dumps(hdr))
    bad["inputs"][0]["data"] = a.ravel().tolist()
    body, h = binary_body(bad, [a.tobytes(), b.tobytes()])
    show("binary: both data and binary_data_size", "POST", "/v2/models/add_sub/infer", body, h)
    bad = json.loads(json.dumps(hdr))
    bad["inputs"][0]["parameters"]["binary_data_size"] = 2**62
    body, h = binary_body(bad, [a.tobytes(), b.tobytes()])
    show("binary: binary_data_size 2**62", "POST", "/v2/models/add_sub/infer", body, h)
    bad = json.loads(json.dumps(hdr))
    bad["inputs"][0]["parameters"]["binary_data_size"] = -1
    body, h = binary_body(bad, [a.tobytes(), b.tobytes()])
    show("binary: binary_data_size -1", "POST", "/v2/models/add_sub/infer", body, h)
    body, h = binary_body(hdr, [a.tobytes(), b.tobytes()])
    del h["Inference-Header-Content-Length"]
    show("binary sizes but no Inference-Header-Content-Length header", "POST", "/v2/models/add_sub/infer", body, h)
    body, h = binary_body({"inputs": add_sub_inputs()}, [])
    show("Inference-Header-Content-Length with pure JSON body", "POST", "/v2/models/add_sub/infer", body, h,
         show_headers=True)
    # BYTES over binary: 4-byte little-endian length prefix per element.

    # Classification extension.
    x = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [0.1, 0.7, 0.05, 0.9]}]}
    show("classification with labels, class_count 2", "POST", "/v2/models/classify/infer",
         dict(x, outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2}}]))
    show("classification without labels, class_count 3", "POST", "/v2/models/classify/infer",
         dict(x, outputs=[{"name": "OUTPUT1", "parameters": {"classification": 3}}]))
    show("classification class_count > elements", "POST", "/v2/models/classify/infer",
         dict(x, outputs=[{"name": "OUTPUT1", "parameters": {"classification": 9}}]))
    show("classification binary", "POST", "/v2/models/classify/infer",
         dict(x, outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2, "binary_data": True}}]),
         show_headers=True)
    show("classification on batched add_sub", "POST", "/v2/models/add_sub/infer",
         {"inputs": add_sub_inputs((2, 16)), "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}]})

    # Big body, to see whether a size limit exists.
    n = 70 * 1024 * 1024 // 4
    big = {"inputs": [{"name": "INPUT0", "shape": [n], "datatype": "FP32",
                       "parameters": {"binary_data_size": n * 4}}]}
    body, h = binary_body(big, [bytes(n * 4)])
    show("binary body of 70 MiB", "POST", "/v2/models/identity/infer", body, h)
    small = json.dumps({"inputs": [{"name": "INPUT0", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]})
    show("JSON with 70 MiB of whitespace", "POST", "/v2/models/identity/infer",
         small[:-1] + " " * (70 * 1024 * 1024) + "}")


def crash_probes():
    """Requests that crash Triton 2.51 itself (the connection drops, the server dies)."""
    show("infer absurd shape [2**62] (rank ok)", "POST", "/v2/models/identity/infer",
         {"inputs": [{"name": "INPUT0", "shape": [2**62], "datatype": "FP32", "data": [1.0]}]})
    show("infer shape [2**64] overflow", "POST", "/v2/models/identity/infer",
         {"inputs": [{"name": "INPUT0", "shape": [2**64], "datatype": "FP32", "data": [1.0]}]})


def metrics_probe():
    host, port = ARGS.metrics.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    text = resp.read().decode()
    print("### metrics")
    print(f"GET /metrics -> {resp.status}, Content-Type: {resp.getheader('Content-Type')}")
    print(text)


def grpc_probes():
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
    c = grpcclient.InferenceServerClient(ARGS.grpc)

    def attempt(title, fn):
        print(f"### grpc: {title}")
        try:
            r = fn()
            print(f"-> OK {r}")
        except InferenceServerException as e:
            print(f"-> status={e.status()!r} message={e.message()!r}")
        print()

    def inp(name, shape, dt, arr):
        i = grpcclient.InferInput(name, shape, dt)
        i.set_data_from_numpy(arr)
        return i

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    good = [inp("INPUT0", [1, 16], "FP32", a), inp("INPUT1", [1, 16], "FP32", a)]
    attempt("server live", c.is_server_live)
    attempt("model ready unknown", lambda: c.is_model_ready("nope"))
    attempt("model metadata unknown", lambda: c.get_model_metadata("nope"))
    attempt("model config unknown", lambda: c.get_model_config("nope"))
    attempt("model metadata unknown version", lambda: c.get_model_metadata("add_sub", "7"))
    attempt("infer unknown model", lambda: c.infer("nope", good))
    attempt("infer unknown version", lambda: c.infer("add_sub", good, model_version="7"))
    attempt("infer unknown input", lambda: c.infer("add_sub", [good[0], inp("INPUTX", [1, 16], "FP32", a)]))
    attempt("infer wrong datatype", lambda: c.infer(
        "add_sub", [good[0], inp("INPUT1", [1, 16], "INT32", a.astype(np.int32))]))
    attempt("infer wrong shape", lambda: c.infer(
        "add_sub", [inp("INPUT0", [1, 15], "FP32", a[:, :15]), inp("INPUT1", [1, 15], "FP32", a[:, :15])]))
    attempt("infer missing input", lambda: c.infer("add_sub", good[:1]))
    attempt("infer unknown output", lambda: c.infer(
        "add_sub", good, outputs=[grpcclient.InferRequestedOutput("OUTPUTX")]))
    big = np.zeros((9, 16), dtype=np.float32)
    attempt("infer batch 9", lambda: c.infer(
        "add_sub", [inp("INPUT0", [9, 16], "FP32", big), inp("INPUT1", [9, 16], "FP32", big)]))
    attempt("load unknown", lambda: c.load_model("nope"))
    attempt("load broken", lambda: c.load_model("broken"))
    attempt("unload unknown", lambda: c.unload_model("nope"))
    attempt("repository index", lambda: c.get_model_repository_index())
    attempt("stats unknown", lambda: c.get_inference_statistics("nope"))
    # Wrong element count in the raw bytes: set raw content shorter than the shape says.
    short = inp("INPUT1", [1, 16], "FP32", a)
    short._raw_content = a.tobytes()[:60]
    attempt("infer raw content shorter than shape", lambda: c.infer("add_sub", [good[0], short]))

    # Streaming: errors come back in the stream, not as a status.
    import queue
    q = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    c.async_stream_infer("nope", good, request_id="s1")
    c.async_stream_infer("add_sub", good[:1], request_id="s2")
    c.async_stream_infer("add_sub", good, request_id="s3")
    for _ in range(3):
        result, error = q.get(timeout=10)
        print("### grpc stream item")
        if error is not None:
            print(f"-> error status={error.status()!r} message={error.message()!r}")
        else:
            r = result.get_response()
            print(f"-> ok id={r.id!r} model={r.model_name!r} outputs={[o.name for o in r.outputs]}")
        print()
    c.stop_stream()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--http", default="127.0.0.1:8000")
    p.add_argument("--grpc", default="127.0.0.1:8001")
    p.add_argument("--metrics", default="127.0.0.1:8002")
    p.add_argument("--only", choices=["http", "grpc", "metrics", "crash"])
    ARGS = p.parse_args()
    if ARGS.only in (None, "http"):
        http_probes()
    if ARGS.only in (None, "grpc"):
        grpc_probes()
    if ARGS.only in (None, "metrics"):
        time.sleep(1)
        metrics_probe()
    if ARGS.only == "crash":
        crash_probes()


if __name__ == "__main__":
    sys.exit(main())
