"""What the Flask and FastAPI baselines share: one ONNX Runtime session of a model with a leading
batch dimension, and the KServe v2 JSON that perf_analyzer speaks (metadata, config, infer).

Environment: BASELINE_MODEL (the .onnx file, default the bundled mlp), BASELINE_MODEL_NAME
(default mlp), BASELINE_MAX_BATCH (default 64), BASELINE_INTRA_THREADS (ONNX Runtime intra-op
threads per worker process; 0 = ONNX Runtime's default).
"""
import json
import os

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_FILE = os.environ.get("BASELINE_MODEL", os.path.join(HERE, "../../model_repository/mlp/1/model.onnx"))
NAME = os.environ.get("BASELINE_MODEL_NAME", "mlp")
MAX_BATCH = int(os.environ.get("BASELINE_MAX_BATCH", "64"))
INTRA = int(os.environ.get("BASELINE_INTRA_THREADS", "0"))

_TYPES = {"tensor(float)": ("FP32", np.float32), "tensor(int64)": ("INT64", np.int64),
          "tensor(int32)": ("INT32", np.int32), "tensor(double)": ("FP64", np.float64)}
_NP = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32}
_DT = {np.dtype(v): k for k, v in _NP.items()}


def _session():
    so = ort.SessionOptions()
    if INTRA > 0:
        so.intra_op_num_threads = INTRA
    so.inter_op_num_threads = 1
    return ort.InferenceSession(MODEL_FILE, so, providers=["CPUExecutionProvider"])


SESSION = _session()


def _io(args):
    return [{"name": a.name, "datatype": _TYPES[a.type][0], "shape": [-1] + list(a.shape[1:])} for a in args]


INPUTS = _io(SESSION.get_inputs())
OUTPUTS = _io(SESSION.get_outputs())
OUTPUT_NAMES = [o["name"] for o in OUTPUTS]

SERVER = {"name": "baseline", "version": "1", "extensions": ["model_configuration", "statistics"]}
METADATA = {"name": NAME, "versions": ["1"], "platform": "onnxruntime_onnx", "inputs": INPUTS, "outputs": OUTPUTS}
CONFIG = {
    "name": NAME, "platform": "onnxruntime_onnx", "backend": "onnxruntime", "max_batch_size": MAX_BATCH,
    "input": [{"name": i["name"], "data_type": "TYPE_" + i["datatype"], "dims": i["shape"][1:]} for i in INPUTS],
    "output": [{"name": o["name"], "data_type": "TYPE_" + o["datatype"], "dims": o["shape"][1:]} for o in OUTPUTS],
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
}


class BadRequest(Exception):
    pass


def json_part(body, header_length):
    """The JSON of a request; perf_analyzer sends Inference-Header-Content-Length even for
    all-JSON requests (then equal to the body's length). Binary tensor data is refused."""
    if header_length is None:
        return body
    n = int(header_length)
    if n < len(body):
        raise BadRequest("binary tensor data is not supported")
    return body[:n]


def infer(body):
    """A KServe v2 JSON infer request (bytes or parsed) -> the JSON response dict."""
    req = json.loads(body) if isinstance(body, (bytes, str)) else body
    feeds = {}
    for t in req.get("inputs", []):
        if "data" not in t:
            raise BadRequest(f"input '{t.get('name')}': only JSON tensor data is supported")
        dtype = _NP.get(t.get("datatype"))
        if dtype is None:
            raise BadRequest(f"input '{t.get('name')}': unsupported datatype {t.get('datatype')}")
        feeds[t["name"]] = np.asarray(t["data"], dtype=dtype).reshape(t["shape"])
    wanted = [o["name"] for o in req.get("outputs", [])] or OUTPUT_NAMES
    results = SESSION.run(wanted, feeds)
    out = {"model_name": NAME, "model_version": "1", "outputs": []}
    if "id" in req:
        out["id"] = req["id"]
    for name, value in zip(wanted, results):
        out["outputs"].append({"name": name, "datatype": _DT[value.dtype], "shape": list(value.shape),
                               "data": value.ravel().tolist()})
    return out


def stats():
    """perf_analyzer asks for the statistics extension each window; a baseline has none, so
    the counters stay zero (perf_analyzer then reports no server-side breakdown)."""
    z = {"count": 0, "ns": 0}
    return {"model_stats": [{"name": NAME, "version": "1", "last_inference": 0, "inference_count": 0,
                             "execution_count": 0, "inference_stats": {k: z for k in (
                                 "success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
                                 "cache_hit", "cache_miss")}, "batch_stats": []}]}
