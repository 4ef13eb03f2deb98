#!/usr/bin/env python3
"""Triton's Python backend under Tritium and under real Triton 2.51, and the same operation on
three backends (issue 14), each figure a ratio within one run.

Both servers run at once for the whole run (each idle while the other is measured), with the
same backend directory: a copy of libtriton_python.so from nvidia-pytriton 0.7.0 (Triton 2.51)
with its 3.11 stub, and examples/custom_backend/vecop.c built by its build.sh. The models are the
same files for both (loadtests/python_backend_models/ and tests/fixtures/python_models/add_sub):

  add_sub      Python: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [4], no batching
               (the fixture of tests/test_python_backend.py, unchanged).
  bls_add_sub  Python BLS pipeline: each request forwarded to add_sub through the server
               (pb_utils.InferenceRequest(...).exec()), its outputs returned. The target is a
               Python model because Triton from the wheel has no onnxruntime backend (its
               backends/ holds only python): an ONNX target would measure two different things.
  bls_vecop    the same model.py forwarding to vecop_c (the C backend, which both servers load).
  vecop_c      examples/custom_backend/vecop.c: OUT = scale * (A + B), scale 2, FP32 [16],
               max_batch_size 8, dynamic batching with no delay, 1 instance.
  vecop_py     the same operation, config and arithmetic as a Python model.py.
  vecop_onnx   the same as an ONNX graph (Add, Mul; made here with `onnx`), Tritium only.

Figures, perf_analyzer batch 1, c1 and c16, gRPC and HTTP (binary tensors), random data:
  Tritium ÷ Triton   for add_sub, bls_add_sub, bls_vecop, vecop_py and vecop_c: infer/s, p50
                     and p99 ratios within a repeat (target: infer/s ≥ 1.0 at p99 ≤ 1.0; same
                     backend library, so the difference is the server).
  backend ratios     vecop_c ÷ vecop_py and vecop_onnx ÷ vecop_py infer/s on Tritium (the
                     claim: a C backend 3–5× the Python one), and vecop_c ÷ vecop_py on Triton.
  CPU                per run, the server's process tree (Python stubs are its child processes),
                     the stubs alone, and perf_analyzer (its rusage), in CPU µs per inference.

Every answer is checked against Python's arithmetic before measuring. Every repeat runs every
point; within a point the two servers run back to back, their order swapped each repeat, and the
models' order rotates. Medians and min–max over repeats. Every perf_analyzer run must exit 0 with
no error line and leave the server's failure count for the model unchanged.

  .venv/bin/python loadtests/python_backend.py [--repeats 3] [--server target/release/tritium]
      [--protocols grpc,http] [--concurrency 1,16] [--interval-ms 2000] [--models add_sub,bls_add_sub]
      [--baseline <another tritium build>]   # up in the same run too: adds "this build ÷ baseline"
  .venv/bin/python loadtests/python_backend.py --summarize loadtests/out/python_backend-<time>

Needs loadtests/setup.sh (perf_analyzer), scripts/setup.sh (.pytriton: nvidia-pytriton 0.7.0),
a C compiler (cc) and a server build. Results: loadtests/out/python_backend-<time>/summary.{md,json}.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import PAError, median, spread  # noqa: E402
from targets import process_server  # noqa: E402

HERE, ROOT = common.HERE, common.ROOT
SITE = os.path.join(ROOT, ".pytriton", "venv", "lib", "python3.11", "site-packages")
PT_VENV_BIN = os.path.join(ROOT, ".pytriton", "venv", "bin")
TRITONSERVER = os.path.join(SITE, "pytriton", "tritonserver", "bin", "tritonserver")
PY_BACKEND = os.path.join(SITE, "pytriton", "tritonserver", "backends", "python")
MODELS_DIR = os.path.join(HERE, "python_backend_models")
ADD_SUB = os.path.join(ROOT, "tests", "fixtures", "python_models", "add_sub")
BUILD_SH = os.path.join(ROOT, "examples", "custom_backend", "build.sh")
STUB_COMM = "triton_python_b"  # /proc/<pid>/comm of triton_python_backend_stub (15 characters)

BOTH = ["add_sub", "bls_add_sub", "bls_vecop", "vecop_py", "vecop_c"]  # served by both servers
TRITIUM_ONLY = ["vecop_onnx"]
MODEL_CODE = {"bls_add_sub": "bls_forward.py", "bls_vecop": "bls_forward.py", "vecop_py": "vecop.py"}
SERVERS = ("tritium", "triton")


def default_server():
    release = os.path.join(ROOT, "target", "release", "tritium")
    return release if os.path.exists(release) else os.path.join(ROOT, "target", "debug", "tritium")


def config_scale(model):
    text = open(os.path.join(MODELS_DIR, model, "config.pbtxt")).read()
    m = re.search(r'key: "scale" value \{ string_value: "([^"]+)" \}', text)
    return float(m.group(1)) if m else 1.0


def make_onnx(path, scale, dim=16):
    """OUT = (A + B) * scale, FP32 [batch, dim]: vecop's operation as an ONNX graph."""
    import onnx
    from onnx import TensorProto, helper
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", dim]) for n in ("A", "B", "OUT")]
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("Mul", ["SUM", "SCALE"], ["OUT"])],
        "vecop", io[:2], io[2:], initializer=[helper.make_tensor("SCALE", TensorProto.FLOAT, [], [scale])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def build_backends(tmp):
    """One Triton backend directory: python (a writable copy, the stub beside the library) and vecop."""
    backends = os.path.join(tmp, "backends")
    shutil.copytree(PY_BACKEND, os.path.join(backends, "python"), ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["bash", BUILD_SH, backends], check=True, stdout=subprocess.DEVNULL)
    return backends


def build_repos(tmp):
    """Tritium's repository (every model) and Triton's (the same files less vecop_onnx)."""
    full = os.path.join(tmp, "tritium_models")
    shutil.copytree(ADD_SUB, os.path.join(full, "add_sub"))
    for model in BOTH[1:] + TRITIUM_ONLY:
        os.makedirs(os.path.join(full, model, "1"))
        shutil.copy(os.path.join(MODELS_DIR, model, "config.pbtxt"), os.path.join(full, model, "config.pbtxt"))
        if model in MODEL_CODE:
            shutil.copy(os.path.join(MODELS_DIR, MODEL_CODE[model]), os.path.join(full, model, "1", "model.py"))
    make_onnx(os.path.join(full, "vecop_onnx", "1", "model.onnx"), config_scale("vecop_onnx"))
    triton = os.path.join(tmp, "triton_models")
    shutil.copytree(full, triton, ignore=lambda d, names: [n for n in names if n in TRITIUM_ONLY])
    return full, triton


def server_env():
    """Both servers' environment: the venv first on PATH (the stub embeds Python 3.11 and imports
    numpy<2 from it), and the wheel's libraries on LD_LIBRARY_PATH (tritonserver needs them, and
    the copied libtriton_python.so no longer finds them through its RPATH, $ORIGIN/../../../..;
    their names are all hashed, so nothing else of Tritium's resolves there)."""
    env = dict(os.environ)
    env["PATH"] = f"{PT_VENV_BIN}:{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = os.path.join(SITE, "nvidia_pytriton.libs")
    return env


def tritium_cmd(args, tmp, repo, backends, ports, server=None, exe_name="bench-server"):
    exe = os.path.join(tmp, exe_name)  # not "tritium": someone's `pkill tritium` is not for it
    os.symlink(os.path.abspath(server or args.server), exe)
    return [exe, "--model-repository", repo, "--http-port", str(ports[0]), "--grpc-port", str(ports[1]),
            "--metrics-port", str(ports[2]), "--onnxruntime-library", args.onnxruntime_library,
            "--backend-directory", backends]


def triton_cmd(repo, backends, ports):
    return [TRITONSERVER, "--model-repository", repo, "--backend-directory", backends,
            "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", "--http-port", str(ports[0]),
            "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2]), "--exit-timeout-secs", "5"]


def infer_json(base, model, inputs, parameters=None):
    body = {"inputs": [{"name": n, "datatype": "FP32", "shape": s, "data": d} for n, s, d in inputs]}
    if parameters:
        body["parameters"] = parameters
    _, out = common.http("POST", f"{base}/v2/models/{model}/infer", json.dumps(body).encode())
    return {o["name"]: o["data"] for o in json.loads(out)["outputs"]}


def check_answers(srv, models):
    """One request to each model, answers compared with Python's arithmetic (values exact in FP32)."""
    a4, b4 = [1.5, 2.0, -3.0, 4.25], [10.0, 20.0, 30.0, -40.0]
    a16, b16 = [float(i) / 2 for i in range(16)], [float(16 - i) for i in range(16)]
    for model in models:
        if model in ("add_sub", "bls_add_sub"):
            got = infer_json(srv.base, model, [("INPUT0", [4], a4), ("INPUT1", [4], b4)])
            want = {"OUTPUT0": [x + y for x, y in zip(a4, b4)], "OUTPUT1": [x - y for x, y in zip(a4, b4)]}
            cases = [(got, want)]
        else:
            shape = [16] if model == "bls_vecop" else [1, 16]
            scale = config_scale("vecop_c" if model == "bls_vecop" else model)
            cases = [(infer_json(srv.base, model, [("A", shape, a16), ("B", shape, b16)]),
                      {"OUT": [scale * (x + y) for x, y in zip(a16, b16)]})]
            if model in ("vecop_c", "vecop_py"):  # the request parameter `offset` too
                cases.append((infer_json(srv.base, model, [("A", shape, a16), ("B", shape, b16)], {"offset": 0.5}),
                              {"OUT": [scale * (x + y) + 0.5 for x, y in zip(a16, b16)]}))
        for got, want in cases:
            if got != want:
                raise RuntimeError(f"{srv.name} {model}: answered {got}, expected {want}")
    print(f"{srv.name}: answers of {', '.join(models)} checked", flush=True)


def tree_cpu_split(root_pid):
    """(CPU seconds of `root_pid` and every live process below it, of which the Python stubs)."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                comm, _, rest = f.read().partition("(")[2].rpartition(")")
        except OSError:
            continue
        fields = rest.split()
        procs[int(d)] = (int(fields[1]), int(fields[11]) + int(fields[12]), comm)
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, _) in procs.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(procs[p][1] for p in tree if p in procs) / tick
    stubs = sum(procs[p][1] for p in tree if p in procs and procs[p][2] == STUB_COMM) / tick
    return total, stubs


def measure(args, out_dir, rep, srv, other, model, protocol, conc, runs, failures):
    label = f"rep{rep}-{srv.name}-{model}-{protocol}-c{conc}"
    try:
        srv.alive()
        (cpu0, stub0), other0 = tree_cpu_split(srv.proc.pid), tree_cpu_split(other.proc.pid)[0]
        pa0, t0, steal0 = common.children_cpu_s(), time.monotonic(), steal_s()
        export = os.path.join(out_dir, label + ".requests.json") if args.requests else None
        r = common.run_pa(args.perf_analyzer, model, srv.url(protocol), protocol, conc,
                          os.path.join(out_dir, label + ".csv"), os.path.join(out_dir, label + ".log"),
                          interval_ms=args.interval_ms, stability=args.stability, server=srv,
                          extra=("--profile-export-file", export) if export else ())
        wall = time.monotonic() - t0
        r["steal_cores"] = (steal_s() - steal0) / wall
        if export:
            r["slow_requests"] = slow_requests(export)
        cpu1, stub1 = tree_cpu_split(srv.proc.pid)
        r.update(server_cores=(cpu1 - cpu0) / wall, stub_cores=(stub1 - stub0) / wall,
                 client_cores=(common.children_cpu_s() - pa0) / wall,
                 other_server_cores=(tree_cpu_split(other.proc.pid)[0] - other0) / wall)
    except (PAError, RuntimeError) as e:
        print(f"FAILED {label}: {e}", flush=True)
        failures.append({"run": label, "error": str(e)})
        return
    r.update(repeat=rep, server=srv.name, model=model, protocol=protocol)
    runs.append(r)
    print(f"{label:>40}: {r['infer_per_s']:8.1f} infer/s  p50 {r['p50_us']:>6} µs  p99 {r['p99_us']:>6} µs  "
          f"cores server {r['server_cores']:.2f} (stubs {r['stub_cores']:.2f}) client {r['client_cores']:.2f} "
          f"steal {r['steal_cores']:.3f}", flush=True)
    if "slow_requests" in r:
        s = r["slow_requests"]
        print(f"{'':>40}  {s['count']} requests, {len(s['slow'])} over {s['threshold_us']} µs: "
              + ", ".join(f"{ms:.1f} ms at {at:.3f} s" for at, ms in s["slow"][:12]), flush=True)


def steal_s():
    """The machine's CPU steal time so far (s): time a virtual CPU was runnable and the host ran
    something else."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def slow_requests(path, floor_us=2000):
    """From perf_analyzer's --profile-export-file: how many requests, and each one slower than
    max(floor_us, 4 × the median) as (seconds since the first request, ms), oldest first."""
    with open(path) as f:
        data = json.load(f)
    reqs = [q for e in data.get("experiments", []) for q in e.get("requests", []) if q.get("response_timestamps")]
    if not reqs:
        return {"count": 0, "threshold_us": floor_us, "slow": []}
    t0 = min(q["timestamp"] for q in reqs)
    lat = sorted((q["response_timestamps"][-1] - q["timestamp"]) / 1e3 for q in reqs)
    threshold = max(floor_us, 4 * lat[len(lat) // 2])
    slow = sorted(((q["timestamp"] - t0) / 1e9, (q["response_timestamps"][-1] - q["timestamp"]) / 1e6)
                  for q in reqs if (q["response_timestamps"][-1] - q["timestamp"]) / 1e3 > threshold)
    return {"count": len(reqs), "threshold_us": round(threshold), "slow": slow}


def warm_up(args, out_dir, srv, models):
    for model in models:
        try:
            common.run_pa(args.perf_analyzer, model, srv.url("grpc"), "grpc", 4,
                          os.path.join(out_dir, f"warmup-{srv.name}-{model}.csv"),
                          os.path.join(out_dir, f"warmup-{srv.name}-{model}.log"),
                          interval_ms=min(args.interval_ms, 1000), stability=50, retry=False)
        except PAError as e:
            print(f"warm-up {srv.name} {model}: {e}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(ap)
    ap.set_defaults(server=default_server())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--protocols", default="grpc,http", help="comma-separated: grpc, http")
    ap.add_argument("--concurrency", default="1,16", help="comma-separated perf_analyzer concurrencies")
    ap.add_argument("--summarize", metavar="OUT_DIR", help="recompute the tables of an earlier run's summary.json")
    ap.add_argument("--baseline", metavar="TRITIUM",
                    help="a second Tritium build (e.g. main's) up in the same run, measured at every point "
                         "beside the other two: adds the table --server ÷ --baseline")
    ap.add_argument("--requests", action="store_true",
                    help="keep perf_analyzer's per-request timestamps (<run>.requests.json) and list the slow "
                         "requests of each run (over 2 ms and over 4× the median) with their time in the run")
    ap.add_argument("--models", default=",".join(BOTH + TRITIUM_ONLY),
                    help="comma-separated subset of " + ",".join(BOTH + TRITIUM_ONLY))
    args = ap.parse_args()
    if args.summarize:
        with open(os.path.join(args.summarize, "summary.json")) as f:
            summarize(args.summarize, json.load(f))
        return
    protocols = [p for p in args.protocols.split(",") if p]
    concurrencies = [int(c) for c in args.concurrency.split(",") if c]
    if not set(protocols) <= {"grpc", "http"}:
        sys.exit(f"--protocols: grpc and/or http, not {args.protocols}")
    chosen = [m for m in args.models.split(",") if m]
    if not chosen or not set(chosen) <= set(BOTH + TRITIUM_ONLY):
        sys.exit(f"--models: a subset of {','.join(BOTH + TRITIUM_ONLY)}, not {args.models}")
    if args.baseline and not os.path.exists(args.baseline):
        sys.exit(f"missing {args.baseline}")
    for p in (args.server, args.perf_analyzer, args.onnxruntime_library, TRITONSERVER,
              os.path.join(PY_BACKEND, "libtriton_python.so"), os.path.join(PY_BACKEND, "triton_python_backend_stub")):
        if not os.path.exists(p):
            sys.exit(f"missing {p} (run loadtests/setup.sh, scripts/setup.sh and build the server first)")
    out_dir, _ = common.make_out_dir(args, "python_backend")
    header = common.run_header(args)
    header.update(triton="2.51 (nvidia-pytriton 0.7.0 wheel)", protocols=protocols, concurrency=concurrencies,
                  interval_ms=args.interval_ms, repeats=args.repeats, models=chosen,
                  baseline=args.baseline and os.path.abspath(args.baseline),
                  baseline_built_from=args.baseline and common.server_commit(args.baseline))
    runs, failures = [], []
    tmp = tempfile.mkdtemp(prefix="python-backend-")
    try:
        backends = build_backends(tmp)
        tritium_repo, triton_repo = build_repos(tmp)
        env = server_env()
        t_ports, r_ports, b_ports = common.free_ports(3), common.free_ports(3), common.free_ports(3)
        with contextlib.ExitStack() as stack:
            tritium = stack.enter_context(process_server(
                "tritium", tritium_cmd(args, tmp, tritium_repo, backends, t_ports), env,
                os.path.join(out_dir, "tritium.log"), t_ports[0], t_ports[1], ready=BOTH + TRITIUM_ONLY))
            triton = stack.enter_context(process_server(
                "triton", triton_cmd(triton_repo, backends, r_ports), env, os.path.join(out_dir, "triton.log"),
                r_ports[0], r_ports[1], ready=BOTH))
            servers = [tritium, triton]
            if args.baseline:
                servers.append(stack.enter_context(process_server(
                    "baseline", tritium_cmd(args, tmp, tritium_repo, backends, b_ports, args.baseline, "bench-baseline"),
                    env, os.path.join(out_dir, "baseline.log"), b_ports[0], b_ports[1], ready=BOTH + TRITIUM_ONLY)))
            for srv in servers:
                check_answers(srv, [m for m in chosen if srv.name != "triton" or m in BOTH])
            for srv in servers:
                warm_up(args, out_dir, srv, [m for m in chosen if srv.name != "triton" or m in BOTH])
            models = chosen
            for i in range(args.repeats):
                rep = i + 1
                order_s = servers if i % 2 == 0 else servers[::-1]
                order = models[i % len(models):] + models[:i % len(models)]
                for protocol in protocols:
                    for conc in concurrencies:
                        for model in order:
                            for srv in order_s:
                                other = triton if srv is not triton else tritium
                                if srv.name != "triton" or model in BOTH:
                                    measure(args, out_dir, rep, srv, other, model, protocol, conc, runs, failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = {"header": header, "runs": runs, "failures": failures}
    summarize(out_dir, summary)
    if failures:
        sys.exit(1)


def pick(runs, server, model, protocol, conc, rep):
    for r in runs:
        if (r["server"], r["model"], r["protocol"], r["concurrency"], r["repeat"]) == (server, model, protocol, conc,
                                                                                          rep):
            return r
    return None


def per_inference(runs, key):
    """Median CPU µs per inference of `key` (cores used) over runs; None when none measured."""
    xs = [r[key] * 1e6 / r["infer_per_s"] for r in runs if r.get(key) is not None and r["infer_per_s"]]
    return median(xs) if xs else None


def items_per_execution(runs):
    xs = [d["inference_count"] / d["execution_count"] for d in (r.get("server_stats_delta") for r in runs)
          if d and d["execution_count"]]
    return f"{median(xs):.2f}" if xs else "-"


def fmt_ratio(xs):
    return f"{median(xs):.2f} ({spread(xs)})" if xs else "no data"


def fmt_us(x):
    return "-" if x is None else f"{x:.0f}"


def summarize(out_dir, summary):
    """Ratios and tables from a run's `runs` (also for an earlier summary.json)."""
    header, runs, failures = summary["header"], summary["runs"], summary["failures"]
    points = sorted({(r["protocol"], r["concurrency"]) for r in runs}, key=lambda p: (p[0] != "grpc", p[1]))
    repeats = sorted({r["repeat"] for r in runs})
    ratios = {}
    servers = [s for s in SERVERS + ("baseline",) if any(r["server"] == s for r in runs)]
    lines = [f"# Python backend: Tritium vs Triton 2.51, and C / Python / ONNX: {header['time']}, "
             f"server built from {header['server_built_from']}", "",
             f"perf_analyzer {header['perf_analyzer']}, batch 1, {header['interval_ms']} ms windows; "
             f"{header['repeats']} repeats; {header['nproc']} cores; load average at start "
             f"{header['loadavg_at_start']:.2f}; server {header['server']}; failed runs: {len(failures)}", "",
             "## Tritium ÷ Triton 2.51, same backend library and model files", "",
             "Throughput ratio ≥ 1.0 and p99 ratio ≤ 1.0 meet the target. Median (min–max) over repeats.", "",
             "| model | protocol | c | infer/s ratio | p50 ratio | p99 ratio | Tritium infer/s | Triton infer/s | "
             "server CPU µs/inf Tritium (stubs) | Triton (stubs) | perf_analyzer CPU µs/inf Tritium / Triton |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model in [m for m in BOTH if any(r["model"] == m for r in runs)]:
        for protocol, conc in points:
            xs = {"infer": [], "p50": [], "p99": []}
            for rep in repeats:
                t, r = pick(runs, "tritium", model, protocol, conc, rep), pick(runs, "triton", model, protocol, conc, rep)
                if t and r:
                    xs["infer"].append(t["infer_per_s"] / r["infer_per_s"])
                    xs["p50"].append(t["p50_us"] / r["p50_us"])
                    xs["p99"].append(t["p99_us"] / r["p99_us"])
            for k, v in xs.items():
                ratios[f"{model}_{protocol}_c{conc}_tritium_over_triton_{k}"] = v
            sel = {s: [r for r in runs if (r["server"], r["model"], r["protocol"], r["concurrency"]) ==
                       (s, model, protocol, conc)] for s in SERVERS}
            ips = {s: median([r["infer_per_s"] for r in sel[s]]) if sel[s] else float("nan") for s in SERVERS}
            cpu = {s: f"{fmt_us(per_inference(sel[s], 'server_cores'))} ({fmt_us(per_inference(sel[s], 'stub_cores'))})"
                   for s in SERVERS}
            client = " / ".join(fmt_us(per_inference(sel[s], "client_cores")) for s in SERVERS)
            lines.append(f"| {model} | {protocol} | {conc} | {fmt_ratio(xs['infer'])} | {fmt_ratio(xs['p50'])} | "
                         f"{fmt_ratio(xs['p99'])} | {ips['tritium']:.0f} | {ips['triton']:.0f} | {cpu['tritium']} | "
                         f"{cpu['triton']} | {client} |")
    if "baseline" in servers:
        lines += ["", f"## This build ÷ the baseline build ({header.get('baseline')}, built from "
                  f"{header.get('baseline_built_from')}), same run", "",
                  "Median (min–max) over repeats; the last column is the baseline's own infer/s ratio to Triton.", "",
                  "| model | protocol | c | infer/s ratio | p50 ratio | p99 ratio | this build infer/s | "
                  "baseline infer/s | baseline ÷ Triton infer/s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for model in [m for m in BOTH + TRITIUM_ONLY if any(r["model"] == m for r in runs)]:
            for protocol, conc in points:
                xs, base = {"infer": [], "p50": [], "p99": []}, []
                for rep in repeats:
                    t, b = pick(runs, "tritium", model, protocol, conc, rep), pick(runs, "baseline", model, protocol,
                                                                                 conc, rep)
                    r = pick(runs, "triton", model, protocol, conc, rep)
                    if t and b:
                        xs["infer"].append(t["infer_per_s"] / b["infer_per_s"])
                        xs["p50"].append(t["p50_us"] / b["p50_us"])
                        xs["p99"].append(t["p99_us"] / b["p99_us"])
                    if b and r:
                        base.append(b["infer_per_s"] / r["infer_per_s"])
                for k, v in xs.items():
                    ratios[f"{model}_{protocol}_c{conc}_tritium_over_baseline_{k}"] = v
                ips = {s: median([r["infer_per_s"] for r in runs if (r["server"], r["model"], r["protocol"],
                                  r["concurrency"]) == (s, model, protocol, conc)] or [float("nan")])
                       for s in ("tritium", "baseline")}
                lines.append(f"| {model} | {protocol} | {conc} | {fmt_ratio(xs['infer'])} | {fmt_ratio(xs['p50'])} | "
                             f"{fmt_ratio(xs['p99'])} | {ips['tritium']:.0f} | {ips['baseline']:.0f} | "
                             f"{fmt_ratio(base) if base else '-'} |")
    rows = []
    for server, num in (("tritium", "vecop_c"), ("tritium", "vecop_onnx"), ("triton", "vecop_c")):
        for protocol, conc in points:
            xs = []
            for rep in repeats:
                n, d = pick(runs, server, num, protocol, conc, rep), pick(runs, server, "vecop_py", protocol, conc, rep)
                if n and d:
                    xs.append(n["infer_per_s"] / d["infer_per_s"])
            ratios[f"{server}_{num}_over_vecop_py_{protocol}_c{conc}"] = xs
            if xs:  # none when --models left a backend out
                rows.append(f"| {num} ÷ vecop_py on {server} | {protocol} | {conc} | {fmt_ratio(xs)} |")
    if rows:
        lines += ["", "## The same operation (OUT = 2 · (A + B), FP32 [16]) on three backends", "",
                  "Infer/s ratios within a repeat; the seed's claim is C ÷ Python = 3–5×.", "",
                  "| ratio | protocol | c | median (min–max) |", "| --- | --- | --- | --- |"] + rows
    lines += ["", "Items per execution: the model's inference_count ÷ execution_count over the whole perf_analyzer "
              "run (its dynamic batcher's merging of the concurrent requests).", "",
              "| server | model | protocol | c | infer/s median (min–max) | p50 µs | p99 µs | "
              "server CPU µs/inf (stubs) | items per execution |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for server in servers:
        for model in ("vecop_c", "vecop_py", "vecop_onnx"):
            for protocol, conc in points:
                sel = [r for r in runs if (r["server"], r["model"], r["protocol"], r["concurrency"]) ==
                       (server, model, protocol, conc)]
                if sel:
                    ips = [r["infer_per_s"] for r in sel]
                    lines.append(f"| {server} | {model} | {protocol} | {conc} | {median(ips):.0f} ({spread(ips)}) | "
                                 f"{median([r['p50_us'] for r in sel]):.0f} | {median([r['p99_us'] for r in sel]):.0f} | "
                                 f"{fmt_us(per_inference(sel, 'server_cores'))} "
                                 f"({fmt_us(per_inference(sel, 'stub_cores'))}) | {items_per_execution(sel)} |")
    idle = [r["other_server_cores"] for r in runs if r.get("other_server_cores") is not None]
    if idle:
        lines += ["", f"The idle server used {median(idle):.3f} cores (median, max {max(idle):.3f}) while the "
                  "other was measured."]
    if failures:
        lines += ["", "Failed runs:"] + [f"- {f['run']}: {f['error']}" for f in failures]
    summary["ratios"] = ratios
    common.write_summary(out_dir, summary, lines)


if __name__ == "__main__":
    main()
