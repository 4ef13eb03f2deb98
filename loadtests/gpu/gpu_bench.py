#!/usr/bin/env python3
"""GPU checks and figures of Tritium's PyTorch backend on a MiniLM-L6-shaped encoder (6 layers,
hidden 384, 12 heads, seq 128, FP16 weights, mean-pooled FP32 output), made here with this
machine's torch and transformers (random weights, fixed seed) and traced to TorchScript.

Run by loadtests/gpu/run.sh (which sets LD_LIBRARY_PATH to this machine's libtorch). Stdlib,
numpy, torch, transformers and grpcio only, plus what loadtests/gpu/.carry brings. Every step
records its outcome; a failing step does not stop the others. Writes OUT/RESULTS.md and
OUT/results.json.

Checks: KIND_GPU answers equal the in-process outputs over HTTP and gRPC; graphs on and off
give the same outputs; two instances' executions overlap in time (the sum of their streams'
busy time exceeds the wall time). Figures, all in this run: (1) in-process ceiling
(torch_ceiling, graphs, at the mean batch size Tritium's batcher formed in (2)); (2) Tritium gRPC
c64 with dynamic batching and graphs; (3) gRPC c1 p50 against the in-process graph time at batch
1 plus torch_add_sub's gRPC c1 p50; (4) c16 with batching on vs off; (5) c64 graphs off; (6) c64
with 2 instances vs 1.
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CARRY = os.path.join(HERE, ".carry")
sys.path.insert(0, os.path.join(CARRY, "py"))

SEQ, HIDDEN, MAX_BATCH = 128, 384, 64
HTTP, GRPC, METRICS = 18000, 18001, 18002
R = {"checks": {}, "figures": {}, "errors": [], "notes": []}
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


BUDGET_S = float(os.environ.get("GPU_BENCH_BUDGET_S", "290"))


def step(name, fn, *args):
    if time.time() - T0 > BUDGET_S:
        R["errors"].append(f"{name}: skipped, the run's {BUDGET_S:.0f} s budget is spent")
        return None
    log(f"step {name}")
    try:
        return fn(*args)
    except Exception as e:  # every step's failure is recorded; the others still run
        R["errors"].append(f"{name}: {type(e).__name__}: {e}")
        log(f"step {name} FAILED: {e}\n{traceback.format_exc()}")
        return None


def example(batch, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(batch, SEQ), dtype=np.int64)
    lengths = rng.integers(16, SEQ + 1, size=batch)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
    return ids, mask


def make_encoder(out_dir):
    import torch
    from transformers import BertConfig, BertModel

    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)).float()

    traced, used = None, None
    for attn in ("sdpa", "eager"):
        try:
            cfg = BertConfig(vocab_size=30522, hidden_size=HIDDEN, num_hidden_layers=6, num_attention_heads=12,
                             intermediate_size=1536, max_position_embeddings=512, torchscript=True)
            try:
                cfg._attn_implementation = attn
            except Exception:
                pass
            torch.manual_seed(0)
            enc = Encoder(BertModel(cfg, add_pooling_layer=False)).eval().half().cuda()
            ids, mask = (torch.from_numpy(a).cuda() for a in example(4, seed=1))
            with torch.no_grad():
                t = torch.jit.trace(enc, (ids, mask), check_trace=False)
                ids8, mask8 = (torch.from_numpy(a).cuda() for a in example(8, seed=2))
                diff = (t(ids8, mask8) - enc(ids8, mask8)).abs().max().item()
            if diff > 1e-2:
                raise RuntimeError(f"traced module differs from eager by {diff}")
            traced, used = t, attn
            break
        except Exception as e:
            R["notes"].append(f"tracing with attention '{attn}' failed: {e}")
    if traced is None:
        raise RuntimeError("could not trace the encoder")
    path = os.path.join(out_dir, "model.pt")
    traced.save(path)
    ids, mask = example(4, seed=3)
    with torch.no_grad():
        ref = torch.jit.load(path, map_location="cuda")(torch.from_numpy(ids).cuda(), torch.from_numpy(mask).cuda())
    R["notes"].append(f"encoder traced with attention '{used}', torch {torch.__version__}")
    return path, (ids, mask, ref.cpu().numpy())


def config(name, count=1, graphs=True, batching=True):
    text = f'''name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: {MAX_BATCH}
input [ {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {SEQ} ] }},
        {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {SEQ} ] }} ]
output [ {{ name: "embedding" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }} ]
instance_group [ {{ kind: KIND_GPU count: {count} gpus: [ 0 ] }} ]
'''
    if batching:
        text += "dynamic_batching { }\n"
    if graphs:
        text += "optimization { cuda { graphs: true } }\n"
    return text


MODELS = {
    "enc": dict(count=1, graphs=True, batching=True),
    "enc_eager": dict(count=1, graphs=False, batching=True),
    "enc_2inst": dict(count=2, graphs=True, batching=True),
    "enc_single": dict(count=1, graphs=True, batching=False),
}


def make_repo(repo, model_pt):
    for name, kw in MODELS.items():
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(model_pt, os.path.join(repo, name, "1", "model.pt"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config(name, **kw))
    shutil.copytree(os.path.join(CARRY, "models", "torch_add_sub"), os.path.join(repo, "torch_add_sub"))


def get(path, port=HTTP):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read()


def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{HTTP}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        data = r.read()
        return json.loads(data) if data.strip() else {}


def start_server(repo, out):
    log_file = open(os.path.join(out, "server.log"), "w")
    proc = subprocess.Popen([os.path.join(CARRY, "bin", "tritium"), "--model-repository", repo,
                             "--http-port", str(HTTP), "--grpc-port", str(GRPC), "--metrics-port", str(METRICS)],
                            stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode} (see server.log)")
        try:
            get("/v2/health/ready")
            return proc
        except Exception:
            time.sleep(0.5)
    raise RuntimeError("server not ready in 120 s")


def http_infer(model, ids, mask):
    body = {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": list(ids.shape), "data": ids.ravel().tolist()},
                       {"name": "attention_mask", "datatype": "INT64", "shape": list(mask.shape),
                        "data": mask.ravel().tolist()}]}
    out = post(f"/v2/models/{model}/infer", body)["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def grpc_infer(model, ids, mask):
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pbg
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{GRPC}"))
    req = pb.ModelInferRequest(model_name=model)
    for name, arr in (("input_ids", ids), ("attention_mask", mask)):
        t = req.inputs.add()
        t.name, t.datatype = name, "INT64"
        t.shape.extend(arr.shape)
        req.raw_input_contents.append(arr.astype("<i8").tobytes())
    resp = stub.ModelInfer(req, timeout=60)
    return np.frombuffer(resp.raw_output_contents[0], "<f4").reshape(tuple(resp.outputs[0].shape))


def compare(got, want):
    diff = float(np.abs(got - want).max())
    cos = float(np.min(np.sum(got * want, 1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))))
    return {"max_abs_diff": diff, "min_cosine": cos, "ok": bool(diff < 2e-2 and cos > 0.9999)}


def checks(ref):
    ids, mask, want = ref
    for model in ("enc", "enc_eager", "enc_2inst", "enc_single"):
        for proto, fn in (("http", http_infer), ("grpc", grpc_infer)):
            got = fn(model, ids, mask)
            R["checks"][f"{model} {proto} equals in-process"] = compare(got, want)
    a, b = http_infer("enc", ids, mask), http_infer("enc_eager", ids, mask)
    R["checks"]["graphs on vs off (enc vs enc_eager, http)"] = compare(a, b)


def cuda_shm(ref):
    """A CUDA shared-memory round trip as tritonclient.utils.cuda_shared_memory makes one: GPU
    memory allocated here with the CUDA runtime, its IPC handle registered over HTTP, inputs read
    from it and outputs written to it by the server, over HTTP and gRPC."""
    import base64
    import ctypes
    rt = ctypes.CDLL("libcudart.so.13")

    def ok(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: CUDA error {rc}")

    ids, mask, want = ref
    host = np.concatenate([ids.ravel(), mask.ravel()]).astype("<i8")
    n_in, n_out = host.nbytes, want.astype(np.float32).nbytes
    p_in, p_out = ctypes.c_void_p(), ctypes.c_void_p()
    ok(rt.cudaMalloc(ctypes.byref(p_in), ctypes.c_size_t(n_in)), "cudaMalloc")
    ok(rt.cudaMalloc(ctypes.byref(p_out), ctypes.c_size_t(n_out)), "cudaMalloc")
    ok(rt.cudaMemcpy(p_in, host.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(n_in), 1), "cudaMemcpy")

    def handle(ptr):
        h = (ctypes.c_char * 64)()
        ok(rt.cudaIpcGetMemHandle(ctypes.byref(h), ptr), "cudaIpcGetMemHandle")
        return base64.b64encode(bytes(h)).decode()

    for name, ptr, size in (("in", p_in, n_in), ("out", p_out, n_out)):
        post(f"/v2/cudasharedmemory/region/{name}/register",
             {"raw_handle": {"b64": handle(ptr)}, "device_id": 0, "byte_size": size})
    status = json.loads(get("/v2/cudasharedmemory/status"))
    half = ids.nbytes

    def read_out():
        out = np.zeros(want.shape, dtype=np.float32)
        ok(rt.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), p_out, ctypes.c_size_t(n_out), 2), "cudaMemcpy")
        ok(rt.cudaMemset(p_out, 0, ctypes.c_size_t(n_out)), "cudaMemset")
        return out

    shm = lambda region, offset, size: {"shared_memory_region": region, "shared_memory_offset": offset,  # noqa: E731
                                        "shared_memory_byte_size": size}
    body = {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": list(ids.shape), "parameters": shm("in", 0, half)},
                       {"name": "attention_mask", "datatype": "INT64", "shape": list(mask.shape),
                        "parameters": shm("in", half, half)}],
            "outputs": [{"name": "embedding", "parameters": shm("out", 0, n_out)}]}
    ok(rt.cudaMemset(p_out, 0, ctypes.c_size_t(n_out)), "cudaMemset")
    post("/v2/models/enc/infer", body)
    R["checks"]["CUDA shared memory round trip (http)"] = compare(read_out(), want)

    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pbg
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{GRPC}"))
    req = pb.ModelInferRequest(model_name="enc")
    for name, arr, offset in (("input_ids", ids, 0), ("attention_mask", mask, half)):
        t = req.inputs.add()
        t.name, t.datatype = name, "INT64"
        t.shape.extend(arr.shape)
        t.parameters["shared_memory_region"].string_param = "in"
        t.parameters["shared_memory_offset"].int64_param = offset
        t.parameters["shared_memory_byte_size"].int64_param = half
    o = req.outputs.add()
    o.name = "embedding"
    o.parameters["shared_memory_region"].string_param = "out"
    o.parameters["shared_memory_byte_size"].int64_param = n_out
    stub.ModelInfer(req, timeout=60)
    check = compare(read_out(), want)
    check["status_listed"] = sorted(r["name"] for r in status)
    check["ok"] = check["ok"] and check["status_listed"] == ["in", "out"]
    R["checks"]["CUDA shared memory round trip (grpc)"] = check
    post("/v2/cudasharedmemory/unregister", {})
    rt.cudaFree(p_in)
    rt.cudaFree(p_out)


def stats(model):
    s = json.loads(get(f"/v2/models/{model}/stats"))["model_stats"][0]
    return int(s["inference_count"]), int(s["execution_count"])


def busy(model):
    text = get("/metrics", port=METRICS).decode()
    out = {}
    for m in re.finditer(r'^tritium_instance_gpu_busy_us_total\{([^}]*)\} (\S+)', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("model") == model:
            out[labels.get("instance")] = float(m.group(2))
    return out


def pa(model, concurrency, out, data_file, interval_ms=3000):
    csv_path = os.path.join(out, f"pa_{model}_c{concurrency}.csv")
    cmd = [os.path.join(CARRY, "pa", "perf_analyzer"), "-m", model, "-u", f"127.0.0.1:{GRPC}", "-i", "grpc",
           "-b", "1", "--concurrency-range", str(concurrency), "-p", str(interval_ms), "-s", "100",
           "--max-trials", "4", "-f", csv_path]
    if data_file:
        cmd += ["--input-data", data_file]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(CARRY, "pa", "lib") + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    before = stats(model)
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=45, env=env)
    wall = time.time() - t0
    with open(os.path.join(out, "perf_analyzer.log"), "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout.decode(errors="replace") + f"\n[rc {p.returncode}]\n\n")
    if p.returncode != 0:
        raise RuntimeError(f"perf_analyzer {model} c{concurrency} exited {p.returncode}")
    after = stats(model)
    with open(csv_path) as f:
        row = next(csv.DictReader(f))
    inferences, executions = after[0] - before[0], after[1] - before[1]
    r = {"infer_per_s": float(row["Inferences/Second"]), "p50_us": int(row["p50 latency"]),
         "p99_us": int(row["p99 latency"]), "mean_batch": inferences / max(executions, 1), "wall_s": wall}
    log(f"  {model} c{concurrency}: {r}")
    return r


def pa_window(model, concurrency, out, data_file, seconds=8.0, warmup=3.0):
    """Throughput at a concurrency where perf_analyzer's own stability rule may never be met (c64
    against a batching model): perf_analyzer drives the load, and the figure comes from the
    server's statistics over a fixed window after a warm-up (inferences / seconds, and the mean
    batch size executions had). No latency figures."""
    cmd = [os.path.join(CARRY, "pa", "perf_analyzer"), "-m", model, "-u", f"127.0.0.1:{GRPC}", "-i", "grpc",
           "-b", "1", "--concurrency-range", str(concurrency), "-p", "60000", "--max-trials", "1"]
    cmd += ["--input-data", data_file] if data_file else []
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(CARRY, "pa", "lib") + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    with open(os.path.join(out, "perf_analyzer.log"), "a") as log_file:
        log_file.write("$ " + " ".join(cmd) + f"  (window {seconds} s after {warmup} s, from server statistics)\n")
        p = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        try:
            time.sleep(warmup)
            if p.poll() is not None:
                raise RuntimeError(f"perf_analyzer {model} c{concurrency} exited {p.returncode} during warm-up")
            (i0, e0), t0 = stats(model), time.time()
            time.sleep(seconds)
            (i1, e1), t1 = stats(model), time.time()
        finally:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    r = {"infer_per_s": (i1 - i0) / (t1 - t0), "mean_batch": (i1 - i0) / max(e1 - e0, 1), "window_s": t1 - t0,
         "source": "server statistics"}
    log(f"  {model} c{concurrency}: {r}")
    return r


def ceiling(model_pt, batches, graphs, seconds=4):
    # With graphs, every batch size up to 64 is captured first, as the server does at load.
    cmd = [os.path.join(CARRY, "bin", "torch_ceiling"), "--model", model_pt, "--dims", str(SEQ), "--inputs", "2",
           "--kind", "i64", "--device", "cuda", "--batch", ",".join(map(str, batches)), "--seconds", str(seconds),
           "--repeats", "1"] + (["--graphs", "--capture-upto", str(MAX_BATCH)] if graphs else [])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"torch_ceiling exited {p.returncode}: {p.stderr.decode()[-500:]}")
    rows = [json.loads(line) for line in p.stdout.decode().splitlines() if line.startswith("{")]
    log(f"  ceiling graphs={graphs}: {rows}")
    return {r["batch"]: r for r in rows}


def figures(out, model_pt, data_file):
    F = R["figures"]
    F["add_sub_c1"] = step("pa torch_add_sub c1", pa, "torch_add_sub", 1, out, None)
    F["enc_c1"] = step("pa enc c1", pa, "enc", 1, out, data_file)
    F["enc_c64"] = step("load enc c64", pa_window, "enc", 64, out, data_file)
    F["enc_eager_c64"] = step("load enc_eager c64", pa_window, "enc_eager", 64, out, data_file)
    b0, t0 = busy("enc_2inst"), time.time()
    F["enc_2inst_c64"] = step("load enc_2inst c64", pa_window, "enc_2inst", 64, out, data_file)
    b1, wall = busy("enc_2inst"), time.time() - t0
    deltas = {k: b1.get(k, 0) - b0.get(k, 0) for k in b1}
    R["checks"]["two instances overlap"] = {
        "busy_s_per_instance": {k: v / 1e6 for k, v in deltas.items()}, "wall_s": wall,
        "sum_busy_over_wall": sum(deltas.values()) / 1e6 / wall if wall else 0,
        "ok": len(deltas) == 2 and sum(deltas.values()) / 1e6 > 1.05 * wall}
    text = get("/metrics", port=METRICS).decode()
    families = sorted({m.group(1) for m in re.finditer(r"^(nv_gpu_\w+|nv_energy_consumption)\{", text, re.M)})
    R["checks"]["nv_gpu_* metrics read the GPU (NVML)"] = {
        "families": families, "ok": "nv_gpu_utilization" in families and "nv_gpu_memory_used_bytes" in families}
    F["enc_c16"] = step("pa enc c16", pa, "enc", 16, out, data_file)
    F["enc_single_c16"] = step("pa enc_single c16", pa, "enc_single", 16, out, data_file)


def ceilings(model_pt):
    F = R["figures"]
    mean = (F.get("enc_c64") or {}).get("mean_batch")
    mean_eager = (F.get("enc_eager_c64") or {}).get("mean_batch")
    batches = sorted({1} | ({max(1, min(MAX_BATCH, round(mean)))} if mean else set()))
    # The batcher's batches vary around the mean; the ceiling is taken at the mean's size.
    F["ceiling_graphs"] = step("ceiling graphs", ceiling, model_pt, batches, True)
    if mean_eager:
        F["ceiling_eager"] = step("ceiling eager", ceiling, model_pt, [max(1, min(MAX_BATCH, round(mean_eager)))], False)


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def report(out):
    F, lines = R["figures"], []
    g = lambda k, f: (F.get(k) or {}).get(f)  # noqa: E731
    cg = F.get("ceiling_graphs") or {}
    mean = g("enc_c64", "mean_batch")
    cb = cg.get(max(1, min(MAX_BATCH, round(mean)))) if mean else None
    c1 = cg.get(1)
    summary = {}
    if cb:
        summary["(1)/(2) c64 graphs vs in-process ceiling at the batcher's mean batch"] = {
            "tritium_infer_per_s": g("enc_c64", "infer_per_s"), "mean_batch": mean,
            "ceiling_items_per_s": cb["items_per_s"], "ratio": ratio(g("enc_c64", "infer_per_s"), cb["items_per_s"]),
            "target": ">= 0.9"}
    if c1 and g("add_sub_c1", "p50_us"):
        bound = c1["p50_us"] + g("add_sub_c1", "p50_us")
        summary["(3) c1 p50 vs in-process graph batch 1 + add_sub round trip"] = {
            "tritium_p50_us": g("enc_c1", "p50_us"), "in_process_b1_p50_us": c1["p50_us"],
            "add_sub_c1_p50_us": g("add_sub_c1", "p50_us"), "ratio": ratio(g("enc_c1", "p50_us"), bound),
            "target": "<= 1.2"}
    summary["(4) c16 batching on vs off"] = {"on": g("enc_c16", "infer_per_s"), "off": g("enc_single_c16", "infer_per_s"),
                                             "ratio": ratio(g("enc_c16", "infer_per_s"), g("enc_single_c16", "infer_per_s"))}
    ce = F.get("ceiling_eager") or {}
    summary["(5) c64 graphs off"] = {"infer_per_s": g("enc_eager_c64", "infer_per_s"),
                                     "mean_batch": g("enc_eager_c64", "mean_batch"),
                                     "vs_graphs_on": ratio(g("enc_eager_c64", "infer_per_s"), g("enc_c64", "infer_per_s")),
                                     "eager_ceiling": next(iter(ce.values()), {}).get("items_per_s")}
    summary["(6) c64 2 instances vs 1"] = {"two": g("enc_2inst_c64", "infer_per_s"), "one": g("enc_c64", "infer_per_s"),
                                          "ratio": ratio(g("enc_2inst_c64", "infer_per_s"), g("enc_c64", "infer_per_s"))}
    R["summary"] = summary
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(R, f, indent=1, default=str)
    gpu = open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "?"
    lines += ["# GPU run (loadtests/gpu/run.sh)", "", f"GPU: {gpu}; total {time.time() - T0:.0f} s", ""]
    lines += ["## Checks", ""] + [f"- {'PASS' if v.get('ok') else 'FAIL'} {k}: {json.dumps({x: y for x, y in v.items() if x != 'ok'})}"
                                   for k, v in R["checks"].items()]
    lines += ["", "## Figures", ""] + [f"- {k}: {json.dumps(v)}" for k, v in summary.items()]
    lines += ["", "## Runs", ""] + [f"- {k}: {json.dumps(v)}" for k, v in F.items()]
    lines += ["", "## Notes and errors", ""] + [f"- {n}" for n in R["notes"] + R["errors"]]
    with open(os.path.join(out, "RESULTS.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    work = tempfile.mkdtemp(prefix="tritium-gpu-")
    repo = os.path.join(work, "repo")
    made = step("make encoder", make_encoder, work)
    server = None
    try:
        if made:
            model_pt, ref = made
            data_file = os.path.join(work, "input.json")
            ids, mask = example(1, seed=5)
            with open(data_file, "w") as f:
                json.dump({"data": [{"input_ids": {"content": ids[0].tolist(), "shape": [SEQ]},
                                     "attention_mask": {"content": mask[0].tolist(), "shape": [SEQ]}}]}, f)
            step("make repository", make_repo, repo, model_pt)
            server = step("start server", start_server, repo, out)
            log(f"server up at {time.time() - T0:.0f} s")
            if server:
                step("checks", checks, ref)
                step("cuda shared memory", cuda_shm, ref)
                step("figures", figures, out, model_pt, data_file)
                server.terminate()
                server.wait(timeout=30)
                server = None
            step("ceilings", ceilings, model_pt)
    finally:
        if server:
            server.kill()
        report(out)


if __name__ == "__main__":
    main()
